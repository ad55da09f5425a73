"""Slow consumer: one subscriber never reads while ten others keep up.

The server must not buffer for the slow one without bound, must not make
anyone else wait for it, and must cut it off with a close that says where
to resume; resuming from there loses nothing and repeats nothing.

A client that reads nothing at all cannot be sent anything, not even a close
frame: the server drops its subscription when its queue overflows (from then
on nothing more is kept for it) and the close with the resume cursor waits
in the socket behind the events already sent. The test's slow client reads
only at the end, and must then find exactly that.
"""

from __future__ import annotations

import asyncio
import json
import socket
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from tests.harness import ServerFactory
from tests.reliability.conftest import DEBUG_ENV, config
from tests.reliability.support import of_turn, rss, server_problems
from tests.server.support import WAIT, Stream, new_session, start_turn, use, wait_turn

FAST_CLIENTS = 10
FLOOD_TURNS = 14
EVENTS_PER_TURN = 1000
EVENT_BYTES = 4000  # ~4 MB per turn, ~56 MB in all: far beyond every buffer on the way
MIB = 1024 * 1024


def _small_buffer_socket(port: int) -> socket.socket:
    """A connected socket with a small fixed receive buffer (no autotuning), so a
    client that stops reading pushes back on the server quickly."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)
    sock.connect(("127.0.0.1", port))
    sock.setblocking(False)
    return sock


@pytest.mark.slow
@pytest.mark.timeout(300)  # about 40 s on a busy 2-core runner
async def test_a_stuck_subscriber_is_cut_and_resumes_while_others_keep_up(
    server_factory: ServerFactory, workspace: Path
) -> None:
    # The default queue (1024 events per socket): the ten readers share this
    # process and must not be mistaken for slow ones while it parses their JSON.
    srv = server_factory(config(), env=DEBUG_ENV)
    async with srv.client("driver", timeout=60) as http:
        sid = await new_session(http, workspace)
        url = f"/sessions/{sid}/events"
        fast = [
            await Stream.open(srv.ws_url(url, after=0, client=f"fast-{i}"), after=0)
            for i in range(FAST_CLIENTS)
        ]

        async def run_turn(tool_use_id: str, count: int) -> None:
            tid = await start_turn(
                http, sid, use(tool_use_id, "rl_flood", count=count, size=EVENT_BYTES)
            )
            # The turn ends while the slow client holds its socket unread: the
            # server never waits for it.
            turn = await wait_turn(http, sid, tid, within=120)
            assert turn["status"] == "completed"
            # Every fast client has the whole turn before the next one starts, so
            # none of them is ever more than one turn (< its queue) behind.
            for stream in fast:
                await stream.until("turn.completed", of_turn(tid), within=60)

        await run_turn("warm", 100)
        # The slow client attaches now and never reads a single message.
        slow = await connect(
            srv.ws_url(url, after=0, client="slow"),
            max_queue=1,
            compression=None,
            open_timeout=WAIT,
            sock=_small_buffer_socket(srv.port),
        )
        baseline = rss(srv.pid)
        after_turn: list[int] = []
        for t in range(FLOOD_TURNS):
            await run_turn(f"flood{t}", EVENTS_PER_TURN)
            after_turn.append(rss(srv.pid))
        clients = (await http.get(f"/sessions/{sid}/clients")).json()["clients"]

    flood_total = FLOOD_TURNS * EVENTS_PER_TURN * EVENT_BYTES
    report = f"baseline {baseline / MIB:.1f} MiB, after each turn: " + ", ".join(
        f"{x / MIB:.1f}" for x in after_turn
    )
    print(report)
    # Memory: the server did not keep what it could not send to the slow client.
    assert max(after_turn) - baseline < flood_total / 2, report

    # The ten others got everything, in order (Stream checked each step), and
    # were never cut off.
    names = {c["client_name"] for c in clients}
    assert {f"fast-{i}" for i in range(FAST_CLIENTS)} <= names
    reference = [e["id"] for e in fast[0].events]
    for stream in fast:
        assert [e["id"] for e in stream.events] == reference
    floods = [e for e in fast[0].events if e["type"] == "tool.output_delta"]
    assert len(floods) == 100 + FLOOD_TURNS * EVENTS_PER_TURN

    # The slow one: what it was sent is contiguous; the close says where to resume.
    received: list[dict[str, Any]] = []
    with pytest.raises(ConnectionClosed) as closed:
        async with asyncio.timeout(60):
            while True:
                received.append(json.loads(await slow.recv()))
    rcvd = closed.value.rcvd
    assert rcvd is not None and rcvd.code == 4429, rcvd
    last = received[-1]["session_seq"]
    assert [e["session_seq"] for e in received] == list(range(1, last + 1))
    assert rcvd.reason.endswith(f"resume with after={last}")
    assert last < len(reference)  # it really was cut before the end
    # What the server held for it is bounded by its queue and the socket buffers
    # (a few MiB here), not by the flood (56 MB).
    held = sum(len(e["data"].get("text", "")) for e in received)
    assert held < flood_total / 4
    async with await Stream.open(srv.ws_url(url, after=last), after=last) as resumed:
        while len(resumed.events) < len(reference) - last:
            await resumed.next(within=30)
    # Exactly the rest, as the fast clients saw it (client.* presence events of
    # the resumed socket itself come after the end of the reference).
    rest = [e["id"] for e in resumed.events][: len(reference) - last]
    assert [e["id"] for e in received] + rest == reference[: len(received) + len(rest)]
    for stream in fast:
        await stream.close()
    assert not server_problems(srv), server_problems(srv)
