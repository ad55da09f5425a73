"""Auth: every route and stream refuses a missing or wrong token, and one user's
token can neither read, answer, cancel nor stream another user's session.

Routes are enumerated from the server's own ``/openapi.json`` (HTTP) and
from the app's route table (WebSockets, which OpenAPI does not describe), so
a route added later is covered without touching this file. The only routes
allowed to answer without a token are the ones listed in PUBLIC below.
"""

from __future__ import annotations

import re
import secrets
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from fastapi.routing import APIRoute
from starlette.routing import Mount, Route, WebSocketRoute
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from server.app import create_app
from server.auth import TokenRegistry
from server.config import TokenConfig, load_config
from tests.harness import ServerProcess
from tests.reliability.conftest import DEBUG_ENV, config
from tests.reliability.support import of_turn
from tests.server.support import WAIT, Stream, new_session, start_turn, use, wait_turn

ALICE = "alice-" + secrets.token_hex(16)
BOB = "bob-" + secrets.token_hex(16)
# Reachable without a token, by design (liveness, API description, dashboard files).
PUBLIC = {
    "/",
    "/healthz",
    "/openapi.json",
    "/docs",
    "/docs/oauth2-redirect",
    "/dashboard",
    "/dashboard/",
}
PUBLIC_PREFIXES = ("/dashboard/static",)
BAD_AUTH: list[dict[str, str]] = [
    {},
    {"Authorization": "Bearer wrong-token-" + secrets.token_hex(8)},
    {"Authorization": "Bearer"},
    {"Authorization": "Basic YWxpY2U6c2VjcmV0"},
    {"Authorization": ALICE},  # the right value without the scheme
]


