"""Memory and disk bounded in bytes (issue 11, item 5).

A real server, three WebSocket sockets that never read, and turns whose tools
return large results (16 reads of ~1 MiB files per turn). What the server may
hold for the stuck sockets is bounded by their byte budget
(``events.subscriber_queue_bytes``), not by what the turns produce, because
events carry tool output cut to ``events.max_event_output_bytes`` while the
full results go to the conversation and the turn record once. The event log
is kept within ``events.retention_bytes`` in the background, and a cursor
older than what it keeps gets the explicit ``cursor expired`` close.

The RSS bound is derived from the budgets, never from time: three queues, a
turn's working set (each result held a few times over while it is stored and
rendered) and a fixed allowance for allocator slack.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from tests.harness import ServerFactory
from tests.reliability.conftest import DEBUG_ENV, config
from tests.reliability.support import rss, server_problems
from tests.reliability.test_slow_consumer import _small_buffer_socket
from tests.server.support import WAIT, Stream, new_session, start_turn, use, wait_turn

MIB = 1024 * 1024
FILE_BYTES = MIB
READS_PER_TURN = 16
TURNS = 8
STUCK_SOCKETS = 3
QUEUE_BYTES = 8 * MIB
EVENT_OUTPUT_BYTES = 64 * 1024
RETENTION_BYTES = 4 * MIB
# A result is held a few times while a turn runs (the tool's string, the result
# block, the message and turn-record JSON); allow four copies of a whole turn.
TURN_WORKING_SET = 4 * READS_PER_TURN * FILE_BYTES
SLACK = 48 * MIB
RSS_BOUND = STUCK_SOCKETS * QUEUE_BYTES + TURN_WORKING_SET + SLACK


def _fill(workspace: Path) -> list[str]:
    names = []
    for i in range(READS_PER_TURN):
        line = f"file {i:02d} " + "abcdefghij" * 10 + "\n"
        name = f"big_{i:02d}.txt"
        (workspace / name).write_text(line * (FILE_BYTES // len(line)))
        names.append(name)
    return names


async def _drain(
    ws: ClientConnection, last_turn: str, within: float, most: int = 120
) -> tuple[list[dict[str, Any]], Any]:
    """What a stuck socket was sent (the first ``most`` events are enough to
    check), up to the end of ``last_turn`` or its close (then how it was
    closed; None if it was not)."""
    received: list[dict[str, Any]] = []
    try:
        async with asyncio.timeout(within):
            for _ in range(most):
                event = json.loads(await ws.recv())
                received.append(event)
                if event["type"] == "turn.completed" and event["turn_id"] == last_turn:
                    break
    except ConnectionClosed as closed:
        return received, closed.rcvd
    return received, None


def _log_bytes_in_use(path: Path) -> int:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        free = conn.execute("PRAGMA freelist_count").fetchone()[0]
        size = conn.execute("PRAGMA page_size").fetchone()[0]
        return int((pages - free) * size)
    finally:
        conn.close()


@pytest.mark.slow
@pytest.mark.timeout(300)  # about 40 s on a busy 2-core runner
async def test_stuck_sockets_and_large_results_stay_within_the_byte_budgets(
    server_factory: ServerFactory, workspace: Path
) -> None:
    names = _fill(workspace)
    srv = server_factory(
        config(
            events={
                "subscriber_queue_bytes": QUEUE_BYTES,
                "max_event_output_bytes": EVENT_OUTPUT_BYTES,
                "retention_bytes": RETENTION_BYTES,
                "prune_interval": 0.5,
            }
        ),
        env=DEBUG_ENV,
    )
    async with srv.client("driver", timeout=60) as http:
        sid = await new_session(http, workspace)

        async def run_turn(label: str) -> str:
            uses = [use(f"{label}_{i}", "read_file", path=n) for i, n in enumerate(names)]
            tid = await start_turn(http, sid, *uses)
            turn = await wait_turn(http, sid, tid, within=120)
            assert turn["status"] == "completed", turn
            return tid

        first = await run_turn("warm")  # imports and first-use allocations
        stuck = [
            await connect(
                # Live from now on (no cursor): the log is pruned under them.
                srv.ws_url(path, client=f"stuck-{i}"),
                max_queue=1,
                max_size=None,  # a large event must not make the client hang up
                compression=None,
                open_timeout=WAIT,
                sock=_small_buffer_socket(srv.port),
            )
            for i, path in enumerate(
                [f"/sessions/{sid}/events", f"/sessions/{sid}/events", "/events"]
            )
        ]
        clients = (await http.get(f"/sessions/{sid}/clients")).json()["clients"]
        assert len(clients) == 2  # (the third watches all sessions)
        baseline = rss(srv.pid)
        after_turn: list[int] = []
        last = first
        for t in range(TURNS):
            last = await run_turn(f"t{t}")
            after_turn.append(rss(srv.pid))

        # The full results are kept: in the turn record and in the conversation.
        turn = (await http.get(f"/sessions/{sid}/turns/{first}")).json()
        assert [len(r["content"][0]["text"]) for r in turn["results"]] == [
            (workspace / n).stat().st_size for n in names
        ]
        messages = (await http.get(f"/sessions/{sid}/messages")).json()["messages"]
        assert sum(m["role"] == "tool" for m in messages) == TURNS + 1

    growth = max(after_turn) - baseline
    produced = TURNS * READS_PER_TURN * FILE_BYTES
    report = (
        f"RSS baseline {baseline / MIB:.1f} MiB, after each turn: "
        + ", ".join(f"{x / MIB:.1f}" for x in after_turn)
        + f"; growth {growth / MIB:.1f} MiB, bound {RSS_BOUND / MIB:.0f} MiB, "
        f"results produced {produced / MIB:.0f} MiB x {STUCK_SOCKETS} sockets"
    )
    print(report)
    assert growth < RSS_BOUND, report

    # What the stuck sockets were sent: events with the output cut, in order,
    # never more than their budget beyond the socket buffers; a cut-off one was
    # told where to resume.
    for ws in stuck:
        received, rcvd = await _drain(ws, last, within=60)
        seqs = [e["seq"] for e in received]
        assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
        for event in received:
            # No event carries a whole result: not tool.completed, nor the tool
            # message's message.completed (its results share the limit).
            size = len(json.dumps(event))
            assert size < 2 * EVENT_OUTPUT_BYTES, (event["type"], size)
            if event["type"] == "tool.completed":
                assert event["data"]["truncated"] is True
                assert event["data"]["output_bytes"] >= FILE_BYTES - 200
                assert len(event["data"]["content"][0]["text"]) <= EVENT_OUTPUT_BYTES
        assert received, "a stuck socket was sent nothing at all"
        if rcvd is not None:
            assert rcvd.code == 4429, rcvd
            assert "resume with after=" in rcvd.reason
        # Gone without a close handshake, which would wait behind the unread data.
        ws.transport.abort()

    # Retention: the log is pruned to its byte budget in the background, and a
    # cursor older than what it keeps is told so explicitly.
    log_path = srv.data_dir / "events.sqlite3"
    async with asyncio.timeout(60):
        # Polled: the pruner runs in the server process, nothing here can wait on it.
        for _ in range(300):
            if _log_bytes_in_use(log_path) <= RETENTION_BYTES + MIB:
                break
            await asyncio.sleep(0.2)
    in_use = _log_bytes_in_use(log_path)
    assert in_use <= RETENTION_BYTES + MIB, f"event log holds {in_use} bytes of pages"
    stream = await Stream.open(srv.ws_url(f"/sessions/{sid}/events", after=0), after=0)
    code, reason = await stream.closed()
    assert code == 4410 and "cursor expired" in reason, (code, reason)
    assert not server_problems(srv), server_problems(srv)
