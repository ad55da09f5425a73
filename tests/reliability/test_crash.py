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
import sqlite3
from pathlib import Path

import httpx2

from tests.harness import ServerFactory, ServerProcess
from tests.reliability.conftest import DEBUG_ENV, config
from tests.reliability.plugin_tools import file_content
from tests.reliability.support import (
    Event,
    assert_gapless,
    integrity,
    logged_events,
    of_turn,
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
    assert_gapless(logged_events(srv.data_dir))

    srv.start()
    # Durable before visible: every event any client received is in the log,
    # unchanged, once the restart's log process committed what the crash left
    # only in the event ring (it does so before the server reads the log).
    logged = logged_events(srv.data_dir)
    assert_gapless(logged)
    by_id = {e["id"]: e for e in logged}
    delivered = [e for events in received for e in events]
    assert delivered and all(by_id.get(e["id"]) == e for e in delivered)
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

    srv.start()
    # What the client saw is in the log (the restart commits what the crash
    # left only in the event ring before the server reads the log).
    logged = logged_events(srv.data_dir)
    assert [e for e in logged if e["session_id"] == sid][: len(before)] == before
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


async def test_kill_9_during_a_pending_call_whose_id_an_earlier_turn_used(
    server_factory: ServerFactory, workspace: Path
) -> None:
    """Recovery matches calls and results within a turn: an id answered in an
    earlier turn does not count as an answer to the same id in the turn the
    crash interrupted, so the conversation never ends on an unanswered call."""
    srv = server_factory(config(), env=DEBUG_ENV)
    async with srv.client("alice") as http:
        sid = await new_session(http, workspace)
        first = await start_turn(http, sid, use("same", "rl_echo", text="one"))
        assert (await wait_turn(http, sid, first))["status"] == "completed"
        async with await Stream.open(srv.ws_url(f"/sessions/{sid}/events", after=0)) as stream:
            second = await start_turn(
                http, sid, use("same", "write_file", path="note.txt", content="never\n")
            )
            await stream.until("tool.confirmation_requested", of_turn(second))
    srv.kill()

    srv.start()
    async with srv.client("alice") as http:
        turn = await wait_turn(http, sid, second)
        assert turn["status"] == "failed" and turn["reason"] == "server_restart"
        messages = (await http.get(f"/sessions/{sid}/messages")).json()["messages"]
    assert [(m["role"], m["turn_id"]) for m in messages] == [
        ("assistant", first),
        ("tool", first),
        ("assistant", second),
        ("tool", second),
    ]
    result = messages[-1]["content"][0]
    assert result["tool_use_id"] == "same" and result["is_error"] is True
    assert "Interrupted" in result["content"][0]["text"]
    assert not (workspace / "note.txt").exists()


TERMINAL = ("turn.completed", "turn.failed", "turn.cancelled")
KILL_DELAYS = (0.05, 0.4, 0.12, 0.8, 0.25, 0.02, 0.6, 0.18)  # seconds into each burst
SESSIONS = 3


def _store_turns(data_dir: Path) -> dict[str, str]:
    """Every turn in the state database and its status, read from the file."""
    conn = sqlite3.connect(f"file:{data_dir / 'state.sqlite3'}?mode=ro", uri=True)
    try:
        return dict(conn.execute("SELECT id, status FROM turns").fetchall())
    finally:
        conn.close()


def _check_one_order_of_truth(data_dir: Path) -> int:
    """Every turn the state database has ended has exactly one terminal event in
    the log, of its status, and no event of the turn comes after it. Returns how
    many turns were checked."""
    turns = _store_turns(data_dir)
    logged = logged_events(data_dir)
    assert_gapless(logged)
    ends: dict[str, list[Event]] = {}
    last_of_turn: dict[str, Event] = {}
    for event in logged:
        if event["turn_id"] is not None:
            last_of_turn[event["turn_id"]] = event
            if event["type"] in TERMINAL:
                ends.setdefault(event["turn_id"], []).append(event)
    for turn_id, status in turns.items():
        assert status != "running", f"{turn_id} still running after recovery"
        found = [e["type"] for e in ends.get(turn_id, [])]
        assert found == [f"turn.{status}"], f"{turn_id} is {status} in the store; log: {found}"
        assert last_of_turn[turn_id]["type"] in TERMINAL, f"{turn_id} has events after its end"
    # ... and the log has no turn the store does not know.
    assert set(last_of_turn) <= set(turns)
    return len(turns)


async def _drive_turns(http: httpx2.AsyncClient, sid: str, started: list[str]) -> None:
    """Start turns back to back (each three calls) until the server dies."""
    n = 0
    while True:
        n += 1
        calls = [use(f"c{n}_{i}", "rl_echo", text=f"turn {n} call {i}") for i in range(3)]
        try:
            response = await http.post(f"/sessions/{sid}/turns", json={"tool_uses": calls})
        except httpx2.TransportError:
            return  # killed
        if response.status_code == 202:
            started.append(response.json()["turn_id"])
        else:
            assert response.status_code == 409, response.text
            await asyncio.sleep(0.002)


async def test_kill_9_at_many_points_of_a_burst_of_turns(
    server_factory: ServerFactory, tmp_path: Path
) -> None:
    """One order of truth: kill -9 at varied points of a burst of turns in
    several sessions, restart each time. After every restart the state
    database and the log agree on every turn (exactly one terminal event, of
    the stored status), and every client resuming its stream from where it
    was sees each turn it saw start end with a terminal event."""
    srv = server_factory(config(), env=DEBUG_ENV)
    sids: list[str] = []
    async with srv.client("burst") as http:
        for i in range(SESSIONS):
            (tmp_path / f"ws{i}").mkdir()
            sids.append(await new_session(http, tmp_path / f"ws{i}"))
    cursors = dict.fromkeys(sids, 0)
    seen_started: dict[str, set[str]] = {sid: set() for sid in sids}
    checked = 0
    for delay in KILL_DELAYS:
        streams = {
            sid: await Stream.open(
                srv.ws_url(f"/sessions/{sid}/events", after=cursors[sid]), after=cursors[sid]
            )
            for sid in sids
        }
        readers = {sid: asyncio.create_task(_collect(s, [])) for sid, s in streams.items()}
        started: dict[str, list[str]] = {sid: [] for sid in sids}
        async with srv.client("burst", timeout=30) as http:
            drivers = [asyncio.create_task(_drive_turns(http, sid, started[sid])) for sid in sids]
            await asyncio.sleep(delay)
            srv.kill()
            await asyncio.wait_for(asyncio.gather(*drivers, *readers.values()), 30)
        for sid, stream in streams.items():
            if stream.events:
                cursors[sid] = stream.events[-1]["session_seq"]
            seen_started[sid] |= {e["turn_id"] for e in stream.of("turn.started")}
            for event in stream.events:
                if event["type"] in TERMINAL:
                    seen_started[sid].discard(event["turn_id"])
        assert integrity(srv.data_dir / "events.sqlite3") == "ok"
        assert integrity(srv.data_dir / "state.sqlite3") == "ok"

        srv.start()  # recovery runs before it answers /healthz
        checked = _check_one_order_of_truth(srv.data_dir)
        # Each client resumes where its stream stopped: every turn it saw start ends.
        for sid in sids:
            async with await Stream.open(
                srv.ws_url(f"/sessions/{sid}/events", after=cursors[sid]), after=cursors[sid]
            ) as resumed:
                while seen_started[sid]:
                    event = await resumed.next(within=60)
                    if event["type"] in TERMINAL:
                        seen_started[sid].discard(event["turn_id"])
                    elif event["type"] == "turn.started":
                        seen_started[sid].add(event["turn_id"])
                if resumed.events:
                    cursors[sid] = resumed.events[-1]["session_seq"]
    # The burst really ran turns, and some kills landed mid-turn.
    assert checked >= len(KILL_DELAYS)
    restarted = [
        e
        for e in logged_events(srv.data_dir)
        if e["type"] == "turn.failed" and e["data"]["reason"] == "server_restart"
    ]
    assert restarted, "no kill landed inside a turn"
    async with srv.client("after") as http:
        tid = await start_turn(http, sids[0], use("last", "rl_echo", text="alive"))
        assert (await wait_turn(http, sids[0], tid))["status"] == "completed"
    assert not server_problems(srv), server_problems(srv)


async def test_recovery_takes_an_end_the_log_already_holds(
    server_factory: ServerFactory, workspace: Path
) -> None:
    """The one crash window the ordering leaves: the terminal event is durable
    but the store still says ``running``. Produced exactly: a finished turn's
    row is set back to ``running`` while the server is down. Recovery copies
    the logged end into the store and publishes no second terminal event."""
    srv = server_factory(config(), env=DEBUG_ENV)
    async with srv.client("alice") as http:
        sid = await new_session(http, workspace)
        tid = await start_turn(http, sid, use("e1", "rl_echo", text="done"))
        done = await wait_turn(http, sid, tid)
        assert done["status"] == "completed"
    srv.kill()
    conn = sqlite3.connect(srv.data_dir / "state.sqlite3")
    with conn:
        conn.execute("UPDATE turns SET status = 'running', finished_at = NULL WHERE id = ?", (tid,))
    conn.close()

    srv.start()
    async with srv.client("alice") as http:
        turn = await wait_turn(http, sid, tid)
    assert turn["status"] == "completed" and turn["results"] == done["results"]
    ends = [e["type"] for e in logged_events(srv.data_dir) if e["turn_id"] == tid]
    assert [t for t in ends if t in TERMINAL] == ["turn.completed"]
