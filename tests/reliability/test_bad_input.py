"""Bad input: generated tool inputs and paths, oversized bodies, garbage frames.

- Paths built by hypothesis from unicode text, NUL, lone surrogates, ``..``,
  ``~``, absolute paths, symlinks out of the workspace, symlink loops and
  very long names go through the real file tools on a real server: nothing
  outside the workspace changes, every call ends in a result, no turn fails
  and the server never answers 5xx.
- Every route that takes a body answers 413 past ``server.max_body_bytes``,
  whether the size is declared or the body is chunked.
- Garbage on a WebSocket (bad frames, bad UTF-8, lies about lengths, junk
  instead of a handshake) ends that connection only; a well-behaved client
  on the same session sees every event, in order, throughout.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import struct
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.harness import ServerProcess
from tests.reliability.conftest import DEBUG_ENV, config
from tests.reliability.support import of_turn, server_problems
from tests.server.support import WAIT, Stream, new_session, start_turn, use, wait_turn

LIMIT = 4096
MARKER = "written-by-the-fuzzer"

# -- one server and a booby-trapped workspace for the whole module ---------------------


@pytest.fixture(scope="module")
def box(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``box/ws`` is the workspace; everything else in ``box`` must stay untouched."""
    root = tmp_path_factory.mktemp("box").resolve()
    ws = root / "ws"
    (ws / "sub" / "deeper").mkdir(parents=True)
    (ws / "sub" / "file.txt").write_text("inside\n")
    outside = root / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("secret\n")
    (ws / "escape").symlink_to(outside)  # a link out of the workspace
    (ws / "up").symlink_to("..")  # a relative link out
    (ws / "loop_a").symlink_to("loop_b")  # a symlink loop
    (ws / "loop_b").symlink_to("loop_a")
    (ws / "self").symlink_to("self")
    (ws / "dangling").symlink_to(outside / "nothing-here")
    return root


@pytest.fixture(scope="module")
def fuzz_server(tmp_path_factory: pytest.TempPathFactory, box: Path) -> Iterator[ServerProcess]:
    cfg = config(
        server={"max_body_bytes": LIMIT * 16},
        # Writes must run without a person: this server trusts its workspace.
        policy={"preset": "yolo"},
        workspaces={"allowed_roots": [str(box / "ws")], "shell": {"enabled": False}},
    )
    srv = ServerProcess(tmp_path_factory.mktemp("fuzz"), config=cfg, env=DEBUG_ENV)
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


def _snapshot(root: Path, skip: Path) -> dict[str, tuple[str, int, bytes]]:
    """Every entry under ``root`` except ``skip`` (links not followed)."""
    out: dict[str, tuple[str, int, bytes]] = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        if Path(dirpath) == skip or skip in Path(dirpath).parents:
            dirnames[:] = []
            continue
        for name in dirnames + filenames:
            path = Path(dirpath, name)
            if path == skip:
                continue
            st_ = path.lstat()
            content = path.read_bytes() if path.is_file() and not path.is_symlink() else b""
            out[str(path)] = (oct(st_.st_mode), st_.st_size, content)
    return out


# -- generated paths through the real tools -------------------------------------------

SPECIAL = [
    "..", ".", "~", "~root", "/", "escape", "up", "loop_a", "loop_b", "self", "dangling",
    "sub", "deeper", "file.txt", "\x00", "a\x00b", "\ud800", "\udfff", "%2e%2e", "..\\..",
    "\u202e", "\ufeff", "\u0000..", "con", " ", "\t", "\n",
    "a" * 255, "b" * 256, "é" * 128, "ü" * 300, "😀" * 70, "../" * 40,
]  # fmt: skip
segment = st.one_of(
    st.sampled_from(SPECIAL),
    st.text(st.characters(codec="utf-8", exclude_characters="/"), min_size=1, max_size=12),
)
paths = st.builds(
    lambda prefix, parts: prefix + "/".join(parts),
    st.sampled_from(["", "", "/", "./", "~/", "../", "/etc/", "escape/", "up/ws/../"]),
    st.lists(segment, min_size=1, max_size=5),
)


def _raw_json(body: dict[str, Any]) -> bytes:
    # ensure_ascii: lone surrogates travel as \\udXXX escapes, as any JSON client
    # may send them; the server must cope with what the escape decodes to.
    return json.dumps(body, ensure_ascii=True).encode("ascii")


@pytest.fixture(scope="module")
def fuzz_session(fuzz_server: ServerProcess, box: Path) -> str:
    response = httpx2.post(
        f"{fuzz_server.base_url}/sessions",
        json={"workspace": str(box / "ws")},
        headers=fuzz_server.headers(),
        timeout=WAIT,
    )
    assert response.status_code == 201, response.text
    session_id: str = response.json()["id"]
    return session_id


@settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(path=paths, text=st.text(max_size=40))
def test_generated_paths_never_escape_the_workspace(
    fuzz_server: ServerProcess, fuzz_session: str, box: Path, path: str, text: str
) -> None:
    ws = box / "ws"
    before = _snapshot(box, skip=ws)
    calls = [
        use("w", "write_file", path=path, content=f"{MARKER} {text}"),
        use("r", "read_file", path=path),
        use("l", "list_dir", path=path),
        use("f", "find_files", path=path, pattern="*"),
        use("g", "grep", path=path, pattern="secret"),
        use("p", "patch_file", path=path, old_str="inside", new_str=MARKER),
    ]
    headers = {**fuzz_server.headers(), "content-type": "application/json"}
    with httpx2.Client(base_url=fuzz_server.base_url, headers=headers, timeout=WAIT) as http:
        response = http.post(
            f"/sessions/{fuzz_session}/turns", content=_raw_json({"tool_uses": calls})
        )
        assert response.status_code == 202, response.text
        turn_id = response.json()["turn_id"]
        turn = _wait(http, fuzz_session, turn_id)
    # Every call ended in a result (errors are results); the turn itself did not fail.
    assert turn["status"] == "completed", turn
    assert [r["tool_use_id"] for r in turn["results"]] == ["w", "r", "l", "f", "g", "p"]
    secret_leaked = [
        r for r in turn["results"] if "secret" in json.dumps(r["content"]) and not r["is_error"]
    ]
    assert not [r for r in secret_leaked if r["tool_use_id"] in ("r", "g")], secret_leaked
    # Nothing outside the workspace changed.
    assert _snapshot(box, skip=ws) == before


