"""Replays cost what they deliver (issue 11, item 7).

A real server (in this process, so the test can read its bus's counters) on a
data dir whose event log already holds tens of thousands of events of
sessions the user token does not own. Cost is measured in log pages
requested and records returned (``EventBus.stats``), never in time:

- the user token's ``/events?after=0`` requests no page at all, and its
  stream is live at once;
- an admin replay of the whole log whose socket goes away stops requesting
  pages (it has requested only a few of the many the log holds).
"""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import connect

from eventbus import EventBus, EventLog, EventRecord
from eventbus.encoding import EnvelopeEncoder, UtcClock
from tests.harness import InProcessServer
from tests.reliability.test_slow_consumer import _small_buffer_socket
from tests.server.support import WAIT, Stream, new_session

EVENTS = 20_000
PAD = "p" * 2000  # ~2 KiB per event: 40 MB in all, far beyond every socket buffer
PAGE = 500  # the bus's default replay page
USER_TOKEN = "user-" + secrets.token_urlsafe(24)


def _fill_log(path: Path) -> None:
    """``EVENTS`` events of twenty sessions nobody in the state store owns."""
    encoder, clock = EnvelopeEncoder(), UtcClock()
    counts: dict[str, int] = {}
    records: list[EventRecord] = []
    for seq in range(1, EVENTS + 1):
        sid = f"ses_foreign_{seq % 20}"
        counts[sid] = counts.get(sid, 0) + 1
        ts = clock.now()
        text = encoder.encode(
            seq=seq,
            session_seq=counts[sid],
            event_id=f"evt_pre{seq:012x}",
            type="message.delta",
            session_id=sid,
            turn_id=None,
            ts=ts,
            data={"text": PAD},
        )
        records.append(EventRecord(seq, counts[sid], sid, "message.delta", None, ts, text))
    log = EventLog.open(path)
    try:
        for start in range(0, EVENTS, 5000):
            log.append_many(records[start : start + 5000])
    finally:
        log.close()


@pytest.fixture(scope="module")
def crowded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[InProcessServer, Path]]:
    tmp_path = tmp_path_factory.mktemp("replay-cost")
    workspace = (tmp_path / "ws").resolve()
    workspace.mkdir()
    srv = InProcessServer(
        tmp_path / "srv",
        config={
            "auth": {
                "tokens": [
                    {
                        "name": "viewer",
                        "token": USER_TOKEN,
                        "role": "user",
                        "allowed_roots": [str(workspace)],
                    }
                ]
            },
            # Only the size limit of retention would prune this log; keep it all.
            "events": {"retention_bytes": None},
        },
    )
    _fill_log(srv.root / "data" / "events.sqlite3")
    srv.start()
    try:
        yield srv, workspace
    finally:
        srv.stop()


def _bus(srv: InProcessServer) -> EventBus:
    # The app the in-process uvicorn serves; its runtime holds the bus.
    app: Any = srv._server.config.app
    bus: EventBus = app.state.runtime.bus
    return bus


async def test_a_token_that_sees_nothing_replays_nothing_and_reads_no_page(
    crowded: tuple[InProcessServer, Path],
) -> None:
    srv, workspace = crowded
    bus = _bus(srv)
    assert bus.last_seq >= EVENTS
    before = bus.stats()
    others = bus.subscriber_count()
    url = f"{srv.ws_base}/events?after=0&token={USER_TOKEN}"  # (url-safe token)
    async with await Stream.open(url, after=0) as stream:
        # The stream is live at once: the user's first session shows up first.
        async with srv.client("viewer", token=USER_TOKEN) as http:
            sid = await new_session(http, workspace)
        first = await stream.next()
        assert (first["type"], first["session_id"]) == ("session.created", sid)
        assert first["seq"] > EVENTS
        after = bus.stats()
        assert after.replay_pages == before.replay_pages  # not one page of the 40
        assert after.replay_records == before.replay_records
    await _left(bus, others)


async def _left(bus: EventBus, others: int) -> None:
    """Wait (bounded) until only ``others`` subscriptions remain: the server has
    noticed that the test's socket is gone."""
    async with asyncio.timeout(WAIT):
        for _ in range(1000):
            if bus.subscriber_count() == others:
                break
            await asyncio.sleep(0.01)
    assert bus.subscriber_count() == others


async def test_a_replay_whose_socket_goes_away_stops_requesting_pages(
    crowded: tuple[InProcessServer, Path],
) -> None:
    srv, _ = crowded
    bus = _bus(srv)
    before = bus.stats().replay_pages
    # The server's own subscriber (server.observer: metrics, traces) stays.
    baseline = bus.subscriber_count()
    ws = await connect(
        srv.ws_url("/events", after=0, client="goes-away"),
        max_queue=1,
        compression=None,
        open_timeout=WAIT,
        sock=_small_buffer_socket(srv.port),
    )
    first = json.loads(await ws.recv())
    assert first["seq"] == 1
    # The client goes away at once (a closed laptop, a killed tab): no close
    # handshake, which the server could not even answer behind the data it queued.
    ws.transport.abort()
    await _left(bus, baseline)
    requested = bus.stats().replay_pages - before
    print(f"pages requested before the socket went away: {requested} of {EVENTS // PAGE}")
    # A few pages went into the socket buffers before it closed; nowhere near the
    # EVENTS / PAGE the whole log takes, and no more once it was gone.
    assert 1 <= requested < EVENTS // PAGE // 2, requested
    async with srv.client() as http:
        assert (await http.get("/healthz")).status_code == 200
    assert bus.stats().replay_pages - before == requested
