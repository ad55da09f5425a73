"""Attack: a user token tries to create a session looser than the server's
policy: a loose built-in profile, an agent whose profile is loose, an
admin-defined loose profile or agent, and policy overrides that keep every
per-call mode equal to the server's while switching to the ``yolo`` preset
(which also lifts the sandbox floor: outside a sandbox an execute call asks,
except under yolo; no per-call mode shows that).

An in-process server with a user token; only the creation is exercised.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness import InProcessServer

USER_TOKEN = "erin-" + secrets.token_hex(16)
# Every per-call mode exactly as confirm-sensitive (the server's default) has it.
YOLO_IN_DISGUISE: dict[str, Any] = {
    "preset": "yolo",
    "default": {
        "none": "auto",
        "read": "auto",
        "write": "prompt",
        "execute": "prompt",
        "network": "prompt",
    },
    "ratings": {"safe": "auto"},
}


@pytest.fixture(scope="module")
def roots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("loosening_roots").resolve()


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory, roots: Path) -> Iterator[InProcessServer]:
    config: dict[str, Any] = {
        "profiles": {"loose": {"policy": {"preset": "yolo"}}},
        "agents": {"sneaky": {"profile": "loose", "description": "admin's loose agent"}},
        "auth": {
            "tokens": [
                {"name": "erin", "token": USER_TOKEN, "role": "user", "allowed_roots": [str(roots)]}
            ]
        },
    }
    server = InProcessServer(tmp_path_factory.mktemp("loosening"), config=config)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.mark.parametrize(
    "body",
    [
        {"profile": "ci"},
        {"agent": "test"},
        {"profile": "loose"},
        {"agent": "sneaky"},
        {"agent": "plan", "profile": "loose"},
        {"policy": {"preset": "yolo"}},
        {"policy": YOLO_IN_DISGUISE},
        {"policy": YOLO_IN_DISGUISE, "profile": "read-only"},
        {"policy": {"trusted_workspaces": ["/"]}},
        {"policy": {"per_tool": {"shell": "auto"}}},
    ],
)
async def test_a_user_token_cannot_loosen_the_servers_policy(
    srv: InProcessServer, roots: Path, body: dict[str, Any]
) -> None:
    ws = roots / f"ws-{secrets.token_hex(4)}"
    ws.mkdir()
    async with srv.client("erin", token=USER_TOKEN) as http:
        response = await http.post("/sessions", json={"workspace": str(ws), **body})
        listed = (await http.get("/sessions")).json()
    assert response.status_code == 403, (body, response.text)
    assert not any(s.get("workspace") == str(ws) for s in listed.get("sessions", []))


@pytest.mark.parametrize(
    "body",
    [{}, {"profile": "read-only"}, {"profile": "dev"}, {"agent": "plan"}, {"agent": "explore"}],
)
async def test_a_user_token_may_tighten(
    srv: InProcessServer, roots: Path, body: dict[str, Any]
) -> None:
    ws = roots / f"ws-{secrets.token_hex(4)}"
    ws.mkdir()
    async with srv.client("erin", token=USER_TOKEN) as http:
        response = await http.post("/sessions", json={"workspace": str(ws), **body})
    assert response.status_code == 201, (body, response.text)