@pytest.fixture(scope="module")
def users(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    # Test workspaces live under pytest's base temp dir: the users' root. The
    # server's own files may not lie inside an allowed root, so they go elsewhere.
    roots = [str(tmp_path_factory.getbasetemp().resolve())]
    tokens = [
        {"name": "alice", "token": ALICE, "role": "user", "allowed_roots": roots},
        {"name": "bob", "token": BOB, "role": "user", "allowed_roots": roots},
    ]
    home = Path(tempfile.mkdtemp(prefix="toolrelay-auth-"))
    srv = ServerProcess(home, config=config(auth={"tokens": tokens}), env=DEBUG_ENV)
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()
        shutil.rmtree(home, ignore_errors=True)


def _operations(spec: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (method.upper(), path, op)
        for path, ops in spec["paths"].items()
        for method, op in ops.items()
        if method in ("get", "post", "put", "patch", "delete")
    ]


def _fill(path: str, **values: str) -> str:
    """``path`` with each ``{parameter}`` replaced: by its value in ``values``, or by
    a made-up one (``x_<name>``) for a parameter of a route added since."""
    path = re.sub(r"\{([^{}:]+)(?::[^{}]*)?\}", lambda m: values.get(m[1], f"x_{m[1]}"), path)
    assert "{" not in path and "}" not in path, f"unfilled parameter in {path}"
    return path


def _routes(routes: list[Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(full path, route) of every route, walking included routers (FastAPI keeps
    them as wrappers holding the original router and the include prefix)."""
    for route in routes:
        inner = getattr(route, "original_router", None)
        if inner is not None:
            context = getattr(route, "include_context", None)
            yield from _routes(inner.routes, prefix + str(getattr(context, "prefix", "") or ""))
        elif isinstance(route, Route | WebSocketRoute | Mount):
            # Plain Starlette routes too (the MCP endpoint is one): OpenAPI
            # leaves them out, so only the route table shows them.
            yield prefix + route.path, route


def _websocket_paths() -> list[str]:
    return [path for path, r in _routes(_app().routes) if isinstance(r, WebSocketRoute)]


def _app() -> Any:
    """The app object (not started): its route table lists every route."""
    cfg = load_config(None, env={})
    return create_app(cfg, TokenRegistry([TokenConfig(name="x", token="x" * 16, role="admin")]))


def _is_public(path: str) -> bool:
    return path in PUBLIC or path.startswith(PUBLIC_PREFIXES)


async def test_every_route_and_stream_needs_a_valid_token(users: ServerProcess) -> None:
    srv = users
    async with httpx2.AsyncClient(base_url=srv.base_url, timeout=WAIT) as anon:
        spec = (await anon.get("/openapi.json")).json()
        operations = _operations(spec)
        assert len(operations) >= 13  # sanity: the description lists the API
        checked = 0
        for method, template, op in operations:
            if _is_public(template):
                continue
            path = _fill(template, session_id="ses_x", turn_id="turn_x", request_id="req_x")
            for headers in BAD_AUTH:
                # A body that is not even JSON: authentication comes first anyway.
                body = b"{not json" if "requestBody" in op else None
                response = await anon.request(method, path, headers=headers, content=body)
                assert response.status_code == 401, (method, path, headers, response.text)
                assert response.headers["www-authenticate"] == "Bearer"
                assert response.json()["error"]["code"] == "unauthorized"
                checked += 1
            # An oversized body is refused for the token, not for its size.
            if "requestBody" in op:
                big = await anon.request(method, path, content=b"x" * (8 * 1024 * 1024))
                assert big.status_code == 401, (method, path)
        assert checked >= 12 * len(BAD_AUTH)
        # The public routes really are public.
        for path in ("/healthz", "/openapi.json", "/docs"):
            assert (await anon.get(path)).status_code == 200

    # Every route of the app is either described by OpenAPI or deliberately public.
    described = {path for _, path, _ in operations}
    table = list(_routes(_app().routes))
    http_routes = [path for path, r in table if isinstance(r, APIRoute)]
    assert len(http_routes) >= len(described)
    for path in http_routes:
        assert path in described or _is_public(path), f"{path} is neither described nor public"
    # Mounted apps (static files) are public by design; any other is a hole.
    for path, r in table:
        if isinstance(r, Mount):
            assert _is_public(path), f"mount {path} is not public: its auth is untested"
    # Plain routes that OpenAPI does not describe (the MCP endpoint) need a token too.
    plain = [
        (method, path)
        for path, r in table
        if isinstance(r, Route) and not isinstance(r, APIRoute) and not _is_public(path)
        for method in sorted(r.methods or ())
        if method != "HEAD" and path not in described
    ]
    assert ("POST", "/sessions/{session_id}/mcp") in plain
    async with httpx2.AsyncClient(base_url=srv.base_url, timeout=WAIT) as anon:
        for method, template in plain:
            path = _fill(template, session_id="ses_x")
            for headers in BAD_AUTH:
                response = await anon.request(method, path, headers=headers)
                assert response.status_code == 401, (method, path, headers, response.text)
                assert response.headers["www-authenticate"] == "Bearer"

    ws_paths = _websocket_paths()
    assert {"/events", "/sessions/{session_id}/events"} <= set(ws_paths)
    for template in ws_paths:
        path = _fill(template, session_id="ses_x")
        attempts: list[tuple[str, dict[str, str]]] = [
            (srv.ws_url(path, token=False), {}),
            (f"{srv.ws_base}{path}?token=", {}),
            (f"{srv.ws_base}{path}?token=wrong-{secrets.token_hex(8)}", {}),
            (srv.ws_url(path, token=False), {"Authorization": "Bearer wrong"}),
        ]
        for url, headers in attempts:
            with pytest.raises(InvalidStatus) as refused:
                await connect(url, additional_headers=headers, open_timeout=WAIT, proxy=None)
            assert refused.value.response.status_code == 401, (url, headers)


# Valid bodies for every operation that takes one, so that the answer is about
# visibility (404), not about the body (422). A new route with a body must be
# added here; the test names it.
def _bodies() -> dict[tuple[str, str], dict[str, Any]]:
    return {
        ("POST", "/sessions"): {"workspace": "/tmp"},
        ("POST", "/sessions/{session_id}/turns"): {
            "tool_uses": [{"id": "intruder", "name": "rl_echo", "input": {"text": "x"}}]
        },
        ("POST", "/sessions/{session_id}/turns/{turn_id}/confirmations/{request_id}"): {
            "decision": "allow"
        },
    }


async def test_a_user_cannot_touch_another_users_session(
    users: ServerProcess, workspace: Path
) -> None:
    srv = users
    async with (
        srv.client(token=ALICE) as alice,
        srv.client(token=BOB) as bob,
        srv.client() as admin,
    ):
        sid = await new_session(alice, workspace)
        alice_url = f"{srv.ws_base}/sessions/{sid}/events?after=0&token={ALICE}"
        async with await Stream.open(alice_url, after=0) as watch:
            # A turn waiting on a confirmation: something bob could try to answer.
            tid = await start_turn(
                alice, sid, use("w", "write_file", path="mine.txt", content="alice\n")
            )
            requested = await watch.until("tool.confirmation_requested")
        request_id = requested["data"]["request_id"]
        spec = (await bob.get("/openapi.json")).json()
        bodies = _bodies()
        tried = 0
        for method, template, op in _operations(spec):
            if "{session_id}" not in template:
                continue
            path = _fill(template, session_id=sid, turn_id=tid, request_id=request_id)
            body = None
            if "requestBody" in op:
                assert (method, template) in bodies, f"add a valid body for {method} {template}"
                body = bodies[(method, template)]
            response = await bob.request(method, path, json=body)
            assert response.status_code == 404, (method, path, response.status_code, response.text)
            assert response.json()["error"]["code"] == "not_found"
            # The same answer as for a session that does not exist at all.
            ghost = _fill(
                template,
                session_id="ses_" + secrets.token_hex(8),
                turn_id=tid,
                request_id=request_id,
            )
            assert (await bob.request(method, ghost, json=body)).status_code == 404
            tried += 1
        assert tried >= 11
        assert sid not in [s["id"] for s in (await bob.get("/sessions")).json()["sessions"]]
        with pytest.raises(InvalidStatus) as refused:
            await connect(
                f"{srv.ws_base}/sessions/{sid}/events?after=0&token={BOB}",
                open_timeout=WAIT,
                proxy=None,
            )
        assert refused.value.response.status_code == 404

        # Nothing bob did had any effect: the request is still pending, the turn
        # still running, the session still there; alice answers and finishes.
        pending = (await alice.get(f"/sessions/{sid}/confirmations")).json()["confirmations"]
        assert [p["request_id"] for p in pending] == [request_id]
        answer = await alice.post(
            f"/sessions/{sid}/turns/{tid}/confirmations/{request_id}", json={"decision": "allow"}
        )
        assert answer.status_code == 200 and answer.json()["resolved_by"] == "alice"
        turn = await wait_turn(alice, sid, tid)
        assert turn["status"] == "completed" and not turn["results"][0]["is_error"]
        assert (workspace / "mine.txt").read_text() == "alice\n"
        assert (await admin.get(f"/sessions/{sid}")).status_code == 200

        # Bob's all-sessions stream carries his own sessions' events only.
        bob_ws = workspace / "bob"
        bob_ws.mkdir()
        bob_sid = await new_session(bob, bob_ws)
        bob_tid = await start_turn(bob, bob_sid, use("e", "rl_echo", text="bob"))
        await wait_turn(bob, bob_sid, bob_tid)
        url = f"{srv.ws_base}/events?after=0&token={BOB}"
        async with await Stream.open(url, per_session=False, after=0) as everything:
            await everything.until("turn.completed", of_turn(bob_tid))
    assert {e["session_id"] for e in everything.events} == {bob_sid}
