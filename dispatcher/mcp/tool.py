"""One MCP tool as a dispatcher tool: the call goes to the server through its
connection; the result maps onto ToolOutput.

- text content -> text blocks; images -> image blocks; embedded text
  resources -> their text; other resources and audio -> a line naming them;
- ``structuredContent`` -> ``metadata["structured"]`` after validation
  against the tool's ``outputSchema`` (with jsonschema-rs: an interpreter,
  never generated code; its regexes cannot backtrack catastrophically), and
  as JSON text when the server sent no text;
- ``isError`` -> a failed output (the dispatcher reports ``execution_error``);
- an MCP error, a dead server -> ToolExecutionError;
- cancellation (the dispatcher's cancel_event, a timeout, the turn's task)
  cancels the SDK call, which sends ``notifications/cancelled``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import TYPE_CHECKING, Any

import mcp_types as types
from mcp import MCPError

from dispatcher.errors import ToolCancelled, ToolExecutionError
from dispatcher.tool import BaseTool, ToolContext, ToolOutput
from protocol.canonical import ImageBlock, TextBlock, ToolDefinition

if TYPE_CHECKING:
    from dispatcher.mcp.manager import McpConnection

# How long a cancelled call waits for the SDK to send its cancellation.
CANCEL_WAIT = 5.0


class OutputValidator:
    """Validates ``structuredContent`` against an ``outputSchema``; built once."""

    def __init__(self, schema: dict[str, Any]) -> None:
        self._validator: Any
        try:
            import jsonschema_rs  # linear-time regexes: preferred when installed
        except ImportError:
            from jsonschema import validators
            from referencing import Registry

            cls = validators.validator_for(schema)
            cls.check_schema(schema)
            # An empty registry: nothing is ever fetched for a remote $ref.
            self._validator = cls(schema, registry=Registry())
            self._path = "absolute_path"
        else:
            self._validator = jsonschema_rs.validator_for(schema)
            self._path = "instance_path"

    def errors(self, instance: Any) -> list[str]:
        return [
            f"/{'/'.join(str(p) for p in getattr(e, self._path))}: {e.message}"
            for e in self._validator.iter_errors(instance)
        ][:10]


class McpTool(BaseTool):
    """A dispatcher tool that forwards its call to one MCP server's tool."""

    def __init__(
        self,
        connection: McpConnection,
        mcp_name: str,
        definition: ToolDefinition,
        output_validator: OutputValidator | None,
    ) -> None:
        self.definition = definition
        self._connection = connection
        self._mcp_name = mcp_name
        self._output = output_validator
        self._task: asyncio.Task[types.CallToolResult] | None = None

    async def execute(self, input: dict[str, Any], context: ToolContext) -> ToolOutput:
        client = self._connection.ready_client()

        async def progress(progress: float, total: float | None, message: str | None) -> None:
            shown = f"{progress:g}/{total:g}" if total is not None else f"{progress:g}"
            context.emit_output("progress", f"{message + ' ' if message else ''}{shown}\n")

        self._task = asyncio.ensure_future(
            client.call_tool(self._mcp_name, input, progress_callback=progress)
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
        structured = result.structured_content
        if structured is not None and not result.is_error:
            if self._output is not None:
                problems = self._output.errors(structured)
                if problems:
                    raise ToolExecutionError(
                        f"{self.definition.name} returned structured output that does not match "
                        "its outputSchema: " + "; ".join(problems)
                    )
            metadata["structured"] = structured
            if not any(isinstance(b, TextBlock) for b in content):
                content.append(TextBlock(text=json.dumps(structured, ensure_ascii=False)))
        if not content:
            content.append(TextBlock(text="(no output)"))
        return ToolOutput(content=content, success=not result.is_error, metadata=metadata)
