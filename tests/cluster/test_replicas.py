"""Replicas of one cluster: real ``toolrelay serve`` processes on one real
redis-server (AOF on), real HTTP and WebSocket clients.

One module, one Redis and two replicas (A, B) shared by the tests, which run
in file order: a third replica (C) is started and killed -9 by the replica
loss test, and the last test restarts Redis. Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.conftest import RedisServer
from tests.harness import ServerProcess
from tests.server.support import Stream, new_session, start_turn, use, wait_turn

TTL_MS = 1500
TOKEN = "cluster-admin-" + secrets.token_urlsafe(16)
# Bounds of the waits below (not timings under test).
WAIT = 20.0


class Cluster:
    """The module's Redis and replicas."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.redis = RedisServer(root / "redis", appendonly=True)
        self.replicas: dict[str, ServerProcess] = {}

    def replica(self, name: str) -> ServerProcess:
        srv = ServerProcess(
            self.root / name,
            config={"cluster": {"lease_ttl_ms": TTL_MS}},
            token=TOKEN,
            extra_args=("--redis", self.redis.url, "--replica-id", name),
        )
        self.replicas[name] = srv
        return srv.start()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(tmp_path_factory.mktemp("cluster"))
    c.redis.start()
    try:
        c.replica("A")
        c.replica("B")
        yield c
    finally:
        for srv in c.replicas.values():
            if srv.running:
                srv.stop()
        c.redis.stop()


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path.resolve() / "ws"
    root.mkdir()
    return root


def answer_url(session_id: str, turn_id: str, request_id: str) -> str:
    return f"/sessions/{session_id}/turns/{turn_id}/confirmations/{request_id}"


async def read_until(stream: Stream, type_: str, seen: list[dict[str, Any]]) -> dict[str, Any]:
    """Read events into ``seen`` until one of ``type_`` (bounded by Stream's wait)."""
    for _ in range(10_000):
        event = await stream.next(within=WAIT)
        seen.append(event)
        if event["type"] == type_:
            return event
    raise AssertionError(f"no {type_} in 10000 events")


def gapless(events: list[dict[str, Any]]) -> None:
    numbers = [e["session_seq"] for e in events]
    assert numbers == list(range(1, len(numbers) + 1)), numbers


async def test_health_names_the_replica_and_redis(cluster: Cluster) -> None:
    for name in ("A", "B"):
        async with cluster.replicas[name].client() as http:
            body = (await http.get("/healthz")).json()
        assert body["replica_id"] == name
        assert body["redis"] == "ok"
        assert body["status"] == "ok"


async def test_session_owned_by_a_streams_gapless_from_b_and_runs_b_turns_on_a(
    cluster: Cluster, workspace: Path
) -> None:
    a, b = cluster.replicas["A"], cluster.replicas["B"]
    async with a.client("on-a") as on_a, b.client("on-b") as on_b:
        sid = await new_session(on_a, workspace)
        # B lists and reads the session A owns.
        assert sid in [s["id"] for s in (await on_b.get("/sessions")).json()["sessions"]]
        got = await on_b.get(f"/sessions/{sid}")
        assert got.status_code == 200 and got.headers["x-toolrelay-replica"] == "A"
        async with (
            await Stream.open(b.ws_url(f"/sessions/{sid}/events", after=0)) as from_b,
            await Stream.open(a.ws_url(f"/sessions/{sid}/events", after=0)) as from_a,
        ):
            # Presence is the union of both replicas' clients.
            clients = (await on_b.get(f"/sessions/{sid}/clients")).json()["clients"]
            assert sorted(c["replica_id"] for c in clients) == ["A", "B"]
            # A message turn started through B: the scripted model runs on A.
            started = await on_b.post(f"/sessions/{sid}/turns", json={"message": "hello"})
            assert started.status_code == 202, started.text
            assert started.headers["x-toolrelay-replica"] == "A"
            tid = started.json()["turn_id"]
            seen_b: list[dict[str, Any]] = []
            done = await read_until(from_b, "turn.completed", seen_b)
            assert done["turn_id"] == tid
            # A holds the turn's record: it ran there.
            assert (await wait_turn(on_a, sid, tid))["status"] == "completed"
            seen_a: list[dict[str, Any]] = []
            await read_until(from_a, "turn.completed", seen_a)
    gapless(seen_b)
    assert [e["id"] for e in seen_a] == [e["id"] for e in seen_b]
    assert {"session.created", "client.attached", "turn.started"} <= {e["type"] for e in seen_b}


