"""McpManager: one supervised connection per configured MCP server.

Each connection runs in its own task: connect (stdio in the sandbox, through
the bounded transport of dispatcher/mcp/stdio.py, or streamable HTTP), list
the tools, register those the subset can express as ``mcp_{server}_{tool}``,
then wait. A ``notifications/tools/list_changed`` re-lists and re-syncs the
registry, at most once per ``list_changed_interval`` (a server flipping its
list a thousand times a second costs one re-list a second); a connection that ends (the process
died, a call saw the connection close) is retried with exponential backoff.
Tools stay registered while their server restarts: a call meanwhile fails
at once with ``execution_error`` naming the state, and a restart that
changes nothing causes no ``tools.changed``.

We connect with the initialize handshake (``mode="legacy"``): every server
speaks it, and it carries the two notifications the contract names,
``notifications/tools/list_changed`` and ``notifications/cancelled``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import mcp_types as types
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from dispatcher.errors import ToolError, ToolExecutionError, ToolRegistrationError
from dispatcher.mcp.config import McpServerConfig
from dispatcher.mcp.schema import SchemaNotExpressible, translate_schema
from dispatcher.mcp.stdio import MessageTooLarge, bounded_stdio_client
from dispatcher.mcp.tool import McpTool
from dispatcher.sandbox import Sandbox, SandboxConfig, reexposed_folders
from protocol.backoff import Backoff
from protocol.canonical import ToolDefinition

if TYPE_CHECKING:
    from dispatcher.dispatcher import ToolDispatcher

log = logging.getLogger("toolrelay.mcp")

State = Literal["connecting", "ready", "failed", "stopped"]
ToolsChanged = Callable[[list[str], list[str], str], None]
"""Called with (added, removed, source) once per change of the registry."""

MAX_TOOL_NAME = 64
LIST_PAGES = 100  # bound on tools/list pagination
WATCH_INTERVAL = 0.25  # how often an idle connection is checked for a closed transport


def tool_name(server: str, tool: str) -> str:
    """``mcp_{server}_{tool}`` with characters models refuse replaced by ``_``."""
    return f"mcp_{server}_{re.sub(r'[^A-Za-z0-9_-]', '_', tool)}"


@dataclass(slots=True)
class McpServerState:
    """What ``GET /mcp-servers`` shows of one server."""

    name: str
    transport: str
    state: State = "connecting"
    error: str | None = None
    tools: list[str] = field(default_factory=list)
    # Tools that were not registered, each with the reason (construct and pointer).
    skipped: list[dict[str, str]] = field(default_factory=list)
    # Registered tools whose outputSchema the subset cannot express: dropped,
    # so their structured results pass unchecked ({tool, error, pointer}).
    output_schemas_dropped: list[dict[str, str]] = field(default_factory=list)
    restarts: int = 0
    next_retry_s: float | None = None

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "name": self.name,
            "transport": self.transport,
            "state": self.state,
            "tools": list(self.tools),
            "skipped": list(self.skipped),
            "output_schemas_dropped": list(self.output_schemas_dropped),
            "restarts": self.restarts,
        }
        if self.error is not None:
            body["error"] = self.error
        if self.next_retry_s is not None:
            body["next_retry_s"] = round(self.next_retry_s, 3)
        return body


class McpConnection:
    """One MCP server: its supervised connection and the tools it registered."""

    def __init__(self, name: str, config: McpServerConfig, manager: McpManager) -> None:
        self.name = name
        self.config = config
        self.manager = manager
        self.status = McpServerState(name=name, transport=config.transport)
        self.client: Client | None = None
        # Our tool name -> (MCP tool name, the tool as the server listed it).
        self.registered: dict[str, tuple[str, types.Tool]] = {}
        # Our tool name -> why its outputSchema was dropped ({tool, error, pointer}).
        self.dropped_outputs: dict[str, dict[str, str]] = {}
        self._dead = asyncio.Event()
        self._relist = asyncio.Event()
        self._stopping = False
        self._stop = asyncio.Event()
        self._private_dir: str | None = None
        # Why the transport ended the connection, when it said (a message too large).
        self._transport_error: str | None = None
        self.task: asyncio.Task[None] | None = None

    # -- used by McpTool --------------------------------------------------

    def ready_client(self) -> Client:
        if self.client is None or self.status.state != "ready":
            why = f": {self.status.error}" if self.status.error else ""
            raise ToolExecutionError(
                f"MCP server {self.name!r} is not connected (state {self.status.state}{why})"
            )
        return self.client

    def call_failed(self, exc: BaseException) -> ToolError:
        """The error a failed call ends with; a closed connection also starts a restart."""
        if isinstance(exc, MCPError) and exc.code != types.CONNECTION_CLOSED:
            return ToolExecutionError(f"MCP server {self.name!r} answered with an error: {exc}")
        self._dead.set()
        detail = str(exc) or type(exc).__name__
        return ToolExecutionError(
            f"MCP server {self.name!r} stopped answering during the call ({detail}); "
            "it is being restarted"
        )

    # -- supervision ------------------------------------------------------

    async def run(self) -> None:
        failures = 0
        first = True
        while not self._stopping:
            if not first:
                self.status.restarts += 1
            first = False
            self.status.state = "connecting"
            self.status.next_retry_s = None
            started = time.monotonic()
            try:
                await self._session()
            except asyncio.CancelledError:
                raise
            except BaseException as exc:  # an ExceptionGroup from the SDK's task groups
                self.status.error = _describe(exc)
                log.warning("MCP server %s: %s", self.name, self.status.error)
            finally:
                self.client = None
            if self._stopping:
                break
            if time.monotonic() - started >= self.manager.stable_after:
                failures = 0  # it ran well for a while: start the backoff over
            delay = self.manager.backoff.delay(failures)
            failures += 1
            self.status.state = "failed"
            self.status.next_retry_s = delay
            if self.status.error is None:
                self.status.error = "the connection ended"
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await self._stop.wait()  # a stop ends the backoff at once
        self.status.state = "stopped"

    async def _session(self) -> None:
        """One connection: open the transport, list the tools, then watch
        until the connection ends (re-listing when the server says so)."""
        self._dead.clear()
        self._relist.clear()
        self._transport_error = None
        cfg = self.config
        async with contextlib.AsyncExitStack() as stack:
            client = Client(
                await self._transport(stack),
                mode="legacy",
                message_handler=self._on_message,
                cache=None,
                client_info=types.Implementation(name="toolrelay", version="0.1.0"),
            )
            async with asyncio.timeout(cfg.connect_timeout):
                await stack.enter_async_context(client)
                tools = await self._list(client)
            self.client = client
            self.manager.sync_tools(self, tools)
            self.status.state = "ready"
            self.status.error = None
            log.info("MCP server %s: ready with %d tool(s)", self.name, len(self.registered))
            await self._watch(client)
            self.status.error = self._transport_error or "the server's connection closed"
            self.status.state = "failed"

    async def _transport(self, stack: contextlib.AsyncExitStack) -> Any:
        """The configured transport: a bounded stdio process or streamable HTTP."""
        cfg = self.config
        if cfg.command is not None:
            return bounded_stdio_client(
                self._stdio_parameters(),
                server=self.name,
                max_message_bytes=cfg.max_message_bytes,
            )
        assert cfg.url is not None
        http = await stack.enter_async_context(create_mcp_http_client(headers=dict(cfg.headers)))
        # The SDK bounds each SSE event (1 MiB by default); one key for both
        # transports. Past it the call fails and the connection restarts.
        return streamable_http_client(
            cfg.url, http_client=http, max_sse_event_size=cfg.max_message_bytes
        )

    async def _watch(self, client: Client) -> None:
        """Until the connection is dead: re-list the tools on list_changed,
        and notice an idle server that exits."""
        cfg = self.config
        listed_at = time.monotonic()
        while not self._dead.is_set():
            if self._relist.is_set():
                # At most one re-list per list_changed_interval: a flood of
                # notifications meanwhile is one re-list, after the wait.
                wait = listed_at + cfg.list_changed_interval - time.monotonic()
                if wait > 0:
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(wait):
                            await self._dead.wait()
                    continue
                self._relist.clear()
                async with asyncio.timeout(cfg.connect_timeout):
                    tools = await self._list(client)
                listed_at = time.monotonic()
                self.manager.sync_tools(self, tools)
                continue
            # The SDK offers no "closed" signal: look at its dispatcher's flag,
            # so an idle server that exits is noticed without a call failing.
            dispatcher = getattr(client.session, "_dispatcher", None)
            if getattr(dispatcher, "_closed", False):
                return
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(WATCH_INTERVAL):
                    await _first(self._dead, self._relist)

    async def _list(self, client: Client) -> list[types.Tool]:
        tools: list[types.Tool] = []
        cursor: str | None = None
        for _ in range(LIST_PAGES):
            page = await client.list_tools(cursor=cursor)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
        return tools

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self._relist.set()
        elif isinstance(message, MessageTooLarge):
            # Logged by the transport; kept so GET /mcp-servers says why a
            # connection it ended went down.
            self._transport_error = str(message)
        elif isinstance(message, Exception):
            log.warning("MCP server %s: transport error: %s", self.name, message)

    def _stdio_parameters(self) -> StdioServerParameters:
        cfg = self.config
        assert cfg.command is not None
        cwd = os.path.expanduser(cfg.cwd) if cfg.cwd else self._private()
        argv = [cfg.command, *cfg.args]
        sandbox_config = self.manager.sandbox_config
        if sandbox_config is not None:
            _check_not_hidden(cwd, sandbox_config.hidden)
            # Server-wide, not per workspace: the server's "workspace" is its cwd,
            # the only place it may write; the host is visible read-only.
            sandbox = Sandbox(sandbox_config, cwd)
            # The command and its path arguments come from the admin's config
            # (trusted): when they live under /tmp (a venv, a checkout), show
            # their folder again, read-only, over the sandbox's fresh /tmp.
            command_path = shutil.which(cfg.command) or cfg.command
            shown = reexposed_folders([command_path, *cfg.args])
            argv = sandbox.command(
                argv, cwd=cwd, network=cfg.network, host_view="full", extra_readable=shown
            )
        return StdioServerParameters(command=argv[0], args=argv[1:], env=dict(cfg.env), cwd=cwd)

    def _private(self) -> str:
        if self._private_dir is None:
            self._private_dir = tempfile.mkdtemp(prefix=f"toolrelay-mcp-{self.name}-")
        return self._private_dir

    async def stop(self) -> None:
        self._stopping = True
        self._stop.set()
        self._dead.set()
        task = self.task
        if task is not None and not task.done():
            # A clean exit first (the SDK closes stdin, then terminates the
            # process); cancellation when it does not come in time.
            done, _ = await asyncio.wait({task}, timeout=5.0)
            if not done:
                task.cancel()
                await asyncio.wait({task}, timeout=5.0)
        self.status.state = "stopped"
        if self._private_dir is not None:
            shutil.rmtree(self._private_dir, ignore_errors=True)


class McpManager:
    """Connects every configured MCP server and keeps its tools registered."""

    def __init__(
        self,
        servers: Mapping[str, McpServerConfig],
        dispatcher: ToolDispatcher,
        *,
        sandbox_config: SandboxConfig | None = None,
        on_tools_changed: ToolsChanged | None = None,
        backoff_base: float = 0.5,
        backoff_max: float = 30.0,
        stable_after: float = 30.0,
    ) -> None:
        self.dispatcher = dispatcher
        self.sandbox_config = sandbox_config
        self.on_tools_changed = on_tools_changed
        self.listeners: list[ToolsChanged] = []
        # Restarts never run out (attempts only bounds Backoff.delays, unused
        # here); no jitter, so next_retry_s reports the wait exactly.
        self.backoff = Backoff(initial=backoff_base, max_delay=backoff_max, jitter=0.0)
        self.stable_after = stable_after
        self.connections = {name: McpConnection(name, cfg, self) for name, cfg in servers.items()}

    async def start(self, *, wait: float | None = None) -> None:
        """Start every connection; with ``wait``, return once each has left
        ``connecting`` (or ``wait`` seconds passed), so start-up lists them."""
        for conn in self.connections.values():
            conn.task = asyncio.create_task(conn.run(), name=f"mcp-{conn.name}")
        if wait:
            await self.settled(wait)

    async def settled(self, limit: float) -> bool:
        """Wait (at most ``limit`` s) until no server is ``connecting``."""
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            if all(c.status.state != "connecting" for c in self.connections.values()):
                return True
            await asyncio.sleep(0.05)
        return False

    async def stop(self) -> None:
        await asyncio.gather(*(c.stop() for c in self.connections.values()))

    def add_listener(self, listener: ToolsChanged) -> Callable[[], None]:
        """Also tell ``listener`` of every change (the MCP endpoint does, to
        send ``notifications/tools/list_changed``); returns its remover."""
        self.listeners.append(listener)
        return lambda: self.listeners.remove(listener)

    def _listeners(self) -> list[ToolsChanged]:
        first = [self.on_tools_changed] if self.on_tools_changed is not None else []
        return first + list(self.listeners)

    def states(self) -> list[dict[str, Any]]:
        return [c.status.to_json() for c in self.connections.values()]

    def sync_tools(self, conn: McpConnection, tools: list[types.Tool]) -> None:
        """Make the registry hold exactly the expressible tools of ``conn``'s
        listing; report the change once."""
        cfg = conn.config
        wanted: dict[str, types.Tool] = {}
        skipped: list[dict[str, str]] = []
        for tool in tools:
            name = tool_name(conn.name, tool.name)
            if len(name) > MAX_TOOL_NAME:
                skipped.append({"tool": tool.name, "error": f"{name!r} is longer than 64"})
            elif name in wanted:
                skipped.append({"tool": tool.name, "error": f"{name!r} is taken by another tool"})
            else:
                wanted[name] = tool
        added: list[str] = []
        removed: list[str] = []
        for name, (_, listed) in list(conn.registered.items()):
            if wanted.get(name) != listed:
                self.dispatcher.unregister(name)
                del conn.registered[name]
                conn.dropped_outputs.pop(name, None)
                removed.append(name)
        for name, tool in wanted.items():
            if name in conn.registered:
                continue
            try:
                self._register(conn, name, tool)
            except ToolRegistrationError as exc:
                pointer = exc.pointer if isinstance(exc, SchemaNotExpressible) else ""
                skipped.append({"tool": tool.name, "error": str(exc), "pointer": pointer})
                log.error("MCP server %s: tool %s not registered: %s", conn.name, tool.name, exc)
                continue
            conn.registered[name] = (tool.name, tool)
            added.append(name)
        # A tool that changed is both removed and added: report it as changed once.
        changed = set(added) & set(removed)
        removed = [n for n in removed if n not in changed]
        conn.status.tools = sorted(conn.registered)
        conn.status.skipped = skipped
        conn.status.output_schemas_dropped = [
            conn.dropped_outputs[n] for n in sorted(conn.dropped_outputs)
        ]
        if added or removed:
            for listener in self._listeners():
                listener(sorted(added), sorted(removed), f"mcp:{conn.name}")
        del cfg

    def _register(self, conn: McpConnection, name: str, tool: types.Tool) -> None:
        schema = translate_schema(tool.input_schema)
        output_schema, dropped = _output_schema(tool)
        definition = ToolDefinition(
            name=name,
            description=(tool.description or tool.title or f"{tool.name} (MCP server {conn.name})"),
            input_schema=schema,
            side_effects=conn.config.side_effects_of(tool.name),
            output_schema=output_schema,
        )
        mcp_name = tool.name
        entry = conn.config.tools.get(mcp_name)
        timeout = entry.timeout if entry is not None else None

        def factory() -> McpTool:
            return McpTool(conn, mcp_name, definition)

        # The dispatcher compiles output_schema once, here, and checks every
        # structured result against it (a mismatch: execution_error naming the path).
        self.dispatcher.register(factory, group=f"mcp:{conn.name}", timeout=timeout)
        if dropped is not None:
            conn.dropped_outputs[name] = dropped
            log.warning(
                "MCP server %s: tool %s registered without its outputSchema (%s); "
                "its structured results are passed on unchecked",
                conn.name,
                tool.name,
                dropped["error"],
            )


def _output_schema(tool: types.Tool) -> tuple[dict[str, Any] | None, dict[str, str] | None]:
    """(the tool's outputSchema in the subset, None) or, when the subset cannot
    express it, (None, why). An inexpressible outputSchema does not refuse the
    tool, unlike an input schema: the input schema guards what we send, while
    the output schema only describes what comes back, so the tool still works
    without it; its results then pass unchecked, like a tool that declares none."""
    if tool.output_schema is None:
        return None, None
    try:
        return translate_schema(dict(tool.output_schema), "output schema"), None
    except SchemaNotExpressible as exc:
        return None, {"tool": tool.name, "error": str(exc), "pointer": exc.pointer}


def _check_not_hidden(cwd: str, hidden: tuple[str, ...]) -> None:
    """The sandbox binds ``cwd`` after hiding the protected paths, so a ``cwd``
    inside one (or holding one) would show it again: refused, as a session's
    workspace would be."""
    real = os.path.realpath(cwd)
    for path in hidden:
        inside = os.path.commonpath([real, path]) == path
        holds = os.path.commonpath([real, path]) == real
        if inside or holds:
            raise ValueError(f"cwd {cwd!r} overlaps a path the sandbox hides ({path})")


async def _first(*events: asyncio.Event) -> None:
    waits = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()


def _describe(exc: BaseException) -> str:
    """One line for an error that may be wrapped in exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, TimeoutError):
        return "connecting timed out"
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if not isinstance(exc, MCPError) else text
