"""The HTTP API over a real server: auth and roles, sessions, turns, malformed input."""

from __future__ import annotations

import secrets
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from tests.harness import ServerProcess
from tests.server.conftest import BASE_CONFIG, DEBUG_ENV
from tests.server.support import (
    WAIT,
    Stream,
    new_session,
    start_turn,
    use,
    wait_session_status,
    wait_turn,
)

ALICE = "alice-token-" + secrets.token_hex(12)
BOB = "bob-token-" + secrets.token_hex(12)
SMALL_LIMIT = 4096


@pytest.fixture(scope="module")
def api_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A server with two user tokens besides the admin one, and a small body limit."""
    config: dict[str, Any] = {
        **BASE_CONFIG,
        "server": {"max_body_bytes": SMALL_LIMIT},
        # Every test workspace lives under pytest's base temp dir; nothing else is allowed.
        "workspaces": {"allowed_roots": [str(tmp_path_factory.getbasetemp())]},
        "auth": {
            "tokens": [
                {"name": "alice", "token": ALICE, "role": "user"},
                {"name": "bob", "token": BOB, "role": "user"},
            ]
        },
    }
    # The server's own files (data dir, config) may not lie inside an allowed root:
    # they live outside pytest's base temp dir.
    root = Path(tempfile.mkdtemp(prefix="toolrelay-api-"))
    srv = ServerProcess(root, config=config, env=DEBUG_ENV).start()
    try:
        yield srv
    finally:
        srv.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
async def admin(api_server: ServerProcess) -> AsyncIterator[httpx2.AsyncClient]:
    async with api_server.client("admin-cli") as http:
        yield http


# -- authentication and roles ---------------------------------------------------------


async def test_every_call_needs_a_valid_token(api_server: ServerProcess, workspace: Path) -> None:
    async with httpx2.AsyncClient(base_url=api_server.base_url, timeout=WAIT) as anon:
        for method, path in [("GET", "/sessions"), ("POST", "/sessions"), ("GET", "/sessions/x")]:
            response = await anon.request(method, path, json={"workspace": str(workspace)})
            assert response.status_code == 401, (method, path)
            assert response.json()["error"]["code"] == "unauthorized"
            assert response.headers["www-authenticate"] == "Bearer"
        bad = await anon.get("/sessions", headers={"Authorization": "Bearer not-a-token"})
        assert bad.status_code == 401
        assert bad.json()["error"]["message"] == "invalid token"
        # Malformed JSON from a stranger still gets 401: nothing is parsed before auth.
        garbage = await anon.post(
            "/sessions", content=b"{", headers={"content-type": "application/json"}
        )
        assert garbage.status_code == 401
        # Public: liveness and the API description.
        assert (await anon.get("/healthz")).status_code == 200
        assert (await anon.get("/openapi.json")).status_code == 200
    for url in (
        api_server.ws_url("/events", token=False),
        api_server.ws_url("/events", token=False) + "?token=nope",
    ):
        with pytest.raises(InvalidStatus) as refused:
            await connect(url, open_timeout=WAIT)
        assert refused.value.response.status_code == 401


async def test_a_user_sees_only_its_own_sessions(
    api_server: ServerProcess, admin: httpx2.AsyncClient, tmp_path: Path
) -> None:
    srv = api_server
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    async with srv.client(token=ALICE) as alice, srv.client(token=BOB) as bob:
        mine = await new_session(alice, tmp_path / "a", name="alice's")
        theirs = await new_session(bob, tmp_path / "b", name="bob's")
        assert (await alice.get(f"/sessions/{mine}")).json()["owner"] == "alice"
        listed = [s["id"] for s in (await alice.get("/sessions")).json()["sessions"]]
        assert mine in listed and theirs not in listed
        admin_listed = [s["id"] for s in (await admin.get("/sessions")).json()["sessions"]]
        assert {mine, theirs} <= set(admin_listed)

        # Bob's session does not exist as far as Alice can tell.
        for method, path, body in [
            ("GET", f"/sessions/{theirs}", None),
            ("GET", f"/sessions/{theirs}/tools", None),
            ("GET", f"/sessions/{theirs}/messages", None),
            ("GET", f"/sessions/{theirs}/clients", None),
            ("GET", f"/sessions/{theirs}/confirmations", None),
            (
                "POST",
                f"/sessions/{theirs}/turns",
                {"tool_uses": [use("t", "note", path="x", text="y")]},
            ),
            ("DELETE", f"/sessions/{theirs}", None),
        ]:
            response = await alice.request(method, path, json=body)
            assert response.status_code == 404, (method, path, response.text)
            assert response.json()["error"]["message"] == f"no session {theirs!r}"

        # A confirmation in Bob's session cannot be answered by Alice.
        async with await Stream.open(
            srv.ws_url(f"/sessions/{theirs}/events", after=0, token=False),
            additional_headers={"Authorization": f"Bearer {BOB}"},
        ) as stream:
            tid = await start_turn(bob, theirs, use("t1", "note", path="n.txt", text="x"))
            request_id = (await stream.until("tool.confirmation_requested"))["data"]["request_id"]
            url = f"/sessions/{theirs}/turns/{tid}/confirmations/{request_id}"
            stolen = await alice.post(url, json={"decision": "allow"})
            assert stolen.status_code == 404
            ok = await bob.post(url, json={"decision": "deny"})
            assert ok.status_code == 200 and ok.json()["resolved_by"] == "bob"
            await stream.until("turn.completed")

        # Nor can she stream it, by token in the query or in the header.
        with pytest.raises(InvalidStatus) as refused:
            await connect(srv.ws_url(f"/sessions/{theirs}/events", token=False) + f"?token={ALICE}")
        assert refused.value.response.status_code == 404

        # On the all-sessions stream she sees her events and none of Bob's.
        query = f"?token={ALICE}&after=0"
        async with await Stream.open(
            srv.ws_url("/events", token=False) + query, per_session=False, after=0
        ) as everything:
            marker = await new_session(alice, tmp_path / "a", name="marker")
            await everything.until("session.created", lambda e: e["session_id"] == marker)
        seen = {e["session_id"] for e in everything.events}
        assert mine in seen and theirs not in seen


async def test_client_name_header_is_checked(api_server: ServerProcess) -> None:
    async with httpx2.AsyncClient(base_url=api_server.base_url, timeout=WAIT) as raw:
        response = await raw.get(
            "/sessions", headers={**api_server.headers(), "X-Client-Name": "x" * 65}
        )
    assert response.status_code == 422
    assert "X-Client-Name" in response.json()["error"]["message"]


# -- sessions --------------------------------------------------------------------------


async def test_session_lifecycle(admin: httpx2.AsyncClient, workspace: Path) -> None:
    response = await admin.post(
        "/sessions",
        json={
            "workspace": str(workspace),
            "name": "demo",
            "model": "scripted",
            "policy": {"per_tool": {"note": "auto"}},
        },
    )
    assert response.status_code == 201
    session = response.json()
    assert session["workspace"] == str(workspace)
    assert session["name"] == "demo" and session["model"] == "scripted"
    assert session["policy"]["per_tool"] == {"note": "auto"}
    assert session["policy"]["preset"] == "confirm-sensitive"
    assert session["status"] == "idle"
    sid = session["id"]

    tools = (await admin.get(f"/sessions/{sid}/tools")).json()["tools"]
    names = {t["name"] for t in tools}
    assert {"block", "noisy", "note"} <= names
    keys = {"name", "description", "input_schema", "side_effects", "output_schema", "timeout_s"}
    assert all(set(t) == keys for t in tools)

    # The per-tool override made the write automatic: no confirmation needed.
    tid = await start_turn(admin, sid, use("w1", "note", path="auto.txt", text="auto"))
    turn = await wait_turn(admin, sid, tid)
    assert turn["status"] == "completed" and turn["results"][0]["is_error"] is False
    assert (workspace / "auto.txt").read_text() == "auto"
    assert turn["kind"] == "tool_uses" and turn["created_by"] == "admin-cli"
    turns = (await admin.get(f"/sessions/{sid}/turns")).json()["turns"]
    assert [t["id"] for t in turns] == [tid]

    messages = (await admin.get(f"/sessions/{sid}/messages")).json()["messages"]
    assert [(m["index"], m["role"], m["turn_id"]) for m in messages] == [
        (0, "assistant", tid),
        (1, "tool", tid),
    ]
    assert messages[0]["content"][0] == {
        "type": "tool_use",
        "id": "w1",
        "name": "note",
        "input": {"path": "auto.txt", "text": "auto"},
    }

    assert (await admin.delete(f"/sessions/{sid}")).status_code == 204
    assert (await admin.get(f"/sessions/{sid}")).status_code == 404
    assert (await admin.delete(f"/sessions/{sid}")).status_code == 404


async def test_workspace_must_exist(admin: httpx2.AsyncClient, tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    response = await admin.post("/sessions", json={"workspace": str(missing)})
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["field"] == "workspace"
    assert str(missing) in error["message"] and "does not exist" in error["message"]
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    response = await admin.post("/sessions", json={"workspace": str(a_file)})
    assert response.status_code == 422 and "not a directory" in response.json()["error"]["message"]
    response = await admin.post("/sessions", json={"workspace": "relative/dir"})
    assert response.status_code == 422 and "absolute" in response.json()["error"]["message"]


async def test_workspaces_outside_the_allowed_roots_are_refused(
    admin: httpx2.AsyncClient,
) -> None:
    response = await admin.post("/sessions", json={"workspace": "/usr"})
    assert response.status_code == 403
    error = response.json()["error"]
    assert error["code"] == "forbidden" and error["field"] == "workspace"
    assert "workspaces.allowed_roots" in error["message"]


async def test_bad_policy_overrides_name_the_key(
    admin: httpx2.AsyncClient, workspace: Path
) -> None:
    response = await admin.post(
        "/sessions",
        json={"workspace": str(workspace), "policy": {"default": {"write": "sometimes"}}},
    )
    assert response.status_code == 422
    assert "policy.default.write" in response.json()["error"]["message"]
    response = await admin.post(
        "/sessions", json={"workspace": str(workspace), "policy": {"presett": "yolo"}}
    )
    assert response.status_code == 422
    assert "policy.presett: unknown key" in response.json()["error"]["message"]


# -- turns ------------------------------------------------------------------------------


async def test_one_turn_at_a_time(admin: httpx2.AsyncClient, workspace: Path) -> None:
    sid = await new_session(admin, workspace)
    tid = await start_turn(admin, sid, use("b", "block", seconds=60))
    busy = await admin.post(
        f"/sessions/{sid}/turns", json={"tool_uses": [use("x", "noisy", count=1, size=1)]}
    )
    assert busy.status_code == 409
    assert busy.json()["error"] == {
        "code": "turn_in_progress",
        "message": (
            f"turn {tid!r} is still running in this session; wait for it to end or cancel it"
        ),
        "turn_id": tid,
    }
    session = (await admin.get(f"/sessions/{sid}")).json()
    assert session["status"] == "running" and session["current_turn_id"] == tid
    cancelled = await admin.post(f"/sessions/{sid}/turns/{tid}/cancel")
    assert cancelled.status_code == 200
    assert cancelled.json()["status"] == "cancelled"
    assert "Interrupted" not in str(cancelled.json()["results"])
    tid2 = await start_turn(admin, sid, use("x", "noisy", count=1, size=1))
    assert (await wait_turn(admin, sid, tid2))["status"] == "completed"


async def test_deleting_a_session_cancels_its_turn(
    admin: httpx2.AsyncClient, workspace: Path
) -> None:
    sid = await new_session(admin, workspace)
    tid = await start_turn(admin, sid, use("b", "block", seconds=60))
    await wait_session_status(admin, sid, "running")
    assert (await admin.delete(f"/sessions/{sid}")).status_code == 204
    assert (await admin.get(f"/sessions/{sid}/turns/{tid}")).status_code == 404


async def test_message_turns_run_the_agent_loop(admin: httpx2.AsyncClient, workspace: Path) -> None:
    # No provider key in the test server's environment: the offline scripted model answers.
    sid = await new_session(admin, workspace)
    response = await admin.post(f"/sessions/{sid}/turns", json={"message": "hello"})
    assert response.status_code == 202, response.text
    turn = await wait_turn(admin, sid, response.json()["turn_id"])
    assert turn["kind"] == "message" and turn["status"] == "completed"


# -- malformed requests -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        (b"{not json", "body", "not valid JSON"),
        (b"[1, 2]", "body", "JSON object"),
        (b"", "body", "required"),
        (b'{"tool_uses": "write a file"}', "tool_uses", "list"),
        (b'{"tool_uses": []}', "tool_uses", "at least 1"),
        (b'{"tool_uses": [{"id": "a", "name": "note"}]}', "tool_uses.0.input", "required"),
        (b'{"tool_uses": [{"id": 5, "name": "note", "input": {}}]}', "tool_uses.0.id", "string"),
        (
            b'{"tool_uses": [{"id": "a", "name": "n", "input": {}, "extra": 1}]}',
            "tool_uses.0.extra",
            "unknown field",
        ),
        (
            b'{"message": "hi", "tool_uses": [{"id": "a", "name": "n", "input": {}}]}',
            "body",
            "exactly one",
        ),
        (b'{"nothing": true}', "nothing", "unknown field"),
    ],
)
async def test_malformed_turn_bodies_name_what_is_wrong(
    admin: httpx2.AsyncClient, workspace: Path, body: bytes, field: str, words: str
) -> None:
    sid = await new_session(admin, workspace)
    response = await admin.post(
        f"/sessions/{sid}/turns", content=body, headers={"content-type": "application/json"}
    )
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_request"
    fields = {f["field"]: f["message"] for f in error["fields"]}
    assert field in fields, fields
    assert words in fields[field], fields
    assert (await admin.get(f"/sessions/{sid}/turns")).json()["turns"] == []


async def test_unknown_ids_are_404(admin: httpx2.AsyncClient, workspace: Path) -> None:
    sid = await new_session(admin, workspace)
    for method, path in [
        ("GET", "/sessions/ses_missing"),
        ("GET", f"/sessions/{sid}/turns/turn_missing"),
        ("POST", f"/sessions/{sid}/turns/turn_missing/cancel"),
        ("GET", "/no/such/route"),
    ]:
        response = await admin.request(method, path)
        assert response.status_code == 404, (method, path)
        assert response.json()["error"]["code"] == "not_found"
    wrong_method = await admin.put("/sessions")
    assert wrong_method.status_code == 405
    assert wrong_method.json()["error"]["code"] == "method_not_allowed"


async def test_oversized_bodies_are_refused_with_413(
    admin: httpx2.AsyncClient, workspace: Path
) -> None:
    sid = await new_session(admin, workspace)
    big = {"tool_uses": [use("big", "note", path="big.txt", text="x" * (SMALL_LIMIT * 2))]}
    response = await admin.post(f"/sessions/{sid}/turns", json=big)
    assert response.status_code == 413
    error = response.json()["error"]
    assert error["code"] == "payload_too_large" and error["limit"] == SMALL_LIMIT
    assert str(SMALL_LIMIT) in error["message"]

    async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: counted as read
        yield b'{"tool_uses": [{"id": "c", "name": "note", "input": {"path": "c", "text": "'
        for _ in range(SMALL_LIMIT // 512 + 2):
            yield b"y" * 1024
        yield b'"}}]}'

    chunked = await admin.post(
        f"/sessions/{sid}/turns", content=chunks(), headers={"content-type": "application/json"}
    )
    assert chunked.status_code == 413
    assert chunked.json()["error"]["code"] == "payload_too_large"
    assert (await admin.get(f"/sessions/{sid}/turns")).json()["turns"] == []


async def test_the_dashboard_is_served_without_a_token(api_server: ServerProcess) -> None:
    async with httpx2.AsyncClient(base_url=api_server.base_url, timeout=WAIT) as anon:
        redirect = await anon.get("/dashboard")
        assert redirect.status_code == 307
        assert redirect.headers["location"] == "/dashboard/"
        page = await anon.get("/dashboard/")
        assert page.status_code == 200
        assert page.headers["content-type"].startswith("text/html")
        assert "/dashboard/static/app.js" in page.text
        script = await anon.get("/dashboard/static/app.js")
        assert script.status_code == 200
        missing = await anon.get("/dashboard/static/nope.js")
        assert missing.status_code == 404
        assert missing.json()["error"]["code"] == "not_found"


async def test_user_tokens_may_only_tighten_the_policy(
    api_server: ServerProcess, workspace: Path
) -> None:
    async with api_server.client("alice-cli", token=ALICE) as alice:
        looser = await alice.post(
            "/sessions", json={"workspace": str(workspace), "policy": {"preset": "yolo"}}
        )
        assert looser.status_code == 403
        error = looser.json()["error"]
        assert "only tighten" in error["message"] and "-> auto" in error["message"]
        per_tool = await alice.post(
            "/sessions",
            json={"workspace": str(workspace), "policy": {"per_tool": {"write_file": "auto"}}},
        )
        assert per_tool.status_code == 403 and "write_file" in per_tool.json()["error"]["message"]
        tighter = await alice.post(
            "/sessions",
            json={"workspace": str(workspace), "policy": {"preset": "confirm-all"}},
        )
        assert tighter.status_code == 201, tighter.text
    async with api_server.client("admin-cli") as admin:
        admin_yolo = await admin.post(
            "/sessions", json={"workspace": str(workspace), "policy": {"preset": "yolo"}}
        )
        assert admin_yolo.status_code == 201, admin_yolo.text
