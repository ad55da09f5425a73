"""Attack: a token answers a confirmation under another's name.

``resolved_by`` is the client name, which the caller chooses
(``X-Client-Name``): a second token can answer "allow" and have the audit
trail say the admin did. The answer must also carry the name of the token
that really answered (``resolved_by_token``, its name in the auth config),
on the ``tool.confirmation_resolved`` event, in the 200 answer and in the
409 a later answer gets.

A real server subprocess with two configured tokens beside the admin's.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from websockets.asyncio.client import connect

from tests.harness import ServerProcess

MALLORY = "mallory-" + secrets.token_hex(16)
ERIN = "erin-" + secrets.token_hex(16)
WRITE = {"id": "tu1", "name": "write_file", "input": {"path": "a.txt", "content": "hi"}}


@pytest.fixture(scope="module")
def roots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("resolved-roots").resolve()


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory, roots: Path) -> Iterator[ServerProcess]:
    config: dict[str, Any] = {
        "auth": {
            "tokens": [
                {"name": "mallory", "token": MALLORY, "role": "admin"},
                {"name": "erin", "token": ERIN, "role": "user", "allowed_roots": [str(roots)]},
            ]
        }
    }
    process = ServerProcess(tmp_path_factory.mktemp("resolved-by"), config=config)
    process.start()
    try:
        yield process
    finally:
        process.stop()


def _pending_write(srv: ServerProcess, token: str, workspace: Path) -> tuple[str, str, str]:
    """A session of ``token`` with a write waiting for its confirmation:
    (session_id, turn_id, request_id)."""
    http = httpx2.Client(base_url=srv.base_url, headers=srv.headers(token=token), timeout=10)
    with http:
        created = http.post("/sessions", json={"workspace": str(workspace)})
        assert created.status_code == 201, created.text
        sid = created.json()["id"]
        turn = http.post(f"/sessions/{sid}/turns", json={"tool_uses": [WRITE]})
        assert turn.status_code == 202, turn.text
        for _ in range(200):  # bounded: about 10 s
            pending = http.get(f"/sessions/{sid}/confirmations").json()["confirmations"]
            if pending:
                return sid, turn.json()["turn_id"], pending[0]["request_id"]
            time.sleep(0.05)
    raise AssertionError("no confirmation request appeared")


async def _resolved_event(srv: ServerProcess, sid: str, token: str) -> dict[str, Any]:
    url = srv.ws_url(f"/sessions/{sid}/events", token=False, after=0)
    headers = {"Authorization": f"Bearer {token}"}
    async with connect(url, additional_headers=headers, open_timeout=10, proxy=None) as ws:
        for _ in range(200):
            event = json.loads(await ws.recv(decode=True))
            if event["type"] == "tool.confirmation_resolved":
                data: dict[str, Any] = event["data"]
                return data
    raise AssertionError("no tool.confirmation_resolved event")


def _answer(srv: ServerProcess, token: str, client: str, path: str) -> httpx2.Response:
    return httpx2.post(
        f"{srv.base_url}{path}",
        json={"decision": "allow"},
        headers=srv.headers(client_name=client, token=token),
        timeout=10,
    )


async def test_a_second_token_claiming_to_be_admin_is_recorded_by_its_own_name(
    srv: ServerProcess, roots: Path
) -> None:
    workspace = roots / "admins"
    workspace.mkdir()
    sid, tid, rid = _pending_write(srv, srv.token, workspace)
    path = f"/sessions/{sid}/turns/{tid}/confirmations/{rid}"
    answered = _answer(srv, MALLORY, "admin", path)
    assert answered.status_code == 200, answered.text
    body = answered.json()
    assert body["resolved_by"] == "admin"  # what the client claimed, kept
    assert body["resolved_by_token"] == "mallory", body
    data = await _resolved_event(srv, sid, srv.token)
    assert data["resolved_by"] == "admin"
    assert data["resolved_by_token"] == "mallory", data
    # A later answer, by the real admin, learns who really won.
    late = _answer(srv, srv.token, "admin", path)
    assert late.status_code == 409, late.text
    winner = late.json()["error"]["resolution"]
    assert winner["resolved_by_token"] == "mallory", winner


async def test_a_user_token_is_recorded_by_its_name_and_the_admin_token_by_admin(
    srv: ServerProcess, roots: Path
) -> None:
    workspace = roots / "erins"
    workspace.mkdir()
    sid, tid, rid = _pending_write(srv, ERIN, workspace)
    answered = _answer(srv, ERIN, "admin", f"/sessions/{sid}/turns/{tid}/confirmations/{rid}")
    assert answered.status_code == 200, answered.text
    data = await _resolved_event(srv, sid, ERIN)
    assert (data["resolved_by"], data["resolved_by_token"]) == ("admin", "erin"), data

    workspace = roots / "admin-own"
    workspace.mkdir()
    sid, tid, rid = _pending_write(srv, srv.token, workspace)
    path = f"/sessions/{sid}/turns/{tid}/confirmations/{rid}"
    answered = _answer(srv, srv.token, "some-script", path)
    assert answered.status_code == 200, answered.text
    data = await _resolved_event(srv, sid, srv.token)
    # TOOLRELAY_TOKEN's fixed name in the auth config is "admin".
    assert (data["resolved_by"], data["resolved_by_token"]) == ("some-script", "admin"), data
