"""One MCP tool as a dispatcher tool: the call goes to the server through its
connection; the result maps onto ToolOutput.

- text content -> text blocks; images -> image blocks (one over 5 MiB -> a
  line naming it); embedded text resources -> their text; other resources
  and audio -> a line naming them; the text, all blocks together, capped at
  the server's ``max_result_bytes`` as the shell caps its output (head and
  tail kept around a marker), so a huge result is neither stored nor sent to
  later model requests whole (the message itself is bounded by the
  transport: dispatcher/mcp/stdio.py);
- ``structuredContent`` -> ``ToolOutput.data``, which the dispatcher checks
  against the definition's ``output_schema`` (the server's ``outputSchema``
  translated into the subset, see manager.py) and publishes as
  ``tool.completed.data.structured``, as for any built-in tool; also as JSON
  text when the server sent no text, so the model sees it;
- ``isError`` -> a failed output (the dispatcher reports ``execution_error``);
- an MCP error, a dead server -> ToolExecutionError;
- cancellation (the dispatcher's cancel_event, a timeout, the turn's task)
  cancels the SDK call, which sends ``notifications/cancelled``.

The call is sent with the session's ``send_request``, not ``call_tool``:
``call_tool`` checks ``structuredContent`` against the server's own
``outputSchema`` with the Python ``jsonschema`` (whose ``pattern`` is a
backtracking ``re``: an outside schema could stall the event loop) and turns a
mismatch into a RuntimeError that would read as a broken connection. The
dispatcher's compiled subset validator does that check instead, and a
mismatch is an ``execution_error`` naming the path.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import TYPE_CHECKING, Any

import mcp_types as types
from mcp import MCPError

from dispatcher.errors import ToolCancelled
from dispatcher.process import OutputCapture
from dispatcher.tool import BaseTool, ToolContext, ToolEffects, ToolOutput, summarize_input
from protocol.canonical import ImageBlock, SideEffects, TextBlock, ToolDefinition

if TYPE_CHECKING:
    from dispatcher.mcp.manager import McpConnection
    from dispatcher.sandbox import Sandbox
    from dispatcher.workspace import WorkspaceFileAPI

# How long a cancelled call waits for the SDK to send its cancellation.
CANCEL_WAIT = 5.0
# An image (base64) larger than this is replaced by a line naming it: the
# size the HTTP API accepts for a user's image (limits.max_image_bytes).
MAX_IMAGE_BYTES = 5 * 1024 * 1024


class McpTool(BaseTool):
    """A dispatcher tool that forwards its call to one MCP server's tool."""

    def __init__(
        self,
        connection: McpConnection,
        mcp_name: str,
        definition: ToolDefinition,
    ) -> None:
        self.definition = definition
        self._connection = connection
        self._mcp_name = mcp_name
        self._task: asyncio.Task[types.CallToolResult] | None = None

    async def effects(
        self,
        input: dict[str, Any],
        workspace: WorkspaceFileAPI,
        *,
        sandbox: Sandbox | None = None,
        prepared: Any = None,
    ) -> ToolEffects:
        """What the server does with a call is its own: unknown, unless the
        tool is declared (or annotated and trusted) to read only."""
        summary = summarize_input(self.definition.name, input)
        if self.definition.side_effects in (SideEffects.NONE, SideEffects.READ):
            return ToolEffects(summary=summary)
        return ToolEffects.not_known(summary)

    async def execute(self, input: dict[str, Any], context: ToolContext) -> ToolOutput:
        client = self._connection.ready_client()

        async def progress(progress: float, total: float | None, message: str | None) -> None:
            shown = f"{progress:g}/{total:g}" if total is not None else f"{progress:g}"
            context.emit_output("progress", f"{message + ' ' if message else ''}{shown}\n")

        request = types.CallToolRequest(
            params=types.CallToolRequestParams(name=self._mcp_name, arguments=input)
        )
        # send_request, not call_tool: see the module docstring.
        self._task = asyncio.ensure_future(
            client.session.send_request(request, types.CallToolResult, progress_callback=progress)
        )
        waiter = asyncio.ensure_future(context.cancel_event.wait())
        try:
            await asyncio.wait({self._task, waiter}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            await self._stop_call()
            raise
        finally:
            waiter.cancel()
        if not self._task.done():
            await self._stop_call()
            raise ToolCancelled(f"{self.definition.name} was cancelled")
        try:
            result = self._task.result()
        except asyncio.CancelledError:
            if context.cancel_event.is_set():
                raise ToolCancelled(f"{self.definition.name} was cancelled") from None
            # Not ours: the SDK's task group ended under the call (a transport failure).
            raise self._connection.call_failed(ConnectionError("the connection was lost")) from None
        except MCPError as exc:
            raise self._connection.call_failed(exc) from None
        except Exception as exc:  # the transport's own errors (HTTP, a dead pipe)
            raise self._connection.call_failed(exc) from None
        return self._map(result)

    async def cancel(self) -> bool:
        await self._stop_call()
        return True

    async def _stop_call(self) -> None:
        task = self._task
        if task is None or task.done():
            return
        # Cancelling the SDK's call sends notifications/cancelled to the server.
        task.cancel()
        with contextlib.suppress(BaseException):
            await asyncio.wait({task}, timeout=CANCEL_WAIT)

    def _map(self, result: types.CallToolResult) -> ToolOutput:
        content: list[TextBlock | ImageBlock] = []
        for block in result.content:
            if isinstance(block, types.TextContent):
                content.append(TextBlock(text=block.text))
            elif isinstance(block, types.ImageContent) and len(block.data) > MAX_IMAGE_BYTES:
                content.append(
                    TextBlock(
                        text=f"[image of {len(block.data)} bytes left out: over {MAX_IMAGE_BYTES}]"
                    )
                )
            elif isinstance(block, types.ImageContent):
                content.append(ImageBlock(media_type=block.mime_type, data=block.data))
            elif isinstance(block, types.EmbeddedResource):
                res = block.resource
                if isinstance(res, types.TextResourceContents):
                    content.append(TextBlock(text=res.text))
                else:
                    content.append(
                        TextBlock(text=f"[binary resource {res.uri} ({res.mime_type}) left out]")
                    )
            elif isinstance(block, types.ResourceLink):
                content.append(TextBlock(text=f"[resource: {block.uri}]"))
            else:
                kind = getattr(block, "type", type(block).__name__)
                content.append(TextBlock(text=f"[{kind} content left out]"))
        metadata: dict[str, Any] = {"mcp_server": self._connection.name}
        data: dict[str, Any] | None = None
        structured = result.structured_content
        # An error result's structured content is not the tool's output: the
        # outputSchema describes successes only (and the call fails anyway).
        if structured is not None and not result.is_error:
            data = structured
            if not any(isinstance(b, TextBlock) for b in content):
                content.append(TextBlock(text=json.dumps(structured, ensure_ascii=False)))
        if not content:
            content.append(TextBlock(text="(no output)"))
        content = capped(content, self._connection.name, self._connection.config.max_result_bytes)
        return ToolOutput(
            content=content, success=not result.is_error, metadata=metadata, data=data
        )


def capped(
    content: list[TextBlock | ImageBlock], server: str, limit: int
) -> list[TextBlock | ImageBlock]:
    """The result's text kept to ``limit`` bytes as the shell keeps its output:
    the head and the tail around a ``[... N bytes omitted ...]`` marker, plus
    a line naming the setting. What is kept is what is stored and what every
    later model request carries."""
    texts = [b.text for b in content if isinstance(b, TextBlock)]
    size = sum(len(t.encode()) for t in texts)
    if size <= limit:
        return content
    capture = OutputCapture(limit)
    for n, text in enumerate(texts):
        capture.feed((("\n" if n else "") + text).encode())
    note = (
        f"\n[truncated: the result had {size} bytes of text; mcp_servers.{server}.max_result_bytes "
        f"keeps {limit}, the head and the tail]"
    )
    images: list[TextBlock | ImageBlock] = [b for b in content if isinstance(b, ImageBlock)]
    return [TextBlock(text=capture.text() + note), *images]
