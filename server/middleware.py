"""ASGI middleware: authentication for HTTP and WebSocket, the body limit,
the WebSocket origin check and the dashboard's framing headers.

Authentication runs before routing and body parsing, so a caller without a
valid token learns nothing, not even whether its JSON was malformed. The
Principal is put into the ASGI scope for the routes (``principal_of``).
A WebSocket handshake from a foreign web origin is refused before
authentication (server/origins.py says which origins are foreign), and the
dashboard's pages may not be framed by another site (clickjacking).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from server.auth import CLIENT_NAME_HEADER, Principal, TokenRegistry, authenticate, bearer_token
from server.errors import ApiError, error_body
from server.origins import OriginPolicy

PRINCIPAL_KEY = "toolrelay.principal"
# Reachable without a token: liveness, the API description, the dashboard's
# static files (it asks for the token itself), and the root redirect.
PUBLIC_PATHS = frozenset({"/", "/healthz", "/openapi.json", "/docs", "/docs/oauth2-redirect"})
PUBLIC_PREFIXES = ("/dashboard",)


def is_public(path: str) -> bool:
    return path in PUBLIC_PATHS or any(
        path == p or path.startswith(p + "/") for p in PUBLIC_PREFIXES
    )


def principal_of(scope: Scope) -> Principal:
    principal = scope.get(PRINCIPAL_KEY)
    if not isinstance(principal, Principal):
        raise RuntimeError("route reached without authentication; is AuthMiddleware installed?")
    return principal


class AuthMiddleware:
    """Resolves the caller's Principal or answers 401 (HTTP) / denies the handshake (WS)."""

    def __init__(self, app: ASGIApp, tokens: Callable[[], TokenRegistry]) -> None:
        self.app = app
        self.tokens = tokens

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind not in ("http", "websocket") or is_public(scope["path"]):
            await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        token = bearer_token(headers)
        supplied_name = headers.get(CLIENT_NAME_HEADER)
        if kind == "websocket":
            # parse_qs decodes keys too: "?%74oken=" is accepted as "token". The
            # log redaction (server.logs) decodes the same way, case-insensitively,
            # so whatever is accepted here is also kept out of the access log.
            query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
            token = token or _first(query, "token")
            supplied_name = supplied_name or _first(query, "client")
        try:
            scope[PRINCIPAL_KEY] = authenticate(self.tokens(), token, supplied_name)
        except ApiError as err:
            if kind == "http":
                await send_json(send, err.status, err.body(), www_authenticate=err.status == 401)
            else:
                await deny_websocket(scope, send, err.status, err.body())
            return
        await self.app(scope, receive, send)


class WebSocketOriginGuard:
    """Refuses (403, before accept) a WebSocket handshake from a foreign web origin.

    Before authentication: the answer to an evil page is the same with or
    without a token, and a 401 would tell it that a token would open the door.
    """

    def __init__(self, app: ASGIApp, policy: OriginPolicy) -> None:
        self.app = app
        self.policy = policy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            headers = _headers(scope)
            refusal = self.policy.refusal(headers.get("origin"), headers.get("host"))
            if refusal is not None:
                await deny_websocket(scope, send, 403, error_body("origin_not_allowed", refusal))
                return
        await self.app(scope, receive, send)


# Sent with every page and asset under these prefixes: no other site may
# frame them (clickjacking the Allow button). X-Frame-Options is for browsers
# that predate CSP's frame-ancestors.
FRAMED_PREFIXES = ("/dashboard", "/docs")
FRAME_ANCESTORS = b"frame-ancestors 'none'"


class FrameGuard:
    """Adds ``Content-Security-Policy: frame-ancestors 'none'`` and
    ``X-Frame-Options: DENY`` to the dashboard's responses; a CSP the
    response already has gets the directive appended."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or not any(
            path == p or path.startswith(p + "/") for p in FRAMED_PREFIXES
        ):
            await self.app(scope, receive, send)
            return

        async def framed_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": no_framing(list(message.get("headers", [])))}
            await send(message)

        await self.app(scope, receive, framed_send)


def no_framing(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """``headers`` with the no-framing CSP directive and X-Frame-Options: DENY."""
    out: list[tuple[bytes, bytes]] = []
    has_csp = False
    for name, value in headers:
        lowered = name.lower()
        if lowered == b"x-frame-options":
            continue
        if lowered == b"content-security-policy":
            has_csp = True
            if b"frame-ancestors" not in value.lower():
                value = value.rstrip(b"; ") + b"; " + FRAME_ANCESTORS
        out.append((name, value))
    if not has_csp:
        out.append((b"content-security-policy", FRAME_ANCESTORS))
    out.append((b"x-frame-options", b"DENY"))
    return out


class BodyLimit:
    """Bounds request bodies: 413 with our JSON error past ``max_body_bytes``.

    A declared Content-Length over the limit is refused before anything reads
    the body. A chunked body is counted as it is read; at the limit the 413 is
    sent at once and the route sees a disconnect, so whatever it answers after
    that is dropped.
    """

    def __init__(self, app: ASGIApp, max_body_bytes: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.max_body_bytes
        declared = _headers(scope).get("content-length")
        if declared is not None:
            size = int(declared) if declared.isdigit() else -1
            if size < 0:
                body = error_body("invalid_request", "Content-Length must be a number")
                await send_json(send, 400, body)
                return
            if size > limit:
                await send_json(send, 413, too_large_body(limit))
                return
        received = 0
        refused = False
        started = False

        async def counting_receive() -> Message:
            nonlocal received, refused
            if refused:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    refused = True
                    if not started:
                        await send_json(send, 413, too_large_body(limit))
                    return {"type": "http.disconnect"}
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if refused:
                return  # the 413 went out already
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        await self.app(scope, counting_receive, guarded_send)


def too_large_body(limit: int) -> dict[str, Any]:
    return error_body(
        "payload_too_large",
        f"request body exceeds the limit of {limit} bytes (server.max_body_bytes)",
        limit=limit,
    )


def _headers(scope: Scope) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}


def _first(query: dict[str, list[str]], key: str) -> str | None:
    values = query.get(key)
    return values[0] if values else None


async def send_json(
    send: Send, status: int, body: dict[str, Any], *, www_authenticate: bool = False
) -> None:
    payload = json.dumps(body).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(payload)).encode()),
    ]
    if www_authenticate:
        headers.append((b"www-authenticate", b"Bearer"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})


async def deny_websocket(scope: Scope, send: Send, status: int, body: dict[str, Any]) -> None:
    """Refuse a WebSocket handshake with an HTTP status and JSON body when the
    server supports it (uvicorn does); otherwise close with 1008 and the message."""
    if "websocket.http.response" in scope.get("extensions", {}):
        payload = json.dumps(body).encode()
        await send(
            {
                "type": "websocket.http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(payload)).encode()),
                ],
            }
        )
        await send({"type": "websocket.http.response.body", "body": payload})
    else:
        message = str(body.get("error", {}).get("message", "refused"))
        await send({"type": "websocket.close", "code": 1008, "reason": message[:120]})
