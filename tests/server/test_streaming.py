"""Event streams over real WebSockets: replay, resume, presence, close codes."""

from __future__ import annotations

import asyncio
import json
import socket
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from tests.harness import ServerFactory, ServerProcess
from tests.server.conftest import BASE_CONFIG
from tests.server.support import WAIT, Stream, new_session, start_turn, use, wait_turn


async def test_reconnect_with_after_gets_exactly_what_was_missed(
    shared_server: ServerProcess, workspace: Path
) -> None:
    srv = shared_server
    async with srv.client("alice") as http:
        sid = await new_session(http, workspace)
        url = f"/sessions/{sid}/events"
        first = await Stream.open(srv.ws_url(url, after=0))
        tid = await start_turn(http, sid, use("n1", "noisy", count=20, size=10))
        await first.until("tool.output_delta")
        seen = first.cursor
        await first.close()
        # Meanwhile the turn goes on, and another one runs entirely while we are away.
        await wait_turn(http, sid, tid)
        tid2 = await start_turn(http, sid, use("n2", "noisy", count=30, size=10))
        await wait_turn(http, sid, tid2)

        async with await Stream.open(srv.ws_url(url, after=seen), after=seen) as second:
            await second.until("turn.completed", lambda e: e["turn_id"] == tid2)
        # A third reader from the start sees the same sequence: the join is exact.
        async with await Stream.open(srv.ws_url(url, after=0), after=0) as full:
            await full.until("turn.completed", lambda e: e["turn_id"] == tid2)

    joined = first.events + second.events
    ids = [e["id"] for e in joined]
    assert len(ids) == len(set(ids)), "an event was delivered twice"
    # The joined reads equal one full read, presence events of the readers aside.
    assert _work(joined) == _work(full.events)
    assert [e["session_seq"] for e in full.events] == list(range(1, len(full.events) + 1))
    assert len(second.of("tool.output_delta")) >= 30


def _work(events: list[dict[str, Any]]) -> list[str]:
    return [e["id"] for e in events if not e["type"].startswith("client.")]


async def test_all_sessions_stream_replays_by_global_seq(
    shared_server: ServerProcess, tmp_path: Path
) -> None:
    srv = shared_server
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    async with srv.client("dash") as http:
        async with await Stream.open(srv.ws_url("/events"), per_session=False) as live:
            sid_a = await new_session(http, tmp_path / "a")
            sid_b = await new_session(http, tmp_path / "b")
            first = await live.until("session.created", lambda e: e["session_id"] == sid_a)
            await live.until("session.created", lambda e: e["session_id"] == sid_b)
        start = first["seq"] - 1
        async with await Stream.open(
            srv.ws_url("/events", after=start), per_session=False, after=start
        ) as replay:
            await replay.until("session.created", lambda e: e["session_id"] == sid_b)
        assert replay.events[0]["seq"] == first["seq"]


async def test_presence_lists_attached_clients_and_announces_them(
    shared_server: ServerProcess, workspace: Path
) -> None:
    srv = shared_server
    async with srv.client("alice") as http:
        sid = await new_session(http, workspace)
        url = f"/sessions/{sid}/events"
        async with await Stream.open(srv.ws_url(url, after=0, client="watcher")) as watcher:
            mine = await watcher.until("client.attached")
            assert mine["data"]["client_name"] == "watcher"
            tui = await Stream.open(srv.ws_url(url, client="tui"))
            other = await watcher.until("client.attached")
            assert other["data"]["client_name"] == "tui"
            clients = (await http.get(f"/sessions/{sid}/clients")).json()["clients"]
            assert sorted(c["client_name"] for c in clients) == ["tui", "watcher"]
            await tui.close()
            left = await watcher.until("client.detached")
            assert left["data"]["client_id"] == other["data"]["client_id"]
            clients = (await http.get(f"/sessions/{sid}/clients")).json()["clients"]
            assert [c["client_name"] for c in clients] == ["watcher"]


async def test_client_messages_are_ignored_and_binary_is_refused(
    shared_server: ServerProcess, workspace: Path
) -> None:
    srv = shared_server
    async with srv.client("alice") as http:
        sid = await new_session(http, workspace)
        async with await Stream.open(srv.ws_url(f"/sessions/{sid}/events", after=0)) as stream:
            await stream.ws.send("hello?")
            await stream.ws.send('{"decision": "allow"}')
            tid = await start_turn(http, sid, use("n", "noisy", count=1, size=1))
            await stream.until("turn.completed", lambda e: e["turn_id"] == tid)
            await stream.ws.send(b"\x00\x01binary")
            code, reason = await stream.closed()
        assert code == 1003
        assert "one-way" in reason
        # The server is fine afterwards.
        assert (await http.get(f"/sessions/{sid}")).status_code == 200


async def test_an_oversized_client_message_closes_only_that_socket(
    shared_server: ServerProcess, workspace: Path
) -> None:
    srv = shared_server
    async with srv.client("alice") as http:
        sid = await new_session(http, workspace)
    async with await Stream.open(srv.ws_url(f"/sessions/{sid}/events")) as stream:
        await stream.ws.send("x" * (128 * 1024))
        code, _ = await stream.closed()
    assert code == 1009  # message too big
    async with srv.client("alice") as http:
        assert (await http.get(f"/sessions/{sid}")).status_code == 200


