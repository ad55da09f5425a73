"""``notifications/tools/list_changed`` to the MCP endpoint's clients.

A client that listed a session's tools is told when they change, so it lists
them again instead of calling tools that left. The tools that change at run
time are the MCP servers' (McpManager re-lists them, at most once per
``list_changed_interval`` per server, so these notifications are bounded
too); they are server-wide, so every watching client is told.

``ListChangedNotifier`` keeps, per MCP transport session that listed tools,
one of its SDK ``ServerSession`` objects: its notifications without a
related request go on the transport session's standalone (GET) stream. At
most ``MAX_WATCHERS`` are kept (the oldest go first); one whose send fails
(its transport session ended) is forgotten.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

log = logging.getLogger("toolrelay.mcp")

MAX_WATCHERS = 10_000
# Bound on one notification's send, so a stuck stream holds nothing up.
SEND_TIMEOUT = 10.0


class ListChangedNotifier:
    """Who listed tools, and telling them when tools change (see the module)."""

    def __init__(self) -> None:
        # MCP transport session id -> an SDK ServerSession of it.
        self._watchers: dict[str, Any] = {}
        self._sending: set[asyncio.Task[None]] = set()

    def watch(self, mcp_session_id: str | None, session: Any) -> None:
        if not mcp_session_id:
            return  # stateless requests have no stream to be told on
        self._watchers.pop(mcp_session_id, None)
        self._watchers[mcp_session_id] = session
        while len(self._watchers) > MAX_WATCHERS:
            del self._watchers[next(iter(self._watchers))]

    def forget(self, mcp_session_id: str | None) -> None:
        if mcp_session_id:
            self._watchers.pop(mcp_session_id, None)

    def tools_changed(self, added: list[str], removed: list[str], source: str) -> None:
        """McpManager's listener: one notification to every watching client."""
        for mcp_session_id, session in list(self._watchers.items()):
            task = asyncio.ensure_future(self._send(mcp_session_id, session))
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)

    async def _send(self, mcp_session_id: str, session: Any) -> None:
        try:
            async with asyncio.timeout(SEND_TIMEOUT):
                await session.send_tool_list_changed()
        except Exception as exc:  # the transport session ended: forget it
            log.debug("MCP session %s: list_changed not sent (%s)", mcp_session_id[:16], exc)
            self.forget(mcp_session_id)

    async def close(self) -> None:
        for task in list(self._sending):
            task.cancel()
        self._watchers.clear()
