"""A zero-latency OpenAI-compatible model for the turn benchmark, in a process of its own.

It is stateless: the reply depends on the conversation it is sent. The last
message decides:

* a user message ``shell<N>`` -> one assistant message with N ``shell`` calls
  (``echo hi``); ``read<N>`` -> N ``read_file`` calls of ``f00.txt``,
  ``f01.txt`` ...; anything else -> a short text;
* a tool result -> a short final text (the turn ends).

Replies are streamed in the real Chat Completions SSE format (the renderer of
``tests/fakes/fake_providers.py``). Besides ``POST /v1/chat/completions`` it
serves ``GET /stats``: every request's arrival (``time.monotonic_ns()``, one
clock for every process on Linux) and the client port it came from, so the
benchmark sees the first model request after a POST and how many TCP
connections a turn opened; ``POST /stats/reset`` clears them.

Prints ``PORT <n>`` once listening. Run: ``python -m benchmarks.turn_model``.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import re
import time
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import StreamingResponse

from tests.fakes.fake_providers import Reply, ToolCall, render_openai

_SCENARIO = re.compile(r"^(shell|read)(\d{1,3})$")
SHELL_COMMAND = "echo hi"


def reply_for(messages: list[dict[str, Any]], ids: itertools.count[int]) -> Reply:
    last = messages[-1] if messages else {}
    if last.get("role") != "user":
        return Reply.text("Done: every call finished.", chunk_size=32)
    content = last.get("content") or ""
    text = content if isinstance(content, str) else "".join(p.get("text", "") for p in content)
    match = _SCENARIO.match(text.strip())
    if match is None:
        return Reply.text("Nothing to do.", chunk_size=32)
    kind, count = match.group(1), int(match.group(2))
    calls = [
        ToolCall("shell", {"command": SHELL_COMMAND}, id=f"call_{next(ids)}")
        if kind == "shell"
        else ToolCall("read_file", {"path": f"f{i:02d}.txt"}, id=f"call_{next(ids)}")
        for i in range(count)
    ]
    return Reply.tool_calls(*calls, chunk_size=64)


def create_app() -> FastAPI:
    app = FastAPI()
    arrivals: list[tuple[int, int]] = []
    call_ids = itertools.count(1)
    render_ids = iter(range(1, 1_000_000_000))

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> StreamingResponse:
        port = request.client.port if request.client is not None else 0
        arrivals.append((time.monotonic_ns(), port))
        body = await request.json()
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        events = render_openai(
            reply_for(body.get("messages", []), call_ids),
            model=str(body.get("model", "bench")),
            ids=render_ids,
            include_usage=include_usage,
        )

        async def stream() -> Any:
            for event in events:
                yield event.encode()

        return StreamingResponse(stream(), media_type="text/event-stream")

    @app.get("/healthz")
    async def healthz() -> dict[str, Any]:
        return {"status": "ok"}

    @app.get("/stats")
    async def stats() -> dict[str, Any]:
        return {"arrivals": [list(a) for a in arrivals]}

    @app.post("/stats/reset")
    async def reset() -> dict[str, Any]:
        arrivals.clear()
        return {"ok": True}

    return app


async def _serve(port: int) -> None:
    config = uvicorn.Config(
        create_app(),
        host="127.0.0.1",
        port=port,
        loop="asyncio",
        lifespan="off",
        log_level="warning",
        access_log=False,
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    while not server.started and not task.done():
        await asyncio.wait({task}, timeout=0.05)
    if server.started:
        print(f"PORT {server.servers[0].sockets[0].getsockname()[1]}", flush=True)
    await task


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="zero-latency OpenAI-compatible fake model")
    parser.add_argument("--port", type=int, default=0)
    asyncio.run(_serve(parser.parse_args(argv).port))


if __name__ == "__main__":
    main()
