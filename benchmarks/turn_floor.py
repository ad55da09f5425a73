"""The floor of a model-driven turn: the same visible work with nothing of ours.

A minimal FastAPI app under the server's uvicorn settings (stdlib asyncio
loop, ``websockets-sansio``, no permessage-deflate) that speaks the routes and
the event envelope the turn benchmark uses:

* ``POST /sessions`` ``{"workspace", "tools", "system"}`` -> 201 ``{"id"}``;
* ``POST /sessions/{id}/turns`` ``{"message"}`` -> 202 ``{"turn_id"}``;
* ``GET /sessions/{id}/turns/{turn_id}`` -> ``{"status"}``;
* ``POST /sessions/{id}/turns/{turn_id}/confirmations/{request_id}`` -> 200;
* ``WS /sessions/{id}/events?after=N`` -> the envelopes, replayed then live.

A turn is the agent loop with nothing else: one ``AsyncOpenAI`` client made
at start-up for the server's life, the whole conversation in Chat Completions
form sent each step (the same system prompt and tool definitions as the real
server, handed over at session creation), text deltas and tool calls read off
the stream, each ``shell`` call announced and held until a client answers,
then ``asyncio.create_subprocess_shell``, each ``read_file`` a plain read,
the results sent back, until the model stops asking. Events go into an
in-memory list and are sent, each encoded once, to the session's sockets.
No validation, policy, durability, persistence or auth.

Prints ``PORT <n>`` once listening. Run: ``python -m benchmarks.turn_floor``
with ``OPENAI_BASE_URL`` pointing at the model server.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import openai
import uvicorn
from fastapi import FastAPI, Request, WebSocket, WebSocketDisconnect
from fastapi.responses import JSONResponse

WS_MAX_SIZE = 64 * 1024


def _ts() -> str:
    now = time.time()
    second = int(now)
    micros = int((now - second) * 1e6)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second)) + f".{micros:06d}Z"


@dataclass
class Session:
    id: str
    workspace: Path
    tools: list[dict[str, Any]]
    system: str
    events: list[str] = field(default_factory=list)
    # Each socket's queue; its sender task sends in order (encoded once per event).
    sockets: dict[WebSocket, asyncio.Queue[str]] = field(default_factory=dict)
    turns: dict[str, str] = field(default_factory=dict)
    pending: dict[str, asyncio.Future[str]] = field(default_factory=dict)
    messages: list[dict[str, Any]] = field(default_factory=list)


class Floor:
    """The app's state: sessions, a global sequence, the one SDK client."""

    def __init__(self, client: openai.AsyncOpenAI, model: str) -> None:
        self.client = client
        self.model = model
        self.sessions: dict[str, Session] = {}
        self.seq = 0
        self.tasks: set[asyncio.Task[None]] = set()

    def publish(self, session: Session, type_: str, turn_id: str, data: dict[str, Any]) -> None:
        self.seq += 1
        text = json.dumps(
            {
                "seq": self.seq,
                "session_seq": len(session.events) + 1,
                "id": f"evt_{secrets.token_hex(8)}",
                "type": type_,
                "session_id": session.id,
                "turn_id": turn_id,
                "ts": _ts(),
                "data": data,
            },
            separators=(",", ":"),
        )
        session.events.append(text)
        for queue in session.sockets.values():
            queue.put_nowait(text)

    async def turn(self, session: Session, turn_id: str, text: str) -> None:
        pub = self.publish
        pub(session, "turn.started", turn_id, {"kind": "message"})
        user = {"role": "user", "content": text}
        session.messages.append(user)
        pub(session, "message.completed", turn_id, {"message": user})
        try:
            for _ in range(25):
                calls, reply_text = await self._model_call(session, turn_id)
                assistant: dict[str, Any] = {"role": "assistant", "content": reply_text or None}
                if calls:
                    assistant["tool_calls"] = calls
                session.messages.append(assistant)
                pub(session, "message.completed", turn_id, {"message": assistant})
                if not calls:
                    break
                results = await asyncio.gather(*(self._tool(session, turn_id, c) for c in calls))
                session.messages.extend(results)
                pub(session, "message.completed", turn_id, {"message": results})
            session.turns[turn_id] = "completed"
            pub(session, "turn.completed", turn_id, {"status": "completed"})
        except Exception as exc:
            session.turns[turn_id] = "failed"
            pub(session, "turn.failed", turn_id, {"reason": repr(exc)})

    async def _model_call(self, session: Session, turn_id: str) -> tuple[list[dict[str, Any]], str]:
        # Plain dicts, as a bare app would send them (the SDK's TypedDicts are
        # for type checkers only).
        messages: Any = [{"role": "system", "content": session.system}, *session.messages]
        tools: Any = session.tools
        stream = await self.client.chat.completions.create(
            model=self.model,
            messages=messages,
            tools=tools,
            max_tokens=4096,
            stream=True,
            stream_options={"include_usage": True},
        )
        text: list[str] = []
        calls: dict[int, dict[str, Any]] = {}
        async with stream:
            async for chunk in stream:
                if not chunk.choices:
                    continue
                delta = chunk.choices[0].delta
                if delta.content:
                    text.append(delta.content)
                    self.publish(session, "message.delta", turn_id, {"text": delta.content})
                for call in delta.tool_calls or []:
                    slot = calls.setdefault(
                        call.index,
                        {"id": "", "type": "function", "function": {"name": "", "arguments": ""}},
                    )
                    if call.id:
                        slot["id"] = call.id
                    if call.function is not None:
                        if call.function.name:
                            slot["function"]["name"] = call.function.name
                        if call.function.arguments:
                            slot["function"]["arguments"] += call.function.arguments
        return [calls[i] for i in sorted(calls)], "".join(text)

    async def _tool(self, session: Session, turn_id: str, call: dict[str, Any]) -> dict[str, Any]:
        name = call["function"]["name"]
        args = json.loads(call["function"]["arguments"] or "{}")
        pub = self.publish
        if name == "shell":
            request_id = f"req_{secrets.token_hex(8)}"
            future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
            session.pending[request_id] = future
            pub(
                session,
                "tool.confirmation_requested",
                turn_id,
                {
                    "request_id": request_id,
                    "tool_use_id": call["id"],
                    "tool_name": name,
                    "preview": {"text": args["command"]},
                },
            )
            decision = await future
            pub(
                session,
                "tool.confirmation_resolved",
                turn_id,
                {"request_id": request_id, "decision": decision},
            )
        pub(session, "tool.called", turn_id, {"tool_use_id": call["id"], "tool_name": name})
        if name == "shell":
            proc = await asyncio.create_subprocess_shell(
                args["command"],
                cwd=session.workspace,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
            )
            out, _ = await proc.communicate()
            output = out.decode(errors="replace")
        elif name == "read_file":
            output = (session.workspace / args["path"]).read_text(encoding="utf-8")
        else:
            output = f"unknown tool {name}"
        pub(session, "tool.completed", turn_id, {"tool_use_id": call["id"], "tool_name": name})
        return {"role": "tool", "tool_call_id": call["id"], "content": output}