def _wait(http: httpx2.Client, session_id: str, turn_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + WAIT * 3
    while time.monotonic() < deadline:
        response = http.get(f"/sessions/{session_id}/turns/{turn_id}")
        assert response.status_code == 200, response.text
        turn: dict[str, Any] = response.json()
        if turn["status"] != "running":
            return turn
        time.sleep(0.01)
    raise AssertionError(f"turn {turn_id} still running after {WAIT * 3:g} s")


def _latin1_file(folder: Path) -> None:
    folder.mkdir()
    with open(os.path.join(os.fsencode(folder), b"caf\xe9.txt"), "wb") as handle:
        handle.write(b"latin-1 name\n")


async def test_names_that_are_not_utf8_keep_the_session_readable(
    fuzz_server: ServerProcess, box: Path
) -> None:
    """A file name in Latin-1 (common in old repositories) reaches Python as a
    surrogate escape; listing it must not break the turn or the conversation."""
    _latin1_file(box / "ws" / "latin1")
    async with fuzz_server.client("latin1") as http:
        sid = await new_session(http, box / "ws")
        tid = await start_turn(
            http,
            sid,
            use("l", "list_dir", path="latin1"),
            use("g", "grep", path="latin1", pattern="latin"),
        )
        turn = await wait_turn(http, sid, tid)
        assert turn["status"] == "completed"
        listing = turn["results"][0]
        assert not listing["is_error"] and "caf" in listing["content"][0]["text"]
        messages = await http.get(f"/sessions/{sid}/messages")
        assert messages.status_code == 200
        assert messages.content.isascii()  # the name travels as an escape, losslessly
        assert rb"caf\udce9.txt" in messages.content


def test_the_fuzzed_server_is_healthy_and_logged_no_crash(fuzz_server: ServerProcess) -> None:
    assert httpx2.get(f"{fuzz_server.base_url}/healthz", timeout=WAIT).status_code == 200
    assert not server_problems(fuzz_server), server_problems(fuzz_server)


# -- oversized bodies ----------------------------------------------------------------


async def test_every_body_route_refuses_oversized_bodies_with_413(
    fuzz_server: ServerProcess, fuzz_session: str
) -> None:
    srv = fuzz_server
    limit = LIMIT * 16
    async with srv.client("big") as http:
        spec = (await http.get("/openapi.json")).json()
        routes = [
            (method.upper(), path)
            for path, ops in spec["paths"].items()
            for method, op in ops.items()
            if "requestBody" in op
        ]
        assert len(routes) >= 3
        for method, template in routes:
            path = (
                template.replace("{session_id}", fuzz_session)
                .replace("{turn_id}", "turn_x")
                .replace("{request_id}", "req_x")
            )
            # Declared too large: refused from the header, before anything is read.
            body = b'{"x": "' + b"y" * limit + b'"}'
            declared = await http.request(method, path, content=body)
            assert declared.status_code == 413, (method, path, declared.text)
            error = declared.json()["error"]
            assert error["code"] == "payload_too_large" and error["limit"] == limit

            # Chunked, no length given: refused as soon as the count passes the limit.
            async def chunks() -> AsyncIterator[bytes]:
                for _ in range(64):
                    yield b"z" * 4096

            chunked = await http.request(method, path, content=chunks())
            assert chunked.status_code == 413, (method, path, chunked.text)
            # Just under the limit is read (and judged on its content instead).
            small = await http.request(method, path, content=b"{}")
            assert small.status_code != 413
    assert (await _health(srv)) == 200


async def _health(srv: ServerProcess) -> int:
    async with httpx2.AsyncClient(base_url=srv.base_url, timeout=WAIT) as anon:
        return (await anon.get("/healthz")).status_code


# -- garbage on WebSockets -----------------------------------------------------------


def _frame(opcode: int, payload: bytes, *, fin: bool = True, mask: bool = True,
           rsv: int = 0, length: int | None = None) -> bytes:  # fmt: skip
    """A WebSocket frame, possibly malformed on purpose."""
    size = len(payload) if length is None else length
    head = bytes([(0x80 if fin else 0) | rsv | opcode])
    flag = 0x80 if mask else 0
    if size < 126:
        head += bytes([flag | size])
    elif size < 65536:
        head += bytes([flag | 126]) + struct.pack("!H", size)
    else:
        head += bytes([flag | 127]) + struct.pack("!Q", size)
    if not mask:
        return head + payload
    key = os.urandom(4)
    return head + key + bytes(b ^ key[i % 4] for i, b in enumerate(payload))


JUNK = random.Random(20260601)  # fixed seed: the same junk on every run
GARBAGE: dict[str, bytes] = {
    "random bytes": bytes(range(256)) * 4,
    "unmasked text frame": _frame(0x1, b"hello", mask=False),
    "invalid utf-8 text": _frame(0x1, b"\xff\xfe\xfd"),
    "reserved bits set": _frame(0x1, b"x", rsv=0x40),
    "unknown opcode": _frame(0x3, b"x"),
    "oversized ping": _frame(0x9, b"p" * 200),
    "fragmented ping": _frame(0x9, b"p", fin=False),
    "orphan continuation": _frame(0x0, b"x"),
    "length of 2**63": _frame(0x1, b"", length=2**63 - 1),
    "length over the cap": _frame(0x1, b"", length=10_000_000),
    "truncated frame": _frame(0x1, b"x" * 100)[:30],
    "close code 999": _frame(0x8, struct.pack("!H", 999)),
    "one-byte close": _frame(0x8, b"\x03"),
    "binary frame": _frame(0x2, b"\x00\x01"),
    # A good frame, then one with reserved bits set (deterministic: random junk could
    # just as well announce a long frame and leave the server rightly waiting for it).
    "text then junk": _frame(0x1, b"hi") + bytes([0xF1, 0x85]) + b"abcd12345",
}


# 1002 protocol error, 1003 unsupported data, 1007 invalid payload, 1009 too big.
EXPECTED_CLOSE = {1002, 1003, 1007, 1009}


async def _upgrade(
    srv: ServerProcess, path: str
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", srv.port)
    writer.write(
        (
            f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{srv.port}\r\nUpgrade: websocket\r\n"
            "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
            "Sec-WebSocket-Version: 13\r\n\r\n"
        ).encode()
    )
    await writer.drain()
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), WAIT)
    assert head.startswith(b"HTTP/1.1 101"), head
    return reader, writer


async def _until_closed(reader: asyncio.StreamReader) -> bytes:
    """Everything the server sends until it closes the connection (bounded)."""
    data = b""
    async with asyncio.timeout(WAIT * 3):
        try:
            while chunk := await reader.read(65536):
                data += chunk
        except ConnectionResetError:
            pass  # closed with our junk still unread: a reset, which is a close too
    return data


async def _close_code(reader: asyncio.StreamReader) -> int | None:
    """Read the server's frames until its close frame (its code) or the end of
    the connection (None). Server frames are unmasked."""
    async with asyncio.timeout(WAIT * 3):
        try:
            while True:
                b0, b1 = await reader.readexactly(2)
                size = b1 & 0x7F
                if size == 126:
                    (size,) = struct.unpack("!H", await reader.readexactly(2))
                elif size == 127:
                    (size,) = struct.unpack("!Q", await reader.readexactly(8))
                payload = await reader.readexactly(size)
                if b0 & 0x0F == 0x8:
                    code: int = struct.unpack("!H", payload[:2])[0] if size >= 2 else 1005
                    return code
        except asyncio.IncompleteReadError:
            return None


