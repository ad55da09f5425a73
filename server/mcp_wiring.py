"""Wiring of MCP into the running server, kept out of runtime.py: start the
McpManager for ``mcp_servers:`` and turn its registry changes into one
``tools.changed`` event per live session (events belong to a session; a
server-wide change concerns every one of them)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping

from dispatcher import ToolDispatcher
from dispatcher.mcp import McpManager
from dispatcher.mcp.config import McpServerConfig
from dispatcher.sandbox import SandboxConfig
from eventbus import Bus
from protocol.payloads import ToolsChanged

log = logging.getLogger("toolrelay.mcp")

# How long start-up waits for the MCP servers to connect, so that the first
# sessions see their tools; a slower server joins later (tools.changed).
STARTUP_WAIT = 10.0


async def start_mcp(
    servers: Mapping[str, McpServerConfig],
    dispatcher: ToolDispatcher,
    *,
    sandbox_config: SandboxConfig | None,
    bus: Bus,
    session_ids: Callable[[], Iterable[str]],
    wait: float = STARTUP_WAIT,
) -> McpManager | None:
    """Connect ``servers`` (None without any), registering their tools in
    ``dispatcher``; later changes are announced on every session of
    ``session_ids`` through ``bus``."""
    if not servers:
        return None

    started = False

    def tools_changed(added: list[str], removed: list[str], source: str) -> None:
        # The first listing during start-up is not a change anyone saw: no
        # event into every stored session at each start.
        if not started or not bus.running:
            return
        # One payload (immutable), emitted on every session's stream.
        payload = ToolsChanged(added=added, removed=removed, source=source)
        for session_id in session_ids():
            bus.emit(payload, session_id=session_id)

    manager = McpManager(
        servers,
        dispatcher,
        sandbox_config=sandbox_config,
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
