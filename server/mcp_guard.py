"""What every request to the MCP endpoint passes before the SDK sees it.

- **Host and Origin (DNS rebinding).** A page on another site can make a
  browser send requests to ``127.0.0.1`` under its own name (a DNS answer
  that changes to a loopback address). The ``Host`` of such a request names
  the attacker's domain, so a request is served only when its Host's name is
  a loopback name, the bound ``server.host`` (unless it is a wildcard) or in
  ``server.allowed_hosts`` (``name`` or ``name:port``); and when it carries
  an ``Origin`` (browsers do), only if that is the same origin or listed in
  ``server.allowed_origins`` (server/origins.py, the rule of the event
  WebSockets). A refusal is 403 with a JSON-RPC error naming the header.
- **Who owns a transport session.** The SDK's session manager refuses a
  request for an existing ``Mcp-Session-Id`` (POST, GET and DELETE alike)
  whose ``scope["user"]`` is not the identity that opened it, answering 404
  as if it did not exist. ``transport_identity`` is that identity: the
  token's name and the toolrelay session in the path, so neither another
  token (an admin's included) nor the same token on another session can use
  or end it.
- **Whether the client is still there.** ``watch_disconnect`` notes in the
  request's scope when its client disconnects, so a tools/call can stop (and
  cancel its pending confirmation) once nobody waits for its answer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

import mcp_types as types
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from starlette.datastructures import Headers
from starlette.responses import Response
from starlette.types import Message, Receive, Scope

from server.origins import OriginPolicy

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
WILDCARD_HOSTS = frozenset({"", "0.0.0.0", "::"})
# Where a POST's disconnect flag lives in its ASGI scope.
LEFT_KEY = "toolrelay.mcp_client_left"


def check_hosts(hosts: list[str]) -> list[str]:
    """The config validator of ``server.allowed_hosts``: ``name`` or ``name:port``."""
    normal = []
    for host in hosts:
        name, port = split_host(host)
        if name is None:
            raise ValueError(f"{host!r} is not a host name (name or name:port, no scheme or path)")
        normal.append(name if port is None else f"{name}:{port}")
    return normal


def split_host(text: str) -> tuple[str | None, int | None]:
    """(lower-cased name, port) of a Host header value; (None, None) if malformed."""
    try:
        parts = urlsplit(f"//{text.strip()}")
        port = parts.port
    except ValueError:
        return None, None
    if not parts.hostname or parts.path or parts.query or parts.fragment or "@" in parts.netloc:
        return None, None
    return parts.hostname.lower(), port


@dataclass(frozen=True, slots=True)
class RebindingGuard:
    """The Host and Origin rule of the MCP endpoint (see the module)."""

    names: frozenset[str]
    host_ports: frozenset[tuple[str, int]]
    origins: OriginPolicy

    @classmethod
    def of(
        cls, bound_host: str, allowed_hosts: Iterable[str], allowed_origins: Iterable[str]
    ) -> RebindingGuard:
        names = set(LOOPBACK_NAMES)
        if bound_host.strip("[]") not in WILDCARD_HOSTS:
            names.add(bound_host.strip("[]").lower())
        host_ports: set[tuple[str, int]] = set()
        for entry in allowed_hosts:
            name, port = split_host(entry)
            if name is not None and port is None:
                names.add(name)
            elif name is not None and port is not None:
                host_ports.add((name, port))
        return cls(frozenset(names), frozenset(host_ports), OriginPolicy.of(allowed_origins))

    def refusal(self, headers: Headers) -> str | None:
        """Why a request with these headers is refused, or None."""
        host = headers.get("host")
        name, port = split_host(host) if host else (None, None)
        if name is None or not (name in self.names or (name, port) in self.host_ports):
            shown = (host or "")[:80]
            return (
                f"Host {shown!r} is not allowed: only loopback names, server.host and "
                "server.allowed_hosts may reach the MCP endpoint (DNS rebinding protection)"
            )
        origin = headers.get("origin")
        if self.origins.refusal(origin, host) is not None:
            return (
                f"Origin {(origin or '')[:80]!r} is not allowed: only same-origin pages and "
                "server.allowed_origins may use the MCP endpoint"
            )
        return None


def refused(message: str) -> Response:
    """403 with a JSON-RPC error body (no id: it answers the HTTP request)."""
    body = types.JSONRPCError(
        jsonrpc="2.0", id=None, error=types.ErrorData(code=types.INVALID_REQUEST, message=message)
    )
    return Response(
        body.model_dump_json(by_alias=True, exclude_unset=True),
        status_code=403,
        media_type="application/json",
    )


def transport_identity(token_name: str, session_id: str) -> AuthenticatedUser:
    """The identity the SDK binds a transport session to (never the token itself)."""
    return AuthenticatedUser(
        AccessToken(token="", client_id=token_name, scopes=[], subject=session_id)
    )


def watch_disconnect(scope: Scope, receive: Receive) -> Receive:
    """``receive`` that flags ``scope[LEFT_KEY]`` when the client disconnects
    (the SSE response listens for that message while it streams)."""
    left = asyncio.Event()
    scope[LEFT_KEY] = left

    async def receive_watched() -> Message:
        message = await receive()
        if message["type"] == "http.disconnect":
            left.set()
        return message

    return receive_watched


def client_left(scope: Scope) -> asyncio.Event | None:
    left = scope.get(LEFT_KEY)
    return left if isinstance(left, asyncio.Event) else None