async def test_one_confirmation_raced_on_a_and_b_has_one_winner(
    cluster: Cluster, workspace: Path
) -> None:
    a, b = cluster.replicas["A"], cluster.replicas["B"]
    async with a.client("alice") as alice, b.client("bob") as bob:
        sid = await new_session(alice, workspace)
        async with await Stream.open(b.ws_url(f"/sessions/{sid}/events", after=0)) as stream:
            tid = await start_turn(bob, sid, use("w1", "write_file", path="a.txt", content="x\n"))
            requested = await stream.until("tool.confirmation_requested")
            url = answer_url(sid, tid, requested["data"]["request_id"])
            on_a, on_b = await asyncio.gather(
                alice.post(url, json={"decision": "allow"}),
                bob.post(url, json={"decision": "deny", "message": "no"}),
            )
            statuses = sorted([on_a.status_code, on_b.status_code])
            assert statuses == [200, 409], (on_a.text, on_b.text)
            winner, loser = (on_a, on_b) if on_a.status_code == 200 else (on_b, on_a)
            won = winner.json()
            error = loser.json()["error"]
            assert error["code"] == "already_resolved"
            assert error["resolution"]["resolved_by"] == won["resolved_by"]
            assert error["resolution"]["decision"] == won["decision"]
            assert won["resolved_by"] in error["message"]
            resolved = await stream.until("tool.confirmation_resolved")
            assert resolved["data"]["resolved_by"] == won["resolved_by"]
            assert (await wait_turn(alice, sid, tid))["status"] == "completed"


async def test_killed_owner_turn_fails_replica_lost_on_b(cluster: Cluster, workspace: Path) -> None:
    b = cluster.replicas["B"]
    c = cluster.replica("C")
    async with c.client("carol") as carol, b.client("bob") as bob:
        sid = await new_session(carol, workspace)
        async with await Stream.open(b.ws_url(f"/sessions/{sid}/events", after=0)) as stream:
            tid = await start_turn(carol, sid, use("w1", "write_file", path="b.txt", content="y"))
            seen: list[dict[str, Any]] = []
            requested = await read_until(stream, "tool.confirmation_requested", seen)
            c.kill()  # SIGKILL: no lease release, no goodbye
            resolved = await read_until(stream, "tool.confirmation_resolved", seen)
            assert resolved["data"]["decision"] == "cancelled"
            failed = await read_until(stream, "turn.failed", seen)
            assert failed["turn_id"] == tid
            assert failed["data"]["reason"] == "replica_lost"
        gapless(seen)
        # Nothing acknowledged before the kill is lost: a fresh replay from B
        # holds every event seen, in order.
        async with await Stream.open(b.ws_url(f"/sessions/{sid}/events", after=0)) as replay:
            again = [await replay.next(within=WAIT) for _ in seen]
        assert [e["id"] for e in again] == [e["id"] for e in seen]
        # A late answer gets the 409 naming the survivor's cancellation.
        url = answer_url(sid, tid, requested["data"]["request_id"])
        late = await bob.post(url, json={"decision": "allow"})
        assert late.status_code == 409, late.text
        assert late.json()["error"]["resolution"]["decision"] == "cancelled"
        # B reaches the workspace (same machine): it adopts the session and runs turns.
        turn = await bob.post(f"/sessions/{sid}/turns", json={"message": "again"})
        assert turn.status_code == 202, turn.text
        assert (await wait_turn(bob, sid, turn.json()["turn_id"]))["status"] == "completed"


async def test_clients_resume_after_redis_restarts(cluster: Cluster, workspace: Path) -> None:
    a, b = cluster.replicas["A"], cluster.replicas["B"]
    async with a.client() as on_a, b.client() as on_b:
        sid = await new_session(on_a, workspace)
        tid = (await on_b.post(f"/sessions/{sid}/turns", json={"message": "one"})).json()["turn_id"]
        await wait_turn(on_a, sid, tid)
        async with await Stream.open(b.ws_url(f"/sessions/{sid}/events", after=0)) as stream:
            before: list[dict[str, Any]] = []
            await read_until(stream, "turn.completed", before)
        last = before[-1]["session_seq"]
        cluster.redis.stop()
        cluster.redis.start()  # same port and dir: the AOF brings everything back
        # Both replicas reconnect by themselves (bounded polling of /healthz).
        for srv in (a, b):
            async with srv.client() as http:
                for _ in range(int(WAIT / 0.1)):
                    if (await http.get("/healthz")).json().get("redis") == "ok":
                        break
                    await asyncio.sleep(0.1)
                else:
                    raise AssertionError(f"{srv.root.name} did not reach Redis again")
        async with await Stream.open(b.ws_url(f"/sessions/{sid}/events", after=last)) as stream:
            started = await on_b.post(f"/sessions/{sid}/turns", json={"message": "two"})
            assert started.status_code == 202, started.text
            after: list[dict[str, Any]] = []
            await read_until(stream, "turn.completed", after)
    gapless(before + after)
