"""A real MCP server for the tests, written with the SDK's low-level Server.

Run as ``python mcp_test_server.py stdio`` or ``python mcp_test_server.py http PORT``
(streamable HTTP at ``http://127.0.0.1:PORT/mcp``). Its tools cover what toolrelay
must map: read-only tools, one that writes (into its working directory), a slow
one (reports progress; leaves ``cancelled.txt`` behind when a cancellation
reaches it), one whose schema uses ``$ref``/``$defs`` and ``anyOf [T, null]``,
one whose schema cannot be expressed in toolrelay's subset, an ``isError``
result, an image, structured output with an ``outputSchema`` (also one that
breaks its own schema, and one whose schema the subset cannot express), a
crash in the middle of a call, a change of the tool list, and a big result.
"""

from __future__ import annotations

import base64
import os
import sys
from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel.server import Server

# A 1x1 transparent PNG.
PNG = base64.b64encode(
    bytes.fromhex(
        "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
        "1f15c4890000000d49444154789c6360000002000001e221bc330000000049454e44ae426082"
    )
).decode()

OBJ = "object"
TOOLS: list[types.Tool] = [
    types.Tool(
        name="echo",
        description="Echo the text back.",
        input_schema={
            "type": OBJ,
            "properties": {"text": {"type": "string"}},
            "required": ["text"],
        },
    ),
    types.Tool(
        name="add",
        description="Add two integers; structured output.",
        input_schema={
            "type": OBJ,
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
        output_schema={
            "type": OBJ,
            "properties": {"sum": {"type": "integer"}},
            "required": ["sum"],
        },
    ),
    types.Tool(
        name="bad_add",
        description="Like add, but its structured result breaks its own outputSchema.",
        input_schema={"type": OBJ, "properties": {}},
        output_schema={
            "type": OBJ,
            "properties": {"sum": {"type": "integer"}},
            "required": ["sum"],
        },
    ),
    types.Tool(
        name="code",
        description="Structured output under an outputSchema outside the subset (pattern).",
        input_schema={"type": OBJ, "properties": {}},
        output_schema={
            "type": OBJ,
            "properties": {"code": {"type": "string", "pattern": "^[a-z]+$"}},
        },
    ),
    types.Tool(
        name="picture",
        description="Return a tiny image.",
        input_schema={"type": OBJ, "properties": {}},
    ),
    types.Tool(
        name="write_note",
        description="Write a note file into the server's working directory.",
        input_schema={
            "type": OBJ,
            "properties": {"name": {"type": "string"}, "content": {"type": "string"}},
            "required": ["name", "content"],
        },
    ),
    types.Tool(
        name="slow",
        description="Sleep, reporting progress.",
        input_schema={
            "type": OBJ,
            "properties": {"seconds": {"type": "number"}},
            "required": ["seconds"],
        },
    ),
    types.Tool(
        name="lookup",
        description="A schema with $ref and a nullable field.",
        input_schema={
            "type": OBJ,
            "$defs": {
                "Item": {
                    "type": OBJ,
                    "properties": {"id": {"type": "integer"}, "tag": {"$ref": "#/$defs/Tag"}},
                    "required": ["id"],
                },
                "Tag": {"type": "string", "enum": ["a", "b"]},
            },
            "properties": {
                "item": {"$ref": "#/$defs/Item"},
                "note": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None},
            },
            "required": ["item", "note"],
        },
    ),
    types.Tool(
        name="choose",
        description="An inexpressible schema (oneOf of two objects).",
        input_schema={
            "type": OBJ,
            "properties": {
                "pick": {"oneOf": [{"type": "string"}, {"type": "integer"}]},
            },
        },
    ),
    types.Tool(
        name="fail",
        description="Always an isError result.",
        input_schema={"type": OBJ, "properties": {}},
    ),
    types.Tool(
        name="crash",
        description="Exit the process in the middle of the call.",
        input_schema={"type": OBJ, "properties": {}},
    ),
    types.Tool(
        name="grow",
        description="Add the tool 'extra' and announce the list change.",
        input_schema={"type": OBJ, "properties": {}},
    ),
]
TOOLS.append(
    types.Tool(
        name="big",
        description="A text result of kb KiB.",
        input_schema={
            "type": OBJ,
            "properties": {"kb": {"type": "integer"}},
            "required": ["kb"],
        },
    )
)
EXTRA = types.Tool(
    name="extra",
    description="Appears after grow.",
    input_schema={"type": OBJ, "properties": {}},
)


def text(value: str, *, is_error: bool = False) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=value)], is_error=is_error
    )


async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
    return types.ListToolsResult(tools=list(TOOLS))


async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
    args: dict[str, Any] = dict(params.arguments or {})
    name = params.name
    if name == "echo":
        return text(f"echo: {args['text']}")
    if name == "add":
        total = int(args["a"]) + int(args["b"])
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=str(total))],
            structured_content={"sum": total},
        )
    if name == "bad_add":
        return types.CallToolResult(
            content=[types.TextContent(type="text", text="five")],
            structured_content={"sum": "five"},
        )
    if name == "code":
        # No text block: the structured result alone is the answer.
        return types.CallToolResult(content=[], structured_content={"code": "abc"})
    if name == "picture":
        return types.CallToolResult(
            content=[types.ImageContent(type="image", data=PNG, mime_type="image/png")]
        )
    if name == "write_note":
        with open(os.path.join(os.getcwd(), args["name"]), "w", encoding="utf-8") as f:  # noqa: ASYNC230
            f.write(args["content"])
        return text(f"wrote {args['name']}")
    if name == "slow":
        seconds = float(args["seconds"])
        steps = 10
        try:
            for i in range(steps):
                await ctx.session.report_progress(i, steps, "sleeping")
                await anyio.sleep(seconds / steps)
        except anyio.get_cancelled_exc_class():
            with open(os.path.join(os.getcwd(), "cancelled.txt"), "w", encoding="utf-8") as f:  # noqa: ASYNC230
                f.write("cancelled\n")
            raise
        return text(f"slept {seconds}")
    if name == "lookup":
        return text(f"item {args['item']['id']} note {args.get('note')}")
    if name == "fail":
        return text("it failed on purpose", is_error=True)
    if name == "crash":
        await anyio.sleep(0.2)
        os._exit(3)
    if name == "grow":
        if EXTRA not in TOOLS:
            TOOLS.append(EXTRA)
        await ctx.session.send_tool_list_changed()
        return text("grown")
    if name == "big":
        return text("b" * (int(args["kb"]) * 1024))
    if name == "extra":
        return text("extra here")
    return text(f"unknown tool {name}", is_error=True)


server: Server[Any] = Server("toolrelay-test", on_list_tools=list_tools, on_call_tool=call_tool)


async def run_stdio() -> None:
    from mcp.server.stdio import stdio_server

    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


def run_http(port: int) -> None:
    import uvicorn

    app = server.streamable_http_app(host="127.0.0.1")
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", loop="asyncio")


if __name__ == "__main__":
    if sys.argv[1] == "stdio":
        anyio.run(run_stdio)
    else:
        run_http(int(sys.argv[2]))
