"""The bare baselines: what FastAPI/Starlette under uvicorn cost with nothing of ours.

- ``WS /ws``: subscribers; ``POST /burst`` broadcasts ``count`` events to every
  open socket in a plain loop (encode each event once, ``await send_text`` to
  each socket in turn), as fast as it can or paced at ``rate`` per second. The
  events have the shape and size of the server's ``tool.output_delta``
  envelopes and carry the same publish stamp.
- ``POST /echo``: the smallest JSON POST round trip.

It runs under uvicorn with the server's own settings (stdlib asyncio loop,
``websockets-sansio``, no permessage-deflate, 64 KiB client frames), so the
ratio isolates toolrelay's work. Prints ``PORT <n>`` once listening.

Run: ``python -m benchmarks.bare_server [--port 0]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

import uvicorn
from fastapi import FastAPI, WebSocket, WebSocketDisconnect
from pydantic import BaseModel, Field

_YIELD_EVERY = 256


class Burst(BaseModel):
    count: int = Field(ge=1, le=10_000_000)
    rate: float = Field(default=0, ge=0)
    size: int = Field(default=0, ge=0, le=65_536)


def create_app() -> FastAPI:
    app = FastAPI()
    sockets: set[WebSocket] = set()
    tasks: set[asyncio.Task[None]] = set()

    async def broadcast(burst: Burst) -> None:
        pad = "x" * burst.size
        loop = asyncio.get_running_loop()
        start = loop.time()
        for i in range(burst.count):
            if burst.rate > 0:
                delay = start + i / burst.rate - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
            text = json.dumps(
                {
                    "seq": i + 1,
                    "session_seq": i + 1,
                    "id": f"evt_bare0000{i + 1:012x}",
                    "type": "tool.output_delta",
                    "session_id": "ses_0123456789abcdef",
                    "turn_id": "turn_0123456789abcdef",
                    "ts": "2026-01-01T00:00:00.000000Z",
                    "data": {
                        "tool_use_id": "tu_bench",
                        "stream": "stdout",
                        "text": f"{time.monotonic_ns()}|{pad}",
                    },
                },
                separators=(",", ":"),
            )
            for ws in list(sockets):
                try:
                    await ws.send_text(text)
                except (WebSocketDisconnect, RuntimeError, OSError):
                    sockets.discard(ws)
            if burst.rate <= 0 and i % _YIELD_EVERY == _YIELD_EVERY - 1:
                await asyncio.sleep(0)

    @app.websocket("/ws")
    async def subscribe(websocket: WebSocket) -> None:
        await websocket.accept()
        sockets.add(websocket)
        try:
            while True:
                message = await websocket.receive()
                if message["type"] == "websocket.disconnect":
                    return
        finally:
            sockets.discard(websocket)

    @app.post("/burst", status_code=202)
    async def start_burst(burst: Burst) -> dict[str, int]:
        task = asyncio.create_task(broadcast(burst))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        return {"subscribers": len(sockets), "count": burst.count}

    @app.post("/echo")
    async def echo(body: dict[str, Any]) -> dict[str, Any]:
        return {"ok": True, "n": body.get("n")}

    @app.get("/healthz")
    async def healthz() -> dict[str, Any]:
        return {"status": "ok", "clients": len(sockets)}

    return app


async def _serve(port: int) -> None:
    config = uvicorn.Config(
        create_app(),
        host="127.0.0.1",
        port=port,
        loop="asyncio",
        ws="websockets-sansio",
        ws_per_message_deflate=False,
        ws_max_size=64 * 1024,
        lifespan="off",
        log_level="warning",
        access_log=False,
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    while not server.started and not task.done():
        await asyncio.wait({task}, timeout=0.05)
    if server.started:
        bound = server.servers[0].sockets[0].getsockname()[1]
        print(f"PORT {bound}", flush=True)
    await task


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="bare FastAPI/Starlette baseline server")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    asyncio.run(_serve(args.port))


if __name__ == "__main__":
    main()
