"""toolrelay's MCP endpoint as the protocol wants it (issue 30, section 3),
with the SDK's own client against the real ``toolrelay serve``: an unknown
tool is a JSON-RPC error -32602, not a result; the server announces
``tools.listChanged`` and sends ``notifications/tools/list_changed`` when the
session's tools change (here: an MCP server behind toolrelay grows a tool)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx2
import mcp_types as types
import pytest
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client

from tests.harness import ServerFactory, ServerProcess
from tests.mcp.support import stdio_command, until
from tests.mcp.test_endpoint import new_session

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def relay(server_factory: ServerFactory, tmp_path: Path) -> ServerProcess:
    command, args = stdio_command()
    srv_dir = tmp_path / "mcp-srv"
    srv_dir.mkdir()
    config = {
        "mcp_servers": {
            "t": {"command": command, "args": args, "cwd": str(srv_dir), "side_effects": "read"}
        }
    }
    return server_factory(config)


async def test_unknown_tool_is_a_json_rpc_error(relay: ServerProcess, tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    sid = await new_session(relay, workspace)
    async with httpx2.AsyncClient(headers=relay.headers("mcp-agent"), timeout=60) as http:
        transport = streamable_http_client(f"{relay.base_url}/sessions/{sid}/mcp", http_client=http)
        async with Client(transport, mode="legacy") as client:
            with pytest.raises(MCPError) as raised:
                await client.call_tool("no_such_tool", {})
            assert raised.value.error.code == types.INVALID_PARAMS
            assert "no_such_tool" in raised.value.error.message
            # The connection is fine afterwards.
            names = {t.name for t in (await client.list_tools()).tools}
            assert "read_file" in names


async def test_tool_list_changes_reach_mcp_clients(relay: ServerProcess, tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    sid = await new_session(relay, workspace)
    seen: list[Any] = []

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            seen.append(message)

    async with httpx2.AsyncClient(headers=relay.headers("mcp-agent"), timeout=60) as http:
        transport = streamable_http_client(f"{relay.base_url}/sessions/{sid}/mcp", http_client=http)
        async with Client(transport, mode="legacy", message_handler=on_message) as client:
            caps = client.server_capabilities
            assert caps.tools is not None and caps.tools.list_changed is True
            before = {t.name for t in (await client.list_tools()).tools}
            assert "mcp_t_extra" not in before
            # The MCP server behind toolrelay grows a tool: toolrelay re-lists
            # it and tells its own MCP clients.
            grown = await client.call_tool("mcp_t_grow", {})
            assert not grown.is_error
            await until(lambda: bool(seen), within=30)
            after = {t.name for t in (await client.list_tools()).tools}
            assert "mcp_t_extra" in after