async def test_a_talkative_client_is_closed_with_policy_violation(
    shared_server: ServerProcess, workspace: Path
) -> None:
    srv = shared_server
    async with srv.client("alice") as http:
        sid = await new_session(http, workspace)
    async with await Stream.open(srv.ws_url(f"/sessions/{sid}/events")) as stream:
        for i in range(150):
            try:
                await stream.ws.send(f"message {i}")
            except ConnectionClosed:
                break
        code, reason = await stream.closed()
    assert code == 1008
    assert "HTTP" in reason


async def test_deleting_the_session_ends_its_stream(
    shared_server: ServerProcess, workspace: Path
) -> None:
    srv = shared_server
    async with srv.client("alice") as http:
        sid = await new_session(http, workspace)
        async with await Stream.open(srv.ws_url(f"/sessions/{sid}/events", after=0)) as stream:
            await stream.until("client.attached")
            assert (await http.delete(f"/sessions/{sid}")).status_code == 204
            deleted = await stream.until("session.deleted")
            assert deleted["data"]["deleted_by"] == "alice"
            code, reason = await stream.closed()
    assert (code, reason) == (1000, "session deleted")


async def test_bad_cursors_are_refused_explicitly(
    shared_server: ServerProcess, workspace: Path
) -> None:
    srv = shared_server
    async with srv.client("alice") as http:
        sid = await new_session(http, workspace)
    async with await Stream.open(srv.ws_url(f"/sessions/{sid}/events", after=999)) as ahead:
        code, reason = await ahead.closed()
    assert code == 4400
    assert "after=999" in reason
    with pytest.raises(InvalidStatus) as refused:
        await connect(srv.ws_url(f"/sessions/{sid}/events", after="-1"), open_timeout=WAIT)
    assert refused.value.response.status_code == 422
    assert b"after" in refused.value.response.body


async def test_slow_client_is_cut_off_and_resumes_without_a_gap(
    server_factory: ServerFactory, workspace: Path
) -> None:
    srv = server_factory({**BASE_CONFIG, "events": {"subscriber_queue": 64}})
    async with srv.client("alice") as http:
        sid = await new_session(http, workspace)
        url = f"/sessions/{sid}/events"
        # This client reads nothing while the tool floods the stream; its socket
        # backs up, the server's queue for it overflows, and it is cut off. The
        # server does not wait for it: the turn completes meanwhile.
        slow = await connect(
            srv.ws_url(url, after=0),
            max_queue=1,
            compression=None,
            open_timeout=WAIT,
            sock=_small_buffer_socket(srv.port),
        )
        # ~16 MB: twice what the socket buffers on both ends held in trials (~8 MB).
        tid = await start_turn(http, sid, use("n", "noisy", count=8000, size=2000))
        await wait_turn(http, sid, tid, within=60)
        received: list[dict[str, Any]] = []
        with pytest.raises(ConnectionClosed) as closed:
            async with asyncio.timeout(60):
                while True:
                    received.append(json.loads(await slow.recv()))
        rcvd = closed.value.rcvd
        assert rcvd is not None and rcvd.code == 4429, rcvd
        last = received[-1]["session_seq"]
        assert f"after={last}" in rcvd.reason
        assert [e["session_seq"] for e in received] == list(range(1, last + 1))
        # It resumes from its cursor and gets exactly the rest (Stream checks each step).
        async with await Stream.open(srv.ws_url(url, after=last), after=last) as resumed:
            await resumed.until("turn.completed", lambda e: e["turn_id"] == tid, within=60)
        async with await Stream.open(srv.ws_url(url, after=0), after=0) as full:
            await full.until("turn.completed", lambda e: e["turn_id"] == tid, within=60)
    rest = [e["id"] for e in resumed.events if not e["type"].startswith("client.")]
    expected = [
        e["id"]
        for e in full.events
        if e["session_seq"] > last and not e["type"].startswith("client.")
    ]
    assert rest == expected
    assert len(full.of("tool.output_delta")) == 8000


def _small_buffer_socket(port: int) -> socket.socket:
    """A connected client socket with a small fixed receive buffer (no autotuning),
    so a client that stops reading pushes back on the server quickly."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)
    sock.connect(("127.0.0.1", port))
    sock.setblocking(False)
    return sock


async def test_expired_cursor_gets_an_explicit_close(
    server_factory: ServerFactory, workspace: Path
) -> None:
    config = {**BASE_CONFIG, "events": {"retention_events": 1000, "prune_interval": 0.2}}
    srv = server_factory(config)
    async with srv.client("alice") as http:
        sid = await new_session(http, workspace)
        tid = await start_turn(http, sid, use("n", "noisy", count=1500, size=1))
        await wait_turn(http, sid, tid, within=30)
        async with asyncio.timeout(WAIT):
            while True:  # bounded by the timeout; the pruner runs every 0.2 s
                stream = await Stream.open(srv.ws_url(f"/sessions/{sid}/events", after=1))
                try:
                    await stream.next()
                except ConnectionClosed as exc:
                    assert exc.rcvd is not None
                    code, reason = exc.rcvd.code, exc.rcvd.reason
                    break
                await stream.close()
                await asyncio.sleep(0.1)
    assert code == 4410
    assert "oldest usable after=" in reason
    oldest = int(reason.rsplit("after=", 1)[1])
    async with await Stream.open(
        srv.ws_url(f"/sessions/{sid}/events", after=oldest), after=oldest
    ) as rest:
        first = await rest.next()
    assert first["session_seq"] == oldest + 1
