"""Wiring of MCP into the running server, kept out of runtime.py: start the
McpManager for ``mcp_servers:`` and turn its registry changes into one
``tools.changed`` event per live session (events belong to a session; a
server-wide change concerns every one of them)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from dispatcher.mcp import McpManager
from protocol.payloads import ToolsChanged

if TYPE_CHECKING:
    from server.runtime import Services

log = logging.getLogger("toolrelay.mcp")

# How long start-up waits for the MCP servers to connect, so that the first
# sessions see their tools; a slower server joins later (tools.changed).
STARTUP_WAIT = 10.0


async def start_mcp(runtime: Services, *, wait: float = STARTUP_WAIT) -> McpManager | None:
    servers = runtime.config.mcp_servers
    if not servers:
        return None

    started = False

    def tools_changed(added: list[str], removed: list[str], source: str) -> None:
        bus = runtime.bus
        # The first listing during start-up is not a change anyone saw: no
        # event into every stored session at each start.
        if not started or not bus.running:
            return
        # One payload (immutable), emitted on every session's stream.
        payload = ToolsChanged(added=added, removed=removed, source=source)
        for record in runtime.store.list_sessions():
            bus.emit(payload, session_id=record.id)

    manager = McpManager(
        servers,
        runtime.dispatcher,
        sandbox_config=runtime.sandbox_config,
        on_tools_changed=tools_changed,
    )
    await manager.start(wait=wait)
    started = True
    for state in manager.states():
        if state["state"] != "ready":
            log.error("MCP server %s: %s (%s)", state["name"], state["state"], state.get("error"))
        for skipped in state["skipped"]:
            log.error(
                "MCP server %s: tool %s not registered: %s",
                state["name"],
                skipped["tool"],
                skipped["error"],
            )
    return manager
