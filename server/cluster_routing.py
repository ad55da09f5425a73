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
from typing import TYPE_CHECKING

from starlette.types import ASGIApp, Message, Receive, Scope, Send

if TYPE_CHECKING:
    from server.runtime import Services

SESSION_PATH = re.compile(r"^/sessions/([^/]+)(/.*)?$")
# Not forwarded: the event stream is served from Redis on every replica, and
# the MCP endpoint streams (a forwarded reply is one message).
LOCAL_TAILS = ("/events", "/mcp")


def default_replica_id() -> str:
    """``<hostname>-<pid>``: unique per process on a machine, readable in logs."""
    return f"{socket.gethostname()}-{os.getpid()}"


class ClusterRouting:
    """ASGI middleware (inside authentication): session requests go to the
    session's owner replica (see ``ClusterServices.route``). Without cluster
    mode it passes every request straight through."""

    def __init__(self, app: ASGIApp, runtime: Services) -> None:
        self.app = app
        self.runtime = runtime

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, receive, self._after_startup(scope, send))
            return
        cluster = self.runtime.cluster
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
            cluster = self.runtime.cluster
            if message["type"] == "lifespan.startup.complete" and cluster is not None:
                cluster.inner_app = self.app
                cluster.scope_app = scope.get("app")
            await send(message)

        return sending
