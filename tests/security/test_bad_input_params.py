"""Attack: NUL bytes, control characters and broken UTF-8 in every kind of
parameter (path, query, header, the JSON strings that name things).

Today's failure: ``GET /memory?workspace=%00`` answers 500 ("embedded null
byte" from ``os.path.realpath``), and other places store or echo such
characters. Every one must be a 422 whose error names the parameter, never a
500, never a 2xx. Hypothesis picks the bad character and where it sits; a
real server subprocess answers over real HTTP (raw sockets for the headers,
which HTTP client libraries refuse to send).
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from tests.harness import ServerProcess

# Percent-encoded bad characters: NUL, other C0 controls, DEL, C1 controls,
# a UTF-8-encoded lone surrogate, and bytes that are not UTF-8 at all.
BAD_ENCODED = st.one_of(
    st.sampled_from(["%00", "%0A", "%0D", "%1B", "%7F", "%C2%85", "%ED%A0%80", "%FF", "%C3"]),
    st.integers(min_value=0, max_value=0x1F).map(lambda c: f"%{c:02X}"),
)
TEXT = st.text(alphabet="abcxyz019_-", max_size=6)


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    process = ServerProcess(tmp_path_factory.mktemp("bad-params"))
    process.start()
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture(scope="module")
def http(srv: ServerProcess) -> Iterator[httpx2.Client]:
    # No keep-alive: a 500 (today) makes the server drop the connection.
    limits = httpx2.Limits(max_keepalive_connections=0)
    with httpx2.Client(
        base_url=srv.base_url, headers=srv.headers(), timeout=10, limits=limits
    ) as client:
        yield client


@pytest.fixture(scope="module")
def ids(http: httpx2.Client, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    workspace = tmp_path_factory.mktemp("bad-params-ws").resolve()
    sid = http.post("/sessions", json={"workspace": str(workspace)}).json()["id"]
    use = {"id": "t", "name": "write_file", "input": {"path": "a", "content": "x"}}
    tid = http.post(f"/sessions/{sid}/turns", json={"tool_uses": [use]}).json()["turn_id"]
    return {"session_id": sid, "turn_id": tid}


# (method, URL template, the parameter the error must name). {bad} is where
# the bad character goes.
PLACES = [
    ("GET", "/memory?workspace={bad}", "query parameter workspace"),
    ("GET", "/memory?owner={bad}", "query parameter owner"),
    ("GET", "/memory?limit={bad}", "query parameter limit"),
    ("GET", "/sessions?anything={bad}", "query parameter anything"),
    ("GET", "/healthz?x={bad}", "query parameter x"),
    ("GET", "/sessions/{bad}", "path parameter session_id"),
    ("GET", "/sessions/{bad}/messages", "path parameter session_id"),
    ("DELETE", "/sessions/{bad}", "path parameter session_id"),
    ("GET", "/sessions/{session_id}/turns/{bad}", "path parameter turn_id"),
    ("POST", "/sessions/{session_id}/turns/{turn_id}/cancel{bad}", None),
    (
        "POST",
        "/sessions/{session_id}/turns/{turn_id}/confirmations/{bad}",
        "path parameter request_id",
    ),
    ("DELETE", "/memory/{bad}", "path parameter memory_id"),
]


def _expect_422(response: httpx2.Response, field: str | None) -> None:
    assert response.status_code in ((422,) if field else (404, 422)), (
        response.request.url,
        response.status_code,
        response.text[:300],
    )
    if response.status_code != 422:
        return
    error = response.json()["error"]
    assert error["code"] == "invalid_request", error
    if field is not None:
        assert error["fields"][0]["field"] == field, error
        assert error["message"].startswith(field), error


@settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
@given(place=st.sampled_from(PLACES), before=TEXT, bad=BAD_ENCODED, after=TEXT)
def test_a_bad_character_in_a_path_or_query_parameter_is_a_422_naming_it(
    http: httpx2.Client,
    ids: dict[str, str],
    place: tuple[str, str, str | None],
    before: str,
    bad: str,
    after: str,
) -> None:
    method, template, field = place
    url = template.format(bad=before + bad + after, **ids)
    body = {"decision": "deny"} if "confirmations" in url else None
    _expect_422(http.request(method, url, json=body), field)


def test_the_reported_case_memory_workspace_nul(http: httpx2.Client) -> None:
    response = http.get("/memory?workspace=%00")
    _expect_422(response, "query parameter workspace")
    assert "NUL" in response.json()["error"]["message"]


def _raw_request(srv: ServerProcess, header: bytes) -> tuple[int, dict[str, Any] | None]:
    """GET /sessions with one extra raw header line; (status, JSON body or None)."""
    request = (
        b"GET /sessions HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
        + f"Authorization: Bearer {srv.token}\r\n".encode()
        + header
        + b"\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as sock:
        sock.sendall(request)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, payload = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    try:
        return status, json.loads(payload)
    except ValueError:
        return status, None


@pytest.mark.parametrize("char", [b"\x01", b"\x1b", b"\x7f", b"\x00", b"\x0b"])
@pytest.mark.parametrize("name", [b"X-Client-Name", b"X-Anything", b"User-Agent"])
def test_a_control_character_in_a_header_is_refused(
    srv: ServerProcess, name: bytes, char: bytes
) -> None:
    """uvicorn may refuse some bytes itself (400, before any route); what it lets
    through must be a 422 naming the header, never a success or a 500."""
    status, body = _raw_request(srv, name + b": a" + char + b"b")
    assert status in (400, 422), (name, char, status, body)
    if status == 422:
        assert body is not None
        error = body["error"]
        field = error["fields"][0]["field"] if "fields" in error else error["field"]
        assert field in (f"header {name.decode().lower()}", "client_name"), body


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("workspace", "/tmp/a\u0000b"),
        ("workspace", "\u0000"),
        ("workspace", "/tmp/\u001b[31m"),
        ("name", "a\u0000b"),
        ("name", "evil\u001b]0;title\u0007"),
        ("model", "scripted\u0000"),
        ("profile", "dev\u0085"),
        ("agent", "build\u007f"),
    ],
)
def test_a_bad_character_in_a_body_string_that_names_something(
    http: httpx2.Client, tmp_path: Path, field: str, value: str
) -> None:
    body = {"workspace": str(tmp_path.resolve()), field: value}
    response = http.post("/sessions", json=body)
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["fields"][0]["field"] == field, error
    assert "character" in error["fields"][0]["message"], error


async def test_a_bad_character_in_a_websocket_parameter(
    srv: ServerProcess, ids: dict[str, str]
) -> None:
    sid = ids["session_id"]
    for path, query, field in [
        (f"/sessions/{quote('x')}%00/events", "", "path parameter session_id"),
        (f"/sessions/{sid}/events", "&after=1%00", "query parameter after"),
        ("/events", "&x=%1b", "query parameter x"),
    ]:
        url = f"{srv.ws_base}{path}?token={srv.token}{query}"
        with pytest.raises(InvalidStatus) as refused:
            async with connect(url, open_timeout=10, proxy=None):
                pass
        response = refused.value.response
        assert response.status_code == 422, (path, response.status_code)
        error = json.loads(bytes(response.body or b""))["error"]
        assert error["fields"][0]["field"] == field, error


@pytest.mark.parametrize("number", [2**64, -(2**63) - 1, 10**30])
def test_an_integer_the_event_log_cannot_carry_is_refused(
    http: httpx2.Client, ids: dict[str, str], number: int
) -> None:
    """Found by the schemathesis run: a tool input holding an integer past 64
    bits was accepted, then failed the turn when its events were encoded."""
    use = {"id": "big", "name": "read_file", "input": {"path": "a", "offset": number}}
    response = http.post(f"/sessions/{ids['session_id']}/turns", json={"tool_uses": [use]})
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["fields"][0]["field"] == "tool_uses[0].input.offset", error
