"""Attack: a page on another site opens the event WebSockets in its visitor's
name (cross-site WebSocket hijacking).

A browser lets any page open a socket to any host and only tells the server
where the page came from, in ``Origin``. With a token (leaked, or typed into
a look-alike page) the evil page would read every event. The server must
refuse a handshake whose Origin is neither its own (the ``Host`` the request
names) nor listed in ``server.allowed_origins``, before accepting the socket;
clients that send no Origin at all (the SDK, the TUI, scripts) stay welcome.

Real server subprocess, real ``websockets`` client sending the headers a
browser would.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from tests.harness import ServerProcess

TRUSTED = "https://app.example.com:8443"
EVIL = "http://evil.example"


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    config: dict[str, Any] = {"server": {"allowed_origins": [TRUSTED]}}
    process = ServerProcess(tmp_path_factory.mktemp("web-origin"), config=config)
    process.start()
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture(scope="module")
def session_id(srv: ServerProcess, tmp_path_factory: pytest.TempPathFactory) -> str:
    workspace = tmp_path_factory.mktemp("origin-ws").resolve()
    created = httpx2.post(
        f"{srv.base_url}/sessions",
        json={"workspace": str(workspace)},
        headers=srv.headers(),
        timeout=10,
    )
    assert created.status_code == 201, created.text
    return str(created.json()["id"])


def _paths(session_id: str) -> list[str]:
    return [f"/sessions/{session_id}/events", "/events"]


async def _opens(url: str, origin: str | None) -> dict[str, Any]:
    """Open the socket with this Origin (None: none sent) and read the first
    event the replay sends (``session.created`` on both streams)."""
    headers = {"Origin": origin} if origin is not None else {}
    async with connect(url, additional_headers=headers, open_timeout=10, proxy=None) as ws:
        first: dict[str, Any] = json.loads(await ws.recv(decode=True))
        return first


@pytest.mark.parametrize(
    "origin",
    [
        EVIL,
        "https://evil.example",
        "null",  # a sandboxed iframe or a file:// page
        "http://127.0.0.1:1",  # the same host, another port: another origin
        "https://app.example.com",  # the trusted host without its port
        "http://app.example.com:8443",  # the trusted host and port, other scheme
        "javascript:alert(1)",
    ],
)
async def test_a_foreign_origin_is_refused_before_accept(
    srv: ServerProcess, session_id: str, origin: str
) -> None:
    for path in _paths(session_id):
        with pytest.raises(InvalidStatus) as refused:
            await _opens(srv.ws_url(path, after=0), origin)
        response = refused.value.response
        assert response.status_code == 403, (path, response.status_code)
        body = json.loads(bytes(response.body or b""))
        assert body["error"]["code"] == "origin_not_allowed", body
        assert "server.allowed_origins" in body["error"]["message"], body


async def test_the_evil_origin_reads_nothing_even_with_a_valid_token_in_the_header(
    srv: ServerProcess, session_id: str
) -> None:
    """The token in the Authorization header, as a proxying page might send it."""
    url = srv.ws_url(f"/sessions/{session_id}/events", token=False, after=0)
    headers = {"Origin": EVIL, "Authorization": f"Bearer {srv.token}"}
    with pytest.raises(InvalidStatus) as refused:
        async with connect(url, additional_headers=headers, open_timeout=10, proxy=None):
            pass
    assert refused.value.response.status_code == 403


@pytest.mark.parametrize("origin", [None, "same", TRUSTED, "HTTPS://App.Example.com:8443"])
async def test_own_listed_and_absent_origins_are_accepted(
    srv: ServerProcess, session_id: str, origin: str | None
) -> None:
    if origin == "same":
        origin = srv.base_url  # what the dashboard served by this server sends
    for path in _paths(session_id):
        first = await _opens(srv.ws_url(path, after=0), origin)
        assert first["type"] == "session.created", first


async def test_a_refused_origin_is_refused_without_a_token_too(
    srv: ServerProcess, session_id: str, tmp_path: Path
) -> None:
    """The origin check says nothing about tokens: no token, evil origin -> 403 too
    (a 401 would tell the page the socket exists and wants a token)."""
    url = srv.ws_url(f"/sessions/{session_id}/events", token=False)
    with pytest.raises(InvalidStatus) as refused:
        await _opens(url, EVIL)
    assert refused.value.response.status_code == 403