async def _sender(ws: WebSocket, queue: asyncio.Queue[str]) -> None:
    with contextlib.suppress(WebSocketDisconnect, RuntimeError, OSError):
        while True:
            await ws.send_text(await queue.get())


def create_app(floor: Floor) -> FastAPI:
    app = FastAPI()

    @app.post("/sessions", status_code=201)
    async def create_session(body: dict[str, Any]) -> dict[str, Any]:
        session = Session(
            id=f"ses_{secrets.token_hex(8)}",
            workspace=Path(body["workspace"]),
            tools=body.get("tools", []),
            system=body.get("system", ""),
        )
        floor.sessions[session.id] = session
        return {"id": session.id}

    @app.post("/sessions/{session_id}/turns", status_code=202)
    async def start_turn(session_id: str, body: dict[str, Any]) -> dict[str, Any]:
        session = floor.sessions[session_id]
        turn_id = f"turn_{secrets.token_hex(8)}"
        session.turns[turn_id] = "running"
        task = asyncio.create_task(floor.turn(session, turn_id, str(body["message"])))
        floor.tasks.add(task)
        task.add_done_callback(floor.tasks.discard)
        return {"turn_id": turn_id}

    @app.get("/sessions/{session_id}/turns/{turn_id}")
    async def get_turn(session_id: str, turn_id: str) -> dict[str, Any]:
        return {"id": turn_id, "status": floor.sessions[session_id].turns[turn_id]}

    @app.post("/sessions/{session_id}/turns/{turn_id}/confirmations/{request_id}")
    async def answer(session_id: str, turn_id: str, request_id: str, request: Request) -> Any:
        body = await request.json()
        future = floor.sessions[session_id].pending.pop(request_id, None)
        if future is None or future.done():
            return JSONResponse({"error": "already answered"}, status_code=409)
        future.set_result(str(body.get("decision", "allow")))
        return {"decision": body.get("decision", "allow"), "won": True}

    @app.websocket("/sessions/{session_id}/events")
    async def events(websocket: WebSocket, session_id: str, after: int = 0) -> None:
        session = floor.sessions[session_id]
        await websocket.accept()
        queue: asyncio.Queue[str] = asyncio.Queue()
        for text in session.events[after:]:
            queue.put_nowait(text)
        session.sockets[websocket] = queue
        sender = asyncio.create_task(_sender(websocket, queue))
        try:
            while True:
                message = await websocket.receive()
                if message["type"] == "websocket.disconnect":
                    return
        finally:
            session.sockets.pop(websocket, None)
            sender.cancel()

    @app.get("/healthz")
    async def healthz() -> dict[str, Any]:
        return {"status": "ok"}

    return app


async def _serve(port: int, model: str) -> None:
    # The one long-lived client, made before serving (its SSL context included).
    client = openai.AsyncOpenAI(
        api_key="not-needed", base_url=os.environ["OPENAI_BASE_URL"], max_retries=0
    )
    config = uvicorn.Config(
        create_app(Floor(client, model)),
        host="127.0.0.1",
        port=port,
        loop="asyncio",
        ws="websockets-sansio",
        ws_per_message_deflate=False,
        ws_max_size=WS_MAX_SIZE,
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
    try:
        await task
    finally:
        await client.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="the bare floor of a model-driven turn")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--model", default="bench-model")
    args = parser.parse_args(argv)
    asyncio.run(_serve(args.port, args.model))


if __name__ == "__main__":
    main()
