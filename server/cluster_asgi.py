"""The ASGI plumbing of cluster mode (server/cluster.py): reading a request
body to forward it, replaying it to the app, answering in JSON, and running
a forwarded request on this replica's app with its reply captured.

Plain functions over ASGI messages, apart from the cluster's roles, so that
the forwarding code reads as what it decides rather than how bytes move.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.types import Message, Receive, Send

from server.auth import Principal
from server.errors import error_body
from server.middleware import PRINCIPAL_KEY

# Runs one request on the app with the given receive and send.
RunRequest = Callable[[Receive, Send], Awaitable[None]]


def forwarded_scope(payload: dict[str, Any], app: Any, forwarded_key: str) -> dict[str, Any]:
    """The HTTP scope of a forwarded request (as its caller, marked forwarded
    under ``forwarded_key`` so it is never forwarded again)."""
    p = payload["principal"]
    path = str(payload["path"])
    headers: list[tuple[bytes, bytes]] = [
        (str(k).encode("latin-1"), str(v).encode("latin-1")) for k, v in payload["headers"]
    ]
    body_size = len(base64.b64decode(payload["body"]))
    headers.append((b"content-length", str(body_size).encode("ascii")))
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": str(payload["method"]),
        "scheme": "http",
        "path": path,
        "raw_path": path.encode("utf-8"),
        "query_string": str(payload["query_string"]).encode("latin-1"),
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 0),
        "server": ("127.0.0.1", 0),
        "state": {},
        "app": app,
        forwarded_key: True,
        PRINCIPAL_KEY: Principal(
            token_name=str(p["token_name"]),
            role=p["role"],
            client_name=str(p["client_name"]),
            allowed_roots=tuple(str(r) for r in p["allowed_roots"]),
        ),
    }


async def captured_reply(run: RunRequest, body: bytes) -> dict[str, Any]:
    """Run one request with ``body`` and return its reply as the forwarder
    carries it: status, headers and the base64 body."""
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.Event().wait()  # no disconnect: the caller waits for the reply
        raise AssertionError("unreachable")

    status = 500
    out_headers: list[list[str]] = []
    chunks: list[bytes] = []

    async def send(message: Message) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = int(message["status"])
            for k, v in message.get("headers", []):
                out_headers.append([bytes(k).decode("latin-1"), bytes(v).decode("latin-1")])
        elif message["type"] == "http.response.body":
            chunks.append(bytes(message.get("body", b"")))

    await run(receive, send)
    return {
        "status": status,
        "headers": out_headers,
        "body": base64.b64encode(b"".join(chunks)).decode("ascii"),
    }


async def read_body(receive: Receive) -> bytes:
    """The whole request body (BodyLimit, outside, already bounds it)."""
    parts: list[bytes] = []
    for _ in range(1_000_000):
        message = await receive()
        if message["type"] != "http.request":
            break
        parts.append(bytes(message.get("body", b"")))
        if not message.get("more_body", False):
            break
    return b"".join(parts)


def replay(body: bytes, receive: Receive) -> Callable[[], Awaitable[Message]]:
    """A receive that yields the body read already, then the real one's messages."""
    given = False

    async def replayed() -> Message:
        nonlocal given
        if not given:
            given = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed


async def send_json(send: Send, status: int, body: dict[str, Any]) -> None:
    data = json.dumps(body, ensure_ascii=True).encode("ascii")
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(data)).encode("ascii")),
            ],
        }
    )
    await send({"type": "http.response.body", "body": data})


async def send_error(send: Send, status: int, code: str, message: str) -> None:
    await send_json(send, status, error_body(code, message))


async def send_conflict(send: Send, request_id: str, tool_use_id: str, winner: Any) -> None:
    """The confirmation route's 409 (``already_resolved`` with the winning answer)."""
    answer = {
        "request_id": request_id,
        "tool_use_id": tool_use_id,
        "decision": winner.decision,
        "scope": winner.scope,
        "resolved_by": winner.resolved_by,
        "resolved_by_token": winner.extra.get("resolved_by_token"),
        "message": winner.extra.get("message"),
    }
    await send_json(
        send,
        409,
        error_body(
            "already_resolved",
            f"confirmation {request_id!r} was already resolved: {winner.decision} "
            f"by {winner.resolved_by}",
            resolution=answer,
        ),
    )
