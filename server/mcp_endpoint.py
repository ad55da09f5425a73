"""toolrelay as an MCP server: streamable HTTP at ``/sessions/{id}/mcp``.

One low-level SDK ``Server`` and one stateful session manager serve every
toolrelay session; each request names its session in the path and carries
the bearer token our AuthMiddleware already checked. Before the SDK sees a
request, server/mcp_guard.py checks its Host and Origin (DNS rebinding) and
names the identity its transport session is bound to (the token's name and
the session in the path: any POST, GET or DELETE of another gets 404); every
MCP request is then authorised again (``SessionRegistry.get``).

- ``tools/list``: the session's tools, as ``GET /sessions/{id}/tools`` has them,
  each with its ``outputSchema`` when its definition has an ``output_schema``.
- ``tools/call``: one ``tool_use`` through the session's dispatcher, as a
  client-played turn runs its calls (``ToolDispatcher.dispatch`` with the
  session's DispatchSession: validation, policy, confirmation, the session's
  concurrency cap, events, the durable log). It is not a turn: it does not
  take the session's one turn slot (several MCP calls run at once, beside a
  running turn, under the same cap) and does not enter the conversation,
  which belongs to the MCP client's own agent. Its events carry a
  ``turn_id`` of the form ``mcp_<hex>``, which is what a client answering its
  confirmation puts in the URL.
- While the call waits for a confirmation it sends progress notifications
  (when the MCP client asked for progress) naming the request; any client
  may answer over HTTP. A deny or a timeout comes back as a result with
  ``isError: true`` carrying the reason.
- A successful call's ``structuredContent`` is the tool's validated
  ``ToolOutput.data``, handed over by ``dispatch(..., on_output=...)``
  whole (events carry structured data only up to the event output limit).
- An unknown tool is a JSON-RPC error (-32602), not a result.
- Nothing runs after its client left: a call whose client cancels it, whose
  transport session ends or whose HTTP connection drops is ended, its
  pending confirmation settled ``cancelled`` (a late answer gets 409).
- Clients that listed tools get ``notifications/tools/list_changed`` when
  the MCP servers' tools change (server/mcp_notify.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import mcp_types as types
from mcp import MCPError
from mcp.server.lowlevel.server import NotificationOptions, Server
from mcp.server.models import InitializationOptions
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import Receive, Scope, Send

from dispatcher.tool import ToolOutput
from protocol.canonical import ImageBlock, TextBlock, ToolResultBlock, ToolUseBlock
from server.errors import ApiError, error_body
from server.mcp_guard import (
    RebindingGuard,
    client_left,
    refused,
    transport_identity,
    watch_disconnect,
)
from server.mcp_notify import ListChangedNotifier
from server.middleware import principal_of
from server.schemas import InputLimitExceeded, check_json_limits

if TYPE_CHECKING:
    from dispatcher import ToolDispatcher
    from dispatcher.mcp import McpManager
    from server.config import ServerSection
    from server.session_registry import SessionRegistry

log = logging.getLogger("toolrelay.mcp")

PATH = "/sessions/{session_id}/mcp"
# Seconds between progress notifications while a call waits or runs.
PROGRESS_INTERVAL = 1.0
# How long a call whose client left may take to end by itself once its
# confirmation was cancelled, before its task is cancelled.
ABANDON_GRACE = 2.0


@dataclass(frozen=True, slots=True)
class EndpointParts:
    """What the endpoint uses of the started services: the sessions it
    authorises against, the dispatcher its calls go through, the storage
    check new work passes first, and the MCP servers' manager (None without
    any) whose tool changes it relays."""

    sessions: SessionRegistry
    dispatcher: ToolDispatcher
    check_storage: Callable[[], None]
    mcp: McpManager | None


class McpEndpoint:
    """The MCP server side; an ASGI app for ``PATH`` plus its lifespan
    (``run``, with the started services' parts)."""

    def __init__(
        self, server_cfg: ServerSection, *, progress_interval: float = PROGRESS_INTERVAL
    ) -> None:
        self._parts: EndpointParts | None = None
        self.progress_interval = progress_interval
        self.server: Server[Any] = _Server(
            "toolrelay",
            version="0.1.0",
            instructions="toolrelay session tools: every call is validated, gated by the "
            "session's policy (a person may have to confirm it) and recorded.",
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
        )
        self.manager: StreamableHTTPSessionManager | None = None
        # Calls whose client left, while they end (see _abandon).
        self._abandoned: set[asyncio.Task[None]] = set()
        self.notifier = ListChangedNotifier()
        self.guard = RebindingGuard.of(
            server_cfg.host, server_cfg.allowed_hosts, server_cfg.allowed_origins
        )

    @property
    def parts(self) -> EndpointParts:
        assert self._parts is not None, "McpEndpoint.run() first"
        return self._parts

    @contextlib.asynccontextmanager
    async def run(self, parts: EndpointParts) -> AsyncIterator[None]:
        # A session manager runs once; a new one per lifespan lets an app be
        # started again (tests do).
        manager = StreamableHTTPSessionManager(self.server, session_idle_timeout=3600)
        self._parts = parts
        mcp = parts.mcp
        stop_listening = mcp.add_listener(self.notifier.tools_changed) if mcp else None
        async with manager.run():
            self.manager = manager
            try:
                yield
            finally:
                self.manager = None
                if stop_listening is not None:
                    stop_listening()
                await self.notifier.close()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        manager = self.manager
        if manager is None:
            response = JSONResponse(
                error_body("unavailable", "the MCP endpoint is not running"), status_code=503
            )
            await response(scope, receive, send)
            return
        why = self.guard.refusal(Headers(scope=scope))
        if why is not None:
            await refused(why)(scope, receive, send)
            return
        # The SDK binds each transport session to this identity and answers
        # 404 to any request (POST, GET, DELETE) for it that comes with another.
        session_id = str(scope.get("path_params", {}).get("session_id", ""))
        scope["user"] = transport_identity(principal_of(scope).token_name, session_id)
        if scope.get("method") == "POST":
            receive = watch_disconnect(scope, receive)
        await manager.handle_request(scope, receive, send)

    # -- handlers ---------------------------------------------------------

    def _session(self, ctx: Any) -> tuple[Any, Any]:
        """(session record, DispatchSession) of the request, authorised again."""
        request = ctx.request
        if not isinstance(request, Request):
            raise MCPError(code=types.INVALID_REQUEST, message="no HTTP request in context")
        session_id = request.path_params.get("session_id", "")
        sessions = self.parts.sessions
        try:
            record = sessions.get(principal_of(request.scope), session_id)
            return record, sessions.dispatch_session(record)
        except ApiError as exc:
            raise MCPError(code=types.INVALID_PARAMS, message=exc.message) from None

    async def _list_tools(self, ctx: Any, params: Any) -> types.ListToolsResult:
        _, dispatch_session = self._session(ctx)
        # It listed them: tell it when they change.
        self.notifier.watch(ctx.request.headers.get("mcp-session-id"), ctx.session)
        definitions = self.parts.dispatcher.definitions_for(dispatch_session)
        return types.ListToolsResult(
            tools=[
                types.Tool(
                    name=d.name,
                    description=d.description,
                    input_schema=d.input_schema,
                    # Already in the subset (checked at registration): plain
                    # JSON Schema any MCP client can validate against.
                    output_schema=d.output_schema,
                    annotations=types.ToolAnnotations(
                        read_only_hint=d.side_effects.value in ("none", "read"),
                        open_world_hint=d.side_effects.value == "network",
                    ),
                )
                for d in definitions
            ]
        )

    def _tool_names(self, dispatch_session: Any) -> set[str]:
        return {d.name for d in self.parts.dispatcher.definitions_for(dispatch_session)}

    async def _call_tool(
        self, ctx: Any, params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        record, dispatch_session = self._session(ctx)
        try:
            self.parts.check_storage()
        except ApiError as exc:
            raise MCPError(code=types.INTERNAL_ERROR, message=exc.message) from None
        if params.name not in self._tool_names(dispatch_session):
            # A protocol error, not a tool result (the MCP spec's -32602).
            raise MCPError(
                code=types.INVALID_PARAMS,
                message=f"Unknown tool: {params.name!r} is not a tool of session {record.id}",
            )
        arguments = dict(params.arguments or {})
        try:
            # The limits of tool input over HTTP (server/schemas.py): an input
            # over one is refused before the dispatcher or its events see it.
            check_json_limits(arguments, "arguments")
        except InputLimitExceeded as exc:
            return _error_result(
                f"Invalid input for tool {params.name!r}: {exc}. The tool did not run."
            )
        token = secrets.token_hex(8)
        block = ToolUseBlock(id=f"mcp_{token}", name=params.name, input=arguments)
        turn_id = f"mcp_{token}"
        outputs: list[ToolOutput] = []
        call = asyncio.ensure_future(
            self.parts.dispatcher.dispatch(
                block, dispatch_session, turn_id=turn_id, on_output=outputs.append
            )
        )
        request = ctx.request
        left = client_left(request.scope) if isinstance(request, Request) else None
        try:
            await self._follow(ctx, call, left, record.id, block, turn_id)
        except BaseException:
            # The MCP client cancelled, or its transport session ended.
            self._abandon(call, record.id, block.id)
            raise
        if not call.done():
            # Its client disconnected: nothing may run for nobody.
            self._abandon(call, record.id, block.id)
            return _error_result(f"{params.name}: the MCP client went away; the call was cancelled")
        result = call.result()
        structured = outputs[0].data if outputs and not result.is_error else None
        return _to_mcp(result, structured)

    async def _follow(
        self,
        ctx: Any,
        call: asyncio.Future[ToolResultBlock],
        left: asyncio.Event | None,
        session_id: str,
        block: ToolUseBlock,
        turn_id: str,
    ) -> None:
        """Wait for the call, reporting progress, until it ends or its client leaves."""
        watched: set[asyncio.Future[Any]] = {call}
        gone = asyncio.ensure_future(left.wait()) if left is not None else None
        if gone is not None:
            watched.add(gone)
        try:
            step = 0
            while True:
                await asyncio.wait(
                    watched, timeout=self.progress_interval, return_when=asyncio.FIRST_COMPLETED
                )
                if call.done() or (left is not None and left.is_set()):
                    return
                step += 1
                message = self._progress_message(session_id, block, turn_id)
                await ctx.session.report_progress(step, None, message)
        finally:
            if gone is not None:
                gone.cancel()

    def _abandon(
        self, call: asyncio.Future[ToolResultBlock], session_id: str, tool_use_id: str
    ) -> None:
        """End a call whose client left. A pending confirmation is settled as
        ``cancelled`` (the call publishes ``tool.confirmation_resolved`` and
        ends ``cancelled``; a late answer gets 409); a call past its
        confirmation is cancelled at once. The waiting happens in a task of
        its own: the handler calling this may be being cancelled itself."""
        broker = self.parts.dispatcher.broker
        settled = [
            broker.cancel(r.request_id)
            for r in broker.pending(session_id)
            if r.tool_use_id == tool_use_id
        ]
        grace = ABANDON_GRACE if any(settled) else 0.0
        task = asyncio.ensure_future(_end(call, grace))
        self._abandoned.add(task)
        task.add_done_callback(self._abandoned.discard)

    def _progress_message(self, session_id: str, block: ToolUseBlock, turn_id: str) -> str:
        broker = self.parts.dispatcher.broker
        pending = [r for r in broker.pending(session_id) if r.tool_use_id == block.id]
        if not pending:
            return f"{block.name} is running"
        r = pending[0]
        return (
            f"waiting for confirmation {r.request_id}: answer with POST "
            f"/sessions/{session_id}/turns/{turn_id}/confirmations/{r.request_id}"
        )


async def _end(call: asyncio.Future[ToolResultBlock], grace: float) -> None:
    """Let a call whose confirmation was cancelled end by itself (``grace``
    seconds), then cancel whatever is left of it."""
    if grace > 0:
        await asyncio.wait({call}, timeout=grace)
    if not call.done():
        call.cancel()
        with contextlib.suppress(BaseException):
            await asyncio.wait({call}, timeout=10)


def _error_result(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)


class _Server(Server[Any]):
    """The SDK's low-level server, announcing ``tools.listChanged``: the
    endpoint sends ``notifications/tools/list_changed`` (server/mcp_notify.py)."""

    def create_initialization_options(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
    ) -> InitializationOptions:
        return super().create_initialization_options(
            notification_options or NotificationOptions(tools_changed=True),
            experimental_capabilities,
            extensions,
        )


def _to_mcp(result: ToolResultBlock, structured: Any = None) -> types.CallToolResult:
    content: list[types.TextContent | types.ImageContent] = []
    for block in result.content:
        if isinstance(block, TextBlock):
            content.append(types.TextContent(type="text", text=block.text))
        elif isinstance(block, ImageBlock):
            content.append(
                types.ImageContent(type="image", data=block.data, mime_type=block.media_type)
            )
    return types.CallToolResult(
        content=list(content), structured_content=structured, is_error=result.is_error
    )
