"""The direct socket write (server/streaming.py, ``_SocketSink``) on the real stack.

The sink steps ``WebSocket.send_text`` by hand and counts on uvicorn's
``websockets-sansio`` protocol (the one the server runs, server/cli.py) to
finish a send without suspending unless the socket is paused. This pins that
on a real uvicorn server and a real websockets client: bursts far larger
than the transport's buffer arrive complete and in order, some frames left in
the publisher's call (the sink took them) and some were declined (the socket
was paused) and went through the sender task. If an upgrade of uvicorn or
Starlette adds a suspension before the write, frames would be lost or
reordered here, or the sink would never take one.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.routing import WebSocketRoute
from starlette.websockets import WebSocket
from websockets.asyncio.client import connect

import server.streaming as streaming
from eventbus import EventBus, EventRecord

from .conftest import STEP_TIMEOUT, running_bus

BURSTS = 4
BURST = 2000  # about 8 MB a burst: past what the kernel and the transport buffer
PAD = "x" * 4000


class _CountingSink(streaming._SocketSink):
    taken = 0
    declined = 0

    def __call__(self, record: EventRecord) -> bool:
        took = super().__call__(record)
        if took:
            _CountingSink.taken += 1
        else:
            _CountingSink.declined += 1
        return took


@asynccontextmanager
async def _server(bus: EventBus) -> AsyncIterator[int]:
    async def stream(ws: WebSocket) -> None:
        await ws.accept()
        sub = await bus.subscribe(session_id="s")
        try:
            # The server's own sender and client watcher (runtime and principal
            # are not read by them).
            await streaming._pump(ws, None, sub, None)  # type: ignore[arg-type]
        finally:
            sub.close()

    app = Starlette(routes=[WebSocketRoute("/events", stream)])
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=0,
        loop="asyncio",
        ws="websockets-sansio",  # as server/cli.py
        ws_per_message_deflate=False,
        lifespan="off",
        log_level="warning",
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    try:
        async with asyncio.timeout(STEP_TIMEOUT):
            while not server.started:  # noqa: ASYNC110 (uvicorn's own flag)
                await asyncio.sleep(0.01)
        yield server.servers[0].sockets[0].getsockname()[1]
    finally:
        server.should_exit = True
        await task


async def test_bursts_through_the_direct_write_arrive_whole_and_in_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(streaming, "_SocketSink", _CountingSink)
    _CountingSink.taken = _CountingSink.declined = 0
    got: list[dict[str, Any]] = []
    async with (
        running_bus(None, max_queue=4 * BURST) as bus,
        _server(bus) as port,
        connect(f"ws://127.0.0.1:{port}/events", max_size=None) as client,
    ):
        async with asyncio.timeout(STEP_TIMEOUT):
            while bus.subscriber_count("s") == 0:  # noqa: ASYNC110 (the bus's count)
                await asyncio.sleep(0.01)
        for burst in range(BURSTS):
            # One synchronous burst: the client cannot read meanwhile, so the
            # socket pauses and the sink must decline what follows.
            for i in range(BURST):
                bus.publish("message.delta", {"text": PAD, "i": burst * BURST + i}, session_id="s")
            async with asyncio.timeout(STEP_TIMEOUT):
                while len(got) < (burst + 1) * BURST:
                    got.append(json.loads(await client.recv()))
    assert [e["data"]["i"] for e in got] == list(range(BURSTS * BURST))
    assert [e["session_seq"] for e in got] == list(range(1, BURSTS * BURST + 1))
    assert _CountingSink.taken > 0, "the sink never wrote a frame: the direct path is dead"
    assert _CountingSink.declined > 0, "a paused socket never made the sink decline"
