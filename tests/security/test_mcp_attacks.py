"""Attacks on MCP, both ways (issue 25, item 6), against the real
``toolrelay serve``:

- a hostile stdio MCP server answers with 24 MiB and 100 MiB results: what is
  stored and sent on is capped with a note, the 100 MiB one fails the call
  with an error naming the limit, and ``/healthz`` answers meanwhile;
- it flips its tool list a thousand times a second: each session sees a
  bounded number of ``tools.changed`` events;
- another token (a second user, the admin) presenting a user's
  ``Mcp-Session-Id`` can neither use nor end that MCP transport session;
- a tools/call whose MCP client went away (or cancelled it) while it waited
  for a confirmation is cancelled with that confirmation: a later approval
  gets 409 and nothing is written;
- a request with a foreign ``Host`` or ``Origin`` gets 403 with a JSON-RPC
  error (DNS rebinding).

The MCP side is spoken as raw HTTP where the attack needs headers the SDK's
client would not send, and with the SDK's client otherwise.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import sys
import time
from pathlib import Path
from typing import Any

import httpx2
import pytest

from tests import harness
from tests.harness import ServerFactory, ServerProcess
from tests.server.support import Stream, new_session, start_turn, wait_turn

server_factory = harness.server_factory  # the fixture, for this module

pytestmark = pytest.mark.timeout(300)

ATTACK_SERVER = str(Path(__file__).with_name("mcp_attack_server.py"))
PROTOCOL = "2025-06-18"
MCP_HEADERS = {
    "Accept": "application/json, text/event-stream",
    "Content-Type": "application/json",
}


def hostile(tmp_path: Path, **extra: Any) -> dict[str, Any]:
    cwd = tmp_path / "hostile"
    cwd.mkdir(exist_ok=True)
    return {
        "command": sys.executable,
        "args": [ATTACK_SERVER],
        "cwd": str(cwd),
        "side_effects": "read",
        **extra,
    }


def tool_text(result: dict[str, Any]) -> str:
    return "".join(b.get("text", "") for b in result["content"])


# -- a: results are capped ----------------------------------------------------


async def test_huge_results_are_capped_and_the_server_keeps_answering(
    server_factory: ServerFactory, tmp_path: Path
) -> None:
    relay = server_factory({"mcp_servers": {"h": hostile(tmp_path)}})
    workspace = tmp_path / "ws"
    workspace.mkdir()
    async with relay.client(timeout=60) as http:
        sid = await new_session(http, workspace)
        # 24 MiB, id first (the Python SDK's order) and id last (the TypeScript SDK's).
        for shape in ("id_first", "id_last"):
            use = {"id": shape, "name": "mcp_h_huge", "input": {"mb": 24, "shape": shape}}
            turn = await wait_turn(http, sid, await start_turn(http, sid, use), within=120)
            [result] = turn["results"]
            text = tool_text(result)
            assert not result["is_error"], text[:500]
            assert len(text) < 512 * 1024, len(text)
            assert "bytes omitted" in text
        messages = (await http.get(f"/sessions/{sid}/messages")).json()["messages"]
        stored = json.dumps(messages)
        # Nothing stored (and so nothing sent to a model later) holds the whole result.
        assert len(stored) < 2 * 1024 * 1024, len(stored)

        # 100 MiB: past the message limit. The call fails naming the limit, and
        # the server answers /healthz while the hostile server writes.
        use = {"id": "bigger", "name": "mcp_h_huge", "input": {"mb": 100}}
        turn_id = await start_turn(http, sid, use)
        answered_while_running = 0
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            health = await http.get("/healthz", timeout=30)
            assert health.status_code == 200
            status = (await http.get(f"/sessions/{sid}/turns/{turn_id}")).json()["status"]
            if status != "running":
                break
            answered_while_running += 1
            await asyncio.sleep(0.05)
        turn = await wait_turn(http, sid, turn_id, within=60)
        [result] = turn["results"]
        assert result["is_error"]
        text = tool_text(result)
        assert "max_message_bytes" in text and len(text) < 4096, text[:500]
        assert answered_while_running >= 1
        # The connection survived (the message was dropped, not the server).
        use = {"id": "after", "name": "mcp_h_ping", "input": {}}
        turn = await wait_turn(http, sid, await start_turn(http, sid, use), within=60)
        assert tool_text(turn["results"][0]) == "pong"


# -- b: list_changed floods are bounded ---------------------------------------


async def test_a_tool_list_flood_yields_a_bounded_number_of_events(
    server_factory: ServerFactory, tmp_path: Path
) -> None:
    relay = server_factory({"mcp_servers": {"h": hostile(tmp_path)}})
    workspace = tmp_path / "ws"
    workspace.mkdir()
    async with relay.client(timeout=60) as http:
        # Start-up waits for MCP servers only so long; on a busy machine this
        # one connects later, and the flood tool must be there to be called.
        await mcp_tool_ready(http, "mcp_h_flood")
        sid = await new_session(http, workspace)
        stream = await Stream.open(relay.ws_url(f"/sessions/{sid}/events", after=0))
        try:
            started = time.monotonic()
            use = {"id": "f", "name": "mcp_h_flood", "input": {"seconds": 3}}
            await wait_turn(http, sid, await start_turn(http, sid, use), within=60)
            await read_changes_until_quiet(stream, source="mcp:h")
            elapsed = time.monotonic() - started
        finally:
            await stream.close()
        changes = [e for e in stream.of("tools.changed") if e["data"]["source"] == "mcp:h"]
        # About 3000 flips were announced; at most one re-list per second
        # (the default list_changed_interval) reaches the sessions, so the
        # window read can hold at most one per second of it, plus the edges.
        # However slow the machine, the window only grows with it.
        assert 1 <= len(changes) <= elapsed / 1.0 + 2, (len(changes), elapsed)
        [state] = (await http.get("/mcp-servers")).json()
        assert state["state"] == "ready" and "mcp_h_ping" in state["tools"]


async def mcp_tool_ready(http: httpx2.AsyncClient, tool: str, within: float = 60.0) -> None:
    """Poll GET /mcp-servers until some ready server offers ``tool``."""
    async with asyncio.timeout(within):
        while True:
            states = (await http.get("/mcp-servers")).json()
            if any(s["state"] == "ready" and tool in s["tools"] for s in states):
                return
            await asyncio.sleep(0.05)


async def read_changes_until_quiet(
    stream: Stream, *, source: str, quiet: float = 3.0, within: float = 120.0
) -> None:
    """Read ``source``'s tools.changed events until the first has come and
    none follows for ``quiet`` seconds (three list_changed_intervals)."""
    async with asyncio.timeout(within):
        await stream.until("tools.changed", lambda e: e["data"]["source"] == source, within)
        while True:
            try:
                await stream.until("tools.changed", lambda e: e["data"]["source"] == source, quiet)
            except TimeoutError:
                return


# -- c: the MCP transport session belongs to the token that opened it ---------


def sse_messages(body: str) -> list[dict[str, Any]]:
    return [json.loads(line[5:]) for line in body.splitlines() if line.startswith("data:")]


async def mcp_open(http: httpx2.AsyncClient, path: str, **headers: str) -> str:
    """initialize + initialized over raw HTTP; the Mcp-Session-Id."""
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": PROTOCOL,
            "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"},
        },
    }
    r = await http.post(path, json=body, headers={**MCP_HEADERS, **headers})
    assert r.status_code == 200, r.text
    mcp_session = r.headers["mcp-session-id"]
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    r = await http.post(path, json=note, headers=session_headers(mcp_session))
    assert r.status_code == 202, r.text
    return mcp_session


def session_headers(mcp_session: str) -> dict[str, str]:
    return {**MCP_HEADERS, "Mcp-Session-Id": mcp_session, "Mcp-Protocol-Version": PROTOCOL}


LIST = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}


@pytest.fixture
def two_users(server_factory: ServerFactory, tmp_path: Path) -> tuple[ServerProcess, Path]:
    roots = tmp_path / "roots"
    (roots / "alice").mkdir(parents=True)
    (roots / "bob").mkdir(parents=True)
    tokens = [
        {"name": name, "token": TOKENS[name], "role": "user", "allowed_roots": [str(roots / name)]}
        for name in ("alice", "bob")
    ]
    return server_factory({"auth": {"tokens": tokens}}), roots


TOKENS = {name: f"{name}-" + secrets.token_hex(16) for name in ("alice", "bob")}


async def test_another_token_can_neither_use_nor_end_an_mcp_session(
    two_users: tuple[ServerProcess, Path],
) -> None:
    relay, roots = two_users
    async with (
        relay.client(token=TOKENS["alice"], timeout=30) as alice,
        relay.client(token=TOKENS["bob"], timeout=30) as bob,
        relay.client(timeout=30) as admin,
    ):
        sid = await new_session(alice, roots / "alice")
        bob_sid = await new_session(bob, roots / "bob")
        path = f"/sessions/{sid}/mcp"
        mcp_session = await mcp_open(alice, path)
        stolen = session_headers(mcp_session)
        for other in (bob, admin):
            # Another token, the same transport session id: not found, whatever the verb.
            r = await other.post(path, json=LIST, headers=stolen)
            assert r.status_code in (403, 404), (r.status_code, r.text)
            r = await other.get(path, headers=stolen)
            assert r.status_code in (403, 404), (r.status_code, r.text)
            r = await other.delete(path, headers=stolen)
            assert r.status_code in (403, 404), (r.status_code, r.text)
        # Bob's own session in the path does not make alice's transport his.
        r = await bob.delete(f"/sessions/{bob_sid}/mcp", headers=stolen)
        assert r.status_code in (403, 404), (r.status_code, r.text)
        # Nor does alice's transport serve another session of hers.
        other_sid = await new_session(alice, roots / "alice")
        r = await alice.post(f"/sessions/{other_sid}/mcp", json=LIST, headers=stolen)
        assert r.status_code in (403, 404), (r.status_code, r.text)
        # Alice's transport session is alive and hers to end.
        r = await alice.post(path, json=LIST, headers=stolen)
        assert r.status_code == 200, r.text
        [answer] = sse_messages(r.text)
        assert "read_file" in {t["name"] for t in answer["result"]["tools"]}
        r = await alice.delete(path, headers=stolen)
        assert r.status_code == 200, r.text
        r = await alice.post(path, json=LIST, headers=stolen)
        assert r.status_code == 404


# -- d: nothing runs after its client left ------------------------------------


async def pending_confirmations(http: httpx2.AsyncClient, sid: str) -> list[dict[str, Any]]:
    r = await http.get(f"/sessions/{sid}/confirmations")
    assert r.status_code == 200, r.text
    pending: list[dict[str, Any]] = r.json()["confirmations"]
    return pending


async def wait_for(http: httpx2.AsyncClient, sid: str, *, present: bool) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        pending = await pending_confirmations(http, sid)
        if bool(pending) == present:
            return pending
        await asyncio.sleep(0.05)
    raise AssertionError(f"confirmations never became {'present' if present else 'empty'}")


async def approve_late(http: httpx2.AsyncClient, sid: str, request: dict[str, Any]) -> None:
    r = await http.post(
        f"/sessions/{sid}/turns/{request['turn_id']}/confirmations/{request['request_id']}",
        json={"decision": "allow"},
    )
    assert r.status_code == 409, r.text
    assert "cancelled" in r.text, r.text


async def call_write(path: str, mcp_session: str, name: str) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {"name": "write_file", "arguments": {"path": name, "content": "late\n"}},
    }


@pytest.mark.parametrize("how", ["disconnect", "cancelled", "transport_deleted"])
async def test_a_call_whose_client_left_is_cancelled_with_its_confirmation(
    server_factory: ServerFactory, tmp_path: Path, how: str
) -> None:
    relay = server_factory({})
    workspace = tmp_path / "ws"
    workspace.mkdir()
    async with relay.client(timeout=30) as http:
        sid = await new_session(http, workspace)
        stream = await Stream.open(relay.ws_url(f"/sessions/{sid}/events", after=0))
        path = f"/sessions/{sid}/mcp"
        async with relay.client("mcp-agent", timeout=30) as agent:
            mcp_session = await mcp_open(agent, path)
            body = await call_write(path, mcp_session, "late.txt")
            async with agent.stream(
                "POST", path, json=body, headers=session_headers(mcp_session)
            ) as response:
                assert response.status_code == 200
                [request] = await wait_for(http, sid, present=True)
                if how == "cancelled":
                    note = {
                        "jsonrpc": "2.0",
                        "method": "notifications/cancelled",
                        "params": {"requestId": 7, "reason": "gave up"},
                    }
                    r = await agent.post(path, json=note, headers=session_headers(mcp_session))
                    assert r.status_code == 202
                elif how == "transport_deleted":
                    r = await agent.delete(path, headers=session_headers(mcp_session))
                    assert r.status_code == 200
                # Leaving the block unread drops the connection: the client is gone.
        await wait_for(http, sid, present=False)
        await approve_late(http, sid, request)
        resolved = await stream.until("tool.confirmation_resolved")
        assert resolved["data"]["decision"] == "cancelled"
        failed = await stream.until("tool.failed")
        assert failed["data"]["error_class"] == "cancelled"
        await stream.close()
        await asyncio.sleep(1.0)  # anything that would still run has had its chance
        assert not (workspace / "late.txt").exists()


# -- e: Host and Origin ----------------------------------------------------------


async def test_foreign_host_and_origin_are_refused(
    server_factory: ServerFactory, tmp_path: Path
) -> None:
    relay = server_factory(
        {
            "server": {
                "allowed_origins": ["https://app.example.com"],
                "allowed_hosts": ["relay.internal"],
            }
        }
    )
    workspace = tmp_path / "ws"
    workspace.mkdir()
    port = relay.base_url.rsplit(":", 1)[1]
    async with relay.client(timeout=30) as http:
        sid = await new_session(http, workspace)
        path = f"/sessions/{sid}/mcp"
        refused = [
            {"Host": f"evil.example:{port}"},
            {"Host": f"127.0.0.1.evil.example:{port}"},
            {"Origin": "http://evil.example"},
            {"Origin": f"http://localhost.evil.example:{port}"},
            {"Origin": "null"},
        ]
        for headers in refused:
            for method in ("POST", "GET", "DELETE"):
                r = await http.request(
                    method,
                    path,
                    json=LIST if method == "POST" else None,
                    headers={**MCP_HEADERS, **headers},
                )
                assert r.status_code == 403, (headers, method, r.status_code, r.text)
                error = r.json()
                assert error["jsonrpc"] == "2.0" and error["error"]["code"] == -32600
                assert "Host" in error["error"]["message"] or "Origin" in error["error"]["message"]
        allowed = [
            {},
            {"Origin": relay.base_url},
            {"Origin": "https://app.example.com"},
            {"Host": f"relay.internal:{port}"},
            {"Host": f"localhost:{port}"},
        ]
        for headers in allowed:
            await mcp_open(http, path, **headers)


async def test_a_call_whose_client_timed_out_is_cancelled_with_its_confirmation(
    server_factory: ServerFactory, tmp_path: Path
) -> None:
    # The SDK's own client: its read timeout sends notifications/cancelled.
    from mcp import Client, MCPError
    from mcp.client.streamable_http import streamable_http_client

    relay = server_factory({})
    workspace = tmp_path / "ws"
    workspace.mkdir()
    async with relay.client(timeout=30) as http:
        sid = await new_session(http, workspace)
        stream = await Stream.open(relay.ws_url(f"/sessions/{sid}/events", after=0))
        async with (
            httpx2.AsyncClient(headers=relay.headers("mcp-agent"), timeout=60) as agent,
            Client(
                streamable_http_client(f"{relay.base_url}/sessions/{sid}/mcp", http_client=agent),
                mode="legacy",
            ) as client,
        ):
            with pytest.raises(MCPError) as raised:
                await client.call_tool(
                    "write_file", {"path": "late.txt", "content": "late\n"}, read_timeout_seconds=2
                )
            assert "timed out" in str(raised.value)
            [request] = stream.of("tool.confirmation_requested") or [
                await stream.until("tool.confirmation_requested")
            ]
            resolved = await stream.until("tool.confirmation_resolved")
            assert resolved["data"]["decision"] == "cancelled"
            await approve_late(http, sid, {**request["data"], "turn_id": request["turn_id"]})
        await stream.close()
        await asyncio.sleep(1.0)  # anything that would still run has had its chance
        assert not (workspace / "late.txt").exists()
