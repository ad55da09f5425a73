"""toolrelay as an MCP server, and consuming one, end to end: the real
``toolrelay serve`` with the test MCP server configured over stdio, driven by
the SDK's own client at ``/sessions/{id}/mcp`` while a second client answers
confirmations over HTTP; ``GET /mcp-servers``; several calls at once."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.harness import ServerFactory, ServerProcess
from tests.mcp.support import stdio_command, until
from tests.server.support import Stream

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def relay(server_factory: ServerFactory, tmp_path: Path) -> ServerProcess:
    command, args = stdio_command()
    srv_dir = tmp_path / "mcp-srv"
    srv_dir.mkdir()
    config = {
        "mcp_servers": {
            "t": {
                "command": command,
                "args": args,
                "cwd": str(srv_dir),
                "side_effects": "read",
                "tools": {"write_note": {"side_effects": "write"}},
            }
        }
    }
    return server_factory(config)


@asynccontextmanager
async def mcp_client(relay: ServerProcess, session_id: str) -> AsyncIterator[Client]:
    async with httpx2.AsyncClient(headers=relay.headers("mcp-agent"), timeout=60) as http:
        transport = streamable_http_client(
            f"{relay.base_url}/sessions/{session_id}/mcp", http_client=http
        )
        async with Client(transport, mode="legacy") as client:
            yield client


async def new_session(relay: ServerProcess, workspace: Path) -> str:
    async with relay.client() as http:
        r = await http.post("/sessions", json={"workspace": str(workspace)})
        assert r.status_code == 201, r.text
        return str(r.json()["id"])


def text_of(result: types.CallToolResult) -> str:
    return "".join(b.text for b in result.content if isinstance(b, types.TextContent))


async def test_mcp_servers_route_and_tools_through_the_relay(
    relay: ServerProcess, tmp_path: Path
) -> None:
    async with relay.client() as http:
        r = await http.get("/mcp-servers")
        assert r.status_code == 200
        [state] = r.json()
        assert state["name"] == "t" and state["state"] == "ready", state
        assert "mcp_t_echo" in state["tools"] and state["restarts"] == 0
        assert state["skipped"][0]["pointer"] == "/properties/pick/oneOf"
        assert (
            await http.get("/mcp-servers", headers={"Authorization": "Bearer nope"})
        ).status_code == 401
    workspace = tmp_path / "ws"
    workspace.mkdir()
    sid = await new_session(relay, workspace)
    async with mcp_client(relay, sid) as client:
        listed = {t.name for t in (await client.list_tools()).tools}
        assert {"read_file", "write_file", "mcp_t_echo", "mcp_t_lookup"} <= listed
        assert "mcp_t_choose" not in listed
        # An MCP tool behind toolrelay, called through toolrelay's MCP endpoint.
        result = await client.call_tool("mcp_t_echo", {"text": "both ways"})
        assert not result.is_error and text_of(result) == "echo: both ways"
        bad = await client.call_tool("mcp_t_lookup", {"item": {}})
        assert bad.is_error and "Invalid input" in text_of(bad)


async def test_structured_results_both_ways(relay: ServerProcess, tmp_path: Path) -> None:
    # MCP server -> toolrelay (outputSchema into the subset, structuredContent
    # validated as ToolOutput.data) -> toolrelay's endpoint -> the SDK's client,
    # which itself checks structuredContent against the outputSchema we list.
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "a.txt").write_text("alpha\n")
    many = workspace / "many"
    many.mkdir()
    for n in range(1000):  # a listing whose structured data is over the event limit
        (many / f"{n:04d}-{'x' * 80}.txt").touch()
    sid = await new_session(relay, workspace)
    stream = await Stream.open(relay.ws_url(f"/sessions/{sid}/events", after=0))
    try:
        async with mcp_client(relay, sid) as client:
            # Events carry structured data up to the event output limit; the MCP
            # result carries all of it.
            big = await client.call_tool("list_dir", {"path": "many"})
            assert not big.is_error
            assert len(big.structured_content["entries"]) == 1000, big.structured_content
            big_event = await stream.until(
                "tool.completed", lambda e: e["data"]["tool_name"] == "list_dir"
            )
            assert big_event["data"]["structured"] is None
            assert big_event["data"]["structured_truncated"] is True
            tools = {t.name: t for t in (await client.list_tools()).tools}
            assert tools["mcp_t_add"].output_schema == {
                "type": "object",
                "properties": {"sum": {"type": "integer"}},
                "required": ["sum"],
            }
            # A tool without one lists none; the dropped (pattern) one lists none.
            assert tools["mcp_t_echo"].output_schema is None
            assert tools["mcp_t_code"].output_schema is None
            added = await client.call_tool("mcp_t_add", {"a": 2, "b": 3})
            assert not added.is_error and added.structured_content == {"sum": 5}
            # A built-in tool's validated data goes out the same way.
            assert tools["list_dir"].output_schema is not None
            listed = await client.call_tool("list_dir", {"path": "."})
            assert not listed.is_error
            assert listed.structured_content["entries"][0]["path"] == "a.txt", listed
            # Structured data without an outputSchema is passed on too.
            code = await client.call_tool("mcp_t_code", {})
            assert code.structured_content == {"code": "abc"}
            # The MCP server breaking its own outputSchema: an error result naming the path.
            broken = await client.call_tool("mcp_t_bad_add", {})
            assert broken.is_error and broken.structured_content is None
            assert "at '/sum'" in text_of(broken)
        # Clients of the event stream saw the same data in tool.completed.
        done = await stream.until("tool.completed", lambda e: e["data"]["tool_name"] == "mcp_t_add")
        assert done["data"]["structured"] == {"sum": 5}
        failed = await stream.until("tool.failed")
        assert failed["data"]["error_class"] == "execution_error"
    finally:
        await stream.ws.close()
    async with relay.client() as http:
        [state] = (await http.get("/mcp-servers")).json()
    [dropped] = state["output_schemas_dropped"]
    assert dropped["tool"] == "code" and dropped["pointer"] == "/properties/code/pattern"


async def test_confirmation_answered_over_http_while_the_mcp_call_waits(
    relay: ServerProcess, tmp_path: Path
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    sid = await new_session(relay, workspace)
    messages: list[str] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        messages.append(message or "")

    async with mcp_client(relay, sid) as client, relay.client("reviewer") as http:
        call = asyncio.create_task(
            client.call_tool(
                "write_file",
                {"path": "hello.txt", "content": "hi\n"},
                progress_callback=on_progress,
            )
        )
        pending: list[dict[str, Any]] = []

        async def asked() -> bool:
            nonlocal pending
            pending = (await http.get(f"/sessions/{sid}/confirmations")).json()["confirmations"]
            return bool(pending)

        for _ in range(200):
            if await asked():
                break
            await asyncio.sleep(0.05)
        [request] = pending
        assert request["tool_name"] == "write_file" and request["turn_id"].startswith("mcp_")
        await until(lambda: any("waiting for confirmation" in m for m in messages), within=60)
        assert not call.done()
        r = await http.post(
            f"/sessions/{sid}/turns/{request['turn_id']}/confirmations/{request['request_id']}",
            json={"decision": "allow"},
        )
        assert r.status_code == 200, r.text
        result = await asyncio.wait_for(call, 30)
        assert not result.is_error, text_of(result)
        assert (workspace / "hello.txt").read_text() == "hi\n"

        # A deny comes back as an error result with the reason.
        call = asyncio.create_task(
            client.call_tool("write_file", {"path": "no.txt", "content": "x"})
        )
        for _ in range(200):
            if await asked():
                break
            await asyncio.sleep(0.05)
        [request] = pending
        r = await http.post(
            f"/sessions/{sid}/turns/{request['turn_id']}/confirmations/{request['request_id']}",
            json={"decision": "deny", "message": "not in this repo"},
        )
        assert r.status_code == 200
        result = await asyncio.wait_for(call, 30)
        assert result.is_error and "not in this repo" in text_of(result)
        assert not (workspace / "no.txt").exists()


async def test_several_mcp_calls_run_at_once(relay: ServerProcess, tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    sid = await new_session(relay, workspace)
    stream = await Stream.open(relay.ws_url(f"/sessions/{sid}/events", after=0))
    try:
        async with mcp_client(relay, sid) as client:
            results = await asyncio.gather(
                *(client.call_tool("mcp_t_slow", {"seconds": 1.5}) for _ in range(3))
            )
        assert all(not r.is_error for r in results)
        kinds: list[str] = []
        while kinds.count("tool.completed") < 3:
            event = await stream.next()
            if event["type"] in ("tool.called", "tool.completed"):
                kinds.append(event["type"])
        # All three started before the first one finished: they ran at once.
        assert kinds[:3] == ["tool.called"] * 3
    finally:
        await stream.ws.close()


async def test_stdio_bridge_and_mcp_list(relay: ServerProcess, tmp_path: Path) -> None:
    import subprocess
    import sys

    from mcp import StdioServerParameters

    from tests.harness import REPO_ROOT

    workspace = tmp_path / "ws"
    workspace.mkdir()
    sid = await new_session(relay, workspace)
    common = ["--url", relay.base_url, "--token", relay.token]
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "server.cli", "mcp", "serve", "--session", sid, *common],
        cwd=str(REPO_ROOT),
    )
    async with Client(params, mode="legacy") as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert "mcp_t_echo" in names and "read_file" in names
        result = await client.call_tool("mcp_t_echo", {"text": "over stdio"})
        assert text_of(result) == "echo: over stdio"
        # Output schemas and structured results pass through the bridge unchanged.
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert tools["mcp_t_add"].output_schema is not None
        added = await client.call_tool("mcp_t_add", {"a": 4, "b": 5})
        assert added.structured_content == {"sum": 9}
    listed = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "server.cli", "mcp", "list", *common],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO_ROOT,
    )
    assert listed.returncode == 0, listed.stderr
    assert "t  ready  restarts=0" in listed.stdout and "mcp_t_echo" in listed.stdout
    assert "(not registered) choose" in listed.stdout
    assert "(outputSchema dropped) code: pattern at '/properties/code/pattern'" in listed.stdout


async def test_crash_restart_and_list_change_seen_by_clients(
    relay: ServerProcess, tmp_path: Path
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    sid = await new_session(relay, workspace)
    stream = await Stream.open(relay.ws_url(f"/sessions/{sid}/events", after=0))
    try:
        async with mcp_client(relay, sid) as client, relay.client() as http:
            crashed = await client.call_tool("mcp_t_crash", {})
            assert crashed.is_error and "restarted" in text_of(crashed)
            state: dict[str, Any] = {}
            for _ in range(300):
                [state] = (await http.get("/mcp-servers")).json()
                if state["restarts"] >= 1 and state["state"] == "ready":
                    break
                await asyncio.sleep(0.05)
            assert state["restarts"] >= 1 and state["state"] == "ready", state
            # A list change reaches the registry, the event stream and tools/list.
            grown = await client.call_tool("mcp_t_grow", {})
            assert not grown.is_error
            while True:
                event = await stream.next()
                if event["type"] == "tools.changed":
                    break
            assert event["data"] == {"added": ["mcp_t_extra"], "removed": [], "source": "mcp:t"}
            names = {t.name for t in (await client.list_tools()).tools}
            assert "mcp_t_extra" in names
            tools = (await http.get(f"/sessions/{sid}/tools")).json()
            assert "mcp_t_extra" in str(tools)
    finally:
        await stream.ws.close()


async def test_mcp_client_cancelling_cancels_the_call(relay: ServerProcess, tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    sid = await new_session(relay, workspace)
    stream = await Stream.open(relay.ws_url(f"/sessions/{sid}/events", after=0))
    try:
        async with mcp_client(relay, sid) as client:
            call = asyncio.create_task(client.call_tool("mcp_t_slow", {"seconds": 30}))
            while (await stream.next())["type"] != "tool.called":
                pass
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call
            while True:
                event = await stream.next()
                if event["type"] == "tool.failed":
                    break
            assert event["data"]["error_class"] == "cancelled"
    finally:
        await stream.ws.close()


async def test_concurrent_mcp_calls_respect_the_session_cap(
    server_factory: ServerFactory, tmp_path: Path
) -> None:
    command, args = stdio_command()
    srv_dir = tmp_path / "mcp-srv"
    srv_dir.mkdir()
    relay = server_factory(
        {
            "dispatcher": {"max_concurrency": 2},
            "mcp_servers": {
                "t": {"command": command, "args": args, "cwd": str(srv_dir), "side_effects": "read"}
            },
        }
    )
    workspace = tmp_path / "ws"
    workspace.mkdir()
    sid = await new_session(relay, workspace)
    stream = await Stream.open(relay.ws_url(f"/sessions/{sid}/events", after=0))
    try:
        async with mcp_client(relay, sid) as client:
            results = await asyncio.gather(
                *(client.call_tool("mcp_t_slow", {"seconds": 1}) for _ in range(3))
            )
        assert all(not r.is_error for r in results)
        kinds: list[str] = []
        while kinds.count("tool.completed") < 3:
            event = await stream.next()
            if event["type"] in ("tool.called", "tool.completed"):
                kinds.append(event["type"])
        # Two ran at once; the third started only after one of them ended.
        assert kinds[:2] == ["tool.called"] * 2 and kinds[2] == "tool.completed"
    finally:
        await stream.ws.close()


async def test_mcp_call_with_arguments_over_the_input_limits_is_an_error_result(
    server_factory: ServerFactory, tmp_path: Path
) -> None:
    # The limits of tool input over HTTP hold for MCP tools/call arguments too:
    # an error result naming the limit, the tool not run, nothing logged of it.
    relay = server_factory({})
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "a.txt").write_text("alpha\n")
    sid = await new_session(relay, workspace)
    deep: Any = "x"
    for _ in range(100):
        deep = [deep]
    async with await Stream.open(relay.ws_url(f"/sessions/{sid}/events", after=0)) as stream:
        async with mcp_client(relay, sid) as client:
            nested = await client.call_tool("read_file", {"path": deep})
            wide = await client.call_tool("read_file", {"path": list(range(20_000))})
            fine = await client.call_tool("read_file", {"path": "a.txt"})
        await stream.until("tool.completed")
    assert nested.is_error and "arguments.path" in text_of(nested)
    assert "nests deeper than 32 levels" in text_of(nested)
    assert wide.is_error and "has 20000 items; at most 10000 are allowed" in text_of(wide)
    assert not fine.is_error and "alpha" in text_of(fine)
    # Only the call within the limits reached the dispatcher.
    assert len(stream.of("tool.called")) == 1
    async with relay.client() as http:
        assert (await http.get(f"/sessions/{sid}/messages")).status_code == 200
        assert (await http.get(f"/sessions/{sid}/turns")).status_code == 200
