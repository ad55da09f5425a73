"""Crash: kill -9 the server in the middle of work, restart it, check what survived.

- During a burst of writes (a tool rewriting files through the workspace API
  while another session floods the event log): the log is intact up to the
  last event any client received, both databases pass SQLite's integrity
  check, and every file holds its old or its new content, never a mix.
- During a pending confirmation: the write never happens, the request is
  gone after the restart (answering it is 404), the turn fails with
  ``server_restart`` and the call gets an error result.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.harness import ServerFactory, ServerProcess
from tests.reliability.conftest import DEBUG_ENV, config
from tests.reliability.plugin_tools import file_content
from tests.reliability.support import (
    Event,
    assert_gapless,
    integrity,
    logged_events,
    server_problems,
)
from tests.server.support import Stream, new_session, start_turn, use, wait_turn

FILES = 60
FILE_BYTES = 2 * 1024 * 1024


def _check_files(folder: Path, generations: tuple[int, ...]) -> dict[int, int]:
    """Every file whole, in one of ``generations``; returns how many of each."""
    counts = dict.fromkeys(generations, 0)
    for i in range(FILES):
        name = f"f{i:05d}.txt"
        text = (folder / name).read_text(encoding="utf-8")
        matching = [g for g in generations if text == file_content(name, g, FILE_BYTES)]
        assert matching, f"{name} is torn: {len(text)} bytes, starts {text[:40]!r}"
        counts[matching[0]] += 1
    return counts


def _leftovers(folder: Path) -> list[str]:
    expected = {f"f{i:05d}.txt" for i in range(FILES)}
    return sorted(p.name for p in folder.iterdir() if p.name not in expected)


async def _collect(stream: Stream, into: list[Event]) -> None:
    """Read until the server dies; keep what arrived."""
    try:
        while True:
            await stream.next(within=60)
    except Exception:
        pass
    into.extend(stream.events)


async def test_kill_9_during_a_burst_of_writes(
    server_factory: ServerFactory, tmp_path: Path
) -> None:
    srv = server_factory(config(), env=DEBUG_ENV)
    writer_ws, flood_ws = tmp_path / "writer", tmp_path / "flood"
    writer_ws.mkdir()
    flood_ws.mkdir()
    async with srv.client("crash") as http:
        writer = await new_session(http, writer_ws)
        flooder = await new_session(http, flood_ws)
        # Generation 0 of every file, complete, before the crash run.
        gen0 = use("g0", "rl_write_many", dir="out", count=FILES, size=FILE_BYTES, generation=0)
        tid = await start_turn(http, writer, gen0)
        assert (await wait_turn(http, writer, tid, within=120))["status"] == "completed"

        streams = [
            await Stream.open(srv.ws_url(f"/sessions/{sid}/events", after=0), after=0)
            for sid in (writer, writer, flooder)
        ]
        watcher = await Stream.open(srv.ws_url("/events", after=0), per_session=False, after=0)
        received: list[list[Event]] = [[] for _ in range(len(streams) + 1)]
        # The first stream is read here, to time the kill; the others in the background.
        collectors = [
            asyncio.create_task(_collect(s, into))
            for s, into in zip([*streams[1:], watcher], received[1:], strict=True)
        ]
        # Paced: the kill comes once 20 files are reported written, and events reach
        # clients only after the log commit; without a pause a loaded machine could
        # finish all 60 files before the kill lands (40 x 50 ms leaves 2 s of margin).
        gen1 = use(
            "g1",
            "rl_write_many",
            dir="out",
            count=FILES,
            size=FILE_BYTES,
            generation=1,
            pause=0.05,
        )
        write_turn = await start_turn(http, writer, gen1)
        # Far more than it can publish before the kill: the burst is still going then.
        flood = use("fl", "rl_flood", count=2_000_000, size=20)
        flood_turn = await start_turn(http, flooder, flood)
        # Kill once the rewrite is well under way (20 files reported written).
        written = 0
        while written < 20:
            event = await streams[0].next(within=60)
            written += event["type"] == "tool.output_delta" and event["turn_id"] == write_turn
    srv.kill()
    collectors.append(asyncio.create_task(_collect(streams[0], received[0])))
    await asyncio.wait_for(asyncio.gather(*collectors), 30)

    # Before anything touches the files again: both databases are sound, every
    # file is whole (old or new), and nothing half-written is left beside them.
    assert integrity(srv.data_dir / "events.sqlite3") == "ok"
    assert integrity(srv.data_dir / "state.sqlite3") == "ok"
    counts = _check_files(writer_ws / "out", (0, 1))
    assert counts[1] >= 20, counts  # the kill really came in the middle
    assert counts[0] >= 1, counts  # ... and not after the end
    logged = logged_events(srv.data_dir)
    assert_gapless(logged)
    by_id = {e["id"]: e for e in logged}
    delivered = [e for events in received for e in events]
    # Durable before visible: every event any client received is in the log, unchanged.
    assert delivered and all(by_id.get(e["id"]) == e for e in delivered)

    srv.start()
    async with srv.client("after") as http:
        for sid, tid in ((writer, write_turn), (flooder, flood_turn)):
            turn = await wait_turn(http, sid, tid)
            assert turn["status"] == "failed" and turn["reason"] == "server_restart"
            messages = (await http.get(f"/sessions/{sid}/messages")).json()["messages"]
            assert messages[-1]["role"] == "tool" and messages[-1]["content"][0]["is_error"]
        # Resuming from the last event received continues the same log.
        last = max(e["session_seq"] for e in received[0])
        async with await Stream.open(
            srv.ws_url(f"/sessions/{writer}/events", after=last), after=last
        ) as resumed:
            failed = await resumed.until("turn.failed")
    assert failed["turn_id"] == write_turn
    assert_gapless(logged_events(srv.data_dir))
    assert _check_files(writer_ws / "out", (0, 1)) == counts
    assert _leftovers(writer_ws / "out") == [], "temporary files left in the workspace"


async def test_kill_9_during_a_pending_confirmation(
    server_factory: ServerFactory, workspace: Path
) -> None:
    srv: ServerProcess = server_factory(config(), env=DEBUG_ENV)
    async with srv.client("alice") as http:
        sid = await new_session(http, workspace)
        async with await Stream.open(srv.ws_url(f"/sessions/{sid}/events", after=0)) as stream:
            tid = await start_turn(
                http, sid, use("w1", "write_file", path="note.txt", content="never\n")
            )
            requested = await stream.until("tool.confirmation_requested")
            before = list(stream.events)
    request_id = requested["data"]["request_id"]
    srv.kill()
    assert not (workspace / "note.txt").exists()
    assert integrity(srv.data_dir / "events.sqlite3") == "ok"
    logged = logged_events(srv.data_dir)
    assert [e for e in logged if e["session_id"] == sid][: len(before)] == before

    srv.start()
    async with srv.client("alice") as http:
        turn = await wait_turn(http, sid, tid)
        assert turn["status"] == "failed" and turn["reason"] == "server_restart"
        assert (await http.get(f"/sessions/{sid}/confirmations")).json()["confirmations"] == []
        late = await http.post(
            f"/sessions/{sid}/turns/{tid}/confirmations/{request_id}", json={"decision": "allow"}
        )
        assert late.status_code == 404, late.text
        messages = (await http.get(f"/sessions/{sid}/messages")).json()["messages"]
        assert [m["role"] for m in messages] == ["assistant", "tool"]
        result = messages[1]["content"][0]
        assert result["tool_use_id"] == "w1" and result["is_error"] is True
        async with await Stream.open(
            srv.ws_url(f"/sessions/{sid}/events", after=0), after=0
        ) as replay:
            await replay.until("turn.failed")
    assert replay.events[: len(before)] == before
    assert not [e for e in replay.events if e["type"] == "tool.completed"]
    assert not (workspace / "note.txt").exists()
    # A new turn in the same session works after the crash.
    async with srv.client("alice") as http:
        tid2 = await start_turn(http, sid, use("e1", "rl_echo", text="alive"))
        assert (await wait_turn(http, sid, tid2))["status"] == "completed"
    assert not server_problems(srv), server_problems(srv)