async def test_garbage_frames_end_only_the_connection_that_sent_them(
    fuzz_server: ServerProcess, box: Path
) -> None:
    srv = fuzz_server
    async with srv.client("control") as http:
        sid = await new_session(http, box / "ws")
        path = f"/sessions/{sid}/events?after=0&token={srv.token}"
        # The well-behaved client; Stream checks each event follows the last.
        async with await Stream.open(srv.ws_url(f"/sessions/{sid}/events", after=0), after=0) as ok:
            for name, junk in GARBAGE.items():
                reader, writer = await _upgrade(srv, path)
                writer.write(junk)
                await writer.drain()
                if name == "truncated frame":
                    writer.close()  # hang up in the middle of a frame
                else:
                    # The server ends it: a close frame saying why, or a hang-up.
                    code = await _close_code(reader)
                    assert code is None or code in EXPECTED_CLOSE, (name, code)
                    writer.close()
                tid = await start_turn(http, sid, use("e", "rl_echo", text=name))
                await wait_turn(http, sid, tid)
                await ok.until("turn.completed", of_turn(tid))
            # Junk instead of a handshake, and handshakes that are not WebSocket ones.
            for request in (
                JUNK.randbytes(512) + b"\r\n\r\n",
                JUNK.randbytes(64 * 1024),  # no end of headers in sight, past uvicorn's cap
                b"GET " + b"/" * 70_000 + b" HTTP/1.1\r\n\r\n",
                f"GET {path} HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                "Sec-WebSocket-Version: 99\r\nSec-WebSocket-Key: x\r\n\r\n".encode(),
            ):
                reader, writer = await asyncio.open_connection("127.0.0.1", srv.port)
                writer.write(request)
                with contextlib.suppress(ConnectionResetError):
                    await writer.drain()
                answer = await _until_closed(reader)
                writer.close()
                assert not answer.startswith(b"HTTP/1.1 101"), answer[:200]
                assert not answer.startswith(b"HTTP/1.1 5"), answer[:200]
            tid = await start_turn(http, sid, use("e", "rl_echo", text="still fine"))
            await ok.until("turn.completed", of_turn(tid))
    assert (await _health(srv)) == 200
    assert not server_problems(srv), server_problems(srv)


# -- input limits at the API boundary (issue 11, item 6) ---------------------------


def _turn_body(tool_input_json: str) -> bytes:
    """A tool_uses turn body with ``tool_input_json`` spliced in as raw JSON text."""
    return (
        '{"tool_uses":[{"id":"lim","name":"read_file","input":' + tool_input_json + "}]}"
    ).encode()


def _nested(levels: int) -> str:
    # {"a":{"a":...{"a":1}...}}: the input object itself is level 1.
    return '{"a":' * (levels - 1) + '{"a":1}' + "}" * (levels - 1)


async def test_input_over_the_limits_is_refused_with_422_and_listings_stay_readable(
    shared: ServerProcess, workspace: Path
) -> None:
    async with shared.client("limits") as http:
        sid = await new_session(http, workspace)
        url = f"/sessions/{sid}/turns"
        headers = {"content-type": "application/json"}
        refused = {
            # Deeper than the JSON parser goes: today's 400 becomes a 422.
            "10_000 levels": (_turn_body("[" * 10_000 + "]" * 10_000), "nests too deeply"),
            # Parseable, but deeper than the API accepts; the place is named.
            "33 levels": (
                _turn_body(_nested(33)),
                "tool_uses[0].input" + ".a" * 32 + " nests deeper than 32 levels",
            ),
            "a huge array": (
                _turn_body('{"path":[' + ",".join(["0"] * 20_000) + "]}"),
                "tool_uses[0].input.path has 20000 items; at most 10000 are allowed",
            ),
            "a NaN": (_turn_body('{"path":NaN}'), "tool_uses[0].input.path is not a finite"),
            "invalid UTF-8": (b'{"message":"caf\xe9"}', "not valid UTF-8 (at byte 15)"),
            "a 5000-digit integer": (_turn_body('{"n":' + "7" * 5000 + "}"), "not valid JSON"),
        }
        for name, (body, expected) in refused.items():
            response = await http.post(url, content=body, headers=headers)
            assert response.status_code == 422, (name, response.status_code, response.text)
            error = response.json()["error"]
            assert error["code"] == "invalid_request", (name, error)
            assert expected in error["message"], (name, error["message"])
        # Refused before anything was stored.
        assert (await http.get(f"{url}")).json()["turns"] == []

        # At the limit it is accepted (the tool itself then refuses the input), and
        # every later read still answers.
        response = await http.post(url, content=_turn_body(_nested(32)), headers=headers)
        assert response.status_code == 202, response.text
        tid = response.json()["turn_id"]
        turn = await wait_turn(http, sid, tid)
        assert turn["status"] == "completed"
        for path in (url, f"{url}/{tid}", f"/sessions/{sid}/messages", f"/sessions/{sid}"):
            read = await http.get(path)
            assert read.status_code == 200, (path, read.text[:300])
    assert not server_problems(shared), server_problems(shared)
