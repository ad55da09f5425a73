"""ClusterRouting: the ASGI middleware that sends session requests to their
owner replica in cluster mode (the work is ``ClusterServices.route`` in
server/cluster.py). Always installed, and light on purpose: without cluster
mode it passes every request straight through and nothing of Redis is
imported (server/cluster.py is loaded only when ``cluster.redis_url`` is set).
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Callable
from typing import Any, Protocol

from starlette.types import ASGIApp, Message, Receive, Scope, Send

SESSION_PATH = re.compile(r"^/sessions/([^/]+)(/.*)?$")
# Not forwarded: the event stream is served from Redis on every replica, and
# the MCP endpoint streams (a forwarded reply is one message).
LOCAL_TAILS = ("/events", "/mcp")


def default_replica_id() -> str:
    """``<hostname>-<pid>``: unique per process on a machine, readable in logs."""
    return f"{socket.gethostname()}-{os.getpid()}"


class SessionRouter(Protocol):
    """What the middleware needs of the cluster (``ClusterServices``): where a
    request the owner runs goes (``inner_app``, ``scope_app``) and ``route``."""

    inner_app: ASGIApp | None
    scope_app: Any

    async def route(self, scope: Scope, receive: Receive, send: Send, session_id: str) -> None: ...


class ClusterRouting:
    """ASGI middleware (inside authentication): session requests go to the
    session's owner replica (see ``ClusterServices.route``). Without cluster
    mode (``cluster()`` gives None) it passes every request straight through."""

    def __init__(self, app: ASGIApp, cluster: Callable[[], SessionRouter | None]) -> None:
        self.app = app
        # Asked per request: the services make the cluster when they start.
        self.cluster = cluster

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, receive, self._after_startup(scope, send))
            return
        cluster = self.cluster()
        if cluster is None or scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if cluster.inner_app is None:
            cluster.inner_app = self.app
            cluster.scope_app = scope.get("app")
        match = SESSION_PATH.match(scope["path"])
        if match is None or (match.group(2) or "").startswith(LOCAL_TAILS):
            await self.app(scope, receive, send)
            return
        await cluster.route(scope, receive, send, match.group(1))

    def _after_startup(self, scope: Scope, send: Send) -> Send:
        """The lifespan's send: once the services started, tell the cluster
        where a forwarded request runs (before any request arrives here)."""

        async def sending(message: Message) -> None:
            cluster = self.cluster()
            if message["type"] == "lifespan.startup.complete" and cluster is not None:
                cluster.inner_app = self.app
                cluster.scope_app = scope.get("app")
            await send(message)

        return sending
