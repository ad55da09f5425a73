"""Leases, lapse detection, first-answer-wins, forwarding and presence on real Redis."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import sys
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from eventbus.cluster.answers import AnswerArbiter
from eventbus.cluster.forwarding import (
    Forwarder,
    ForwardError,
    HandlerRefused,
    ReplicaUnavailable,
)
from eventbus.cluster.keys import Keys
from eventbus.cluster.leases import LapseWatcher, Leases, LostTurns
from eventbus.cluster.log import EventDraft, RedisEventLog
from eventbus.cluster.presence import Presence
from tests.cluster.conftest import STEP_TIMEOUT, RedisServer

ROOT = Path(__file__).resolve().parents[2]

HOLDER = """
import asyncio, sys
sys.path.insert(0, sys.argv[1])
import redis.asyncio as aioredis
from eventbus.cluster.leases import Leases
from eventbus.cluster.log import EventDraft, RedisEventLog

async def main() -> None:
    client = aioredis.Redis.from_url(sys.argv[2], decode_responses=True)
    leases = Leases(client, "child", ttl_ms=1500)
    log = RedisEventLog(client, replica_id="child", lease_ttl_ms=1500)
    # A session created and its turn started in one append (as a sub-agent's
    # are): the script takes the lease, then lists the turn.
    await log.append([
        EventDraft("session.created", "sess", {}),
        EventDraft("turn.started", "sess", {}, turn_id="turn_1"),
    ])
    assert await leases.acquire("sess")  # already held: into the heartbeat
    await leases.start()
    print("ready", flush=True)
    await asyncio.sleep(3600)

asyncio.run(main())
"""


async def test_lapsed_lease_of_a_killed_owner_is_claimed_once(
    redis_client: aioredis.Redis, redis_server: RedisServer
) -> None:
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-c", HOLDER, str(ROOT), redis_server.url, stdout=asyncio.subprocess.PIPE
    )
    lost: asyncio.Queue[LostTurns] = asyncio.Queue()

    async def on_lost(turns: LostTurns) -> None:
        await lost.put(turns)

    other = redis_server.client()
    watchers = [
        LapseWatcher(redis_client, on_lost, interval_s=0.05),
        LapseWatcher(other, on_lost, interval_s=0.05),
    ]
    mine = Leases(redis_client, "survivor", ttl_ms=300)
    try:
        assert child.stdout is not None
        async with asyncio.timeout(STEP_TIMEOUT):
            assert (await child.stdout.readline()).strip() == b"ready"
        assert await mine.owner_of("sess") == "child"
        assert not await mine.try_adopt("sess")
        # Renewed every third of its TTL: still held after more than a TTL.
        # The TTL leaves a busy machine a second of stall before the lease
        # lapses for real (a shorter one failed there).
        for _ in range(3):
            await asyncio.sleep(0.6)
            assert await watchers[0].check() == []
        assert await mine.owner_of("sess") == "child"
        for watcher in watchers:
            await watcher.start()
        os.kill(child.pid, signal.SIGKILL)
        await child.wait()
        async with asyncio.timeout(STEP_TIMEOUT):
            claimed = await lost.get()
        assert claimed == LostTurns("sess", {"turn_1": "child"})
        assert await mine.owner_of("sess") is None
        for _ in range(3):  # the other watcher does not claim it again
            await asyncio.sleep(0.06)
        assert lost.empty()
        assert await mine.try_adopt("sess")
        assert await mine.owner_of("sess") == "survivor"
    finally:
        if child.returncode is None:
            child.kill()
            await child.wait()
        for watcher in watchers:
            await watcher.close()
        await mine.close()
        await other.aclose()


_ENDS = ("turn.completed", "turn.failed", "turn.cancelled")


async def test_ownership_follows_the_stored_events_whatever_the_batching(
    redis_client: aioredis.Redis, redis_server: RedisServer
) -> None:
    """After every append, Redis holds exactly the ownership the stored events
    imply: a session's lease is its first creator's, a turn is listed while
    its start (stored by the lease holder) is not followed by its end, and a
    log without a replica id changes nothing. Random batches, two replicas
    and a plain log, checked against a model after each append."""
    keys = Keys("ownership")
    other = redis_server.client()
    logs = {
        "a": RedisEventLog(redis_client, keys, replica_id="a", lease_ttl_ms=60_000),
        "b": RedisEventLog(other, keys, replica_id="b", lease_ttl_ms=60_000),
        "": RedisEventLog(redis_client, keys),
    }
    rng = random.Random(16)
    owner: dict[str, str] = {}
    running: dict[str, dict[str, str]] = {}
    started: list[tuple[str, str]] = []
    sessions = [f"s{i}" for i in range(4)]
    try:
        for step in range(80):
            name = rng.choice(list(logs))
            batch: list[EventDraft] = []
            for _ in range(rng.randint(1, 6)):
                sid = rng.choice(sessions)
                kind = rng.choice(("created", "started", "ended", "ended", "other"))
                if kind == "created":
                    batch.append(EventDraft("session.created", sid, {}))
                    if name and sid not in owner:
                        owner[sid] = name
                elif kind == "started":
                    turn = f"t{step}_{len(batch)}"
                    batch.append(EventDraft("turn.started", sid, {}, turn_id=turn))
                    started.append((sid, turn))
                    if name and owner.get(sid) == name:
                        running.setdefault(sid, {})[turn] = name
                elif kind == "ended" and started:
                    sid, turn = rng.choice(started)
                    batch.append(EventDraft(rng.choice(_ENDS), sid, {}, turn_id=turn))
                    if name:
                        running.get(sid, {}).pop(turn, None)
                else:
                    batch.append(EventDraft("message.delta", sid, {"text": "x"}, turn_id="t"))
            await logs[name].append(batch)
            for sid in sessions:
                assert await redis_client.get(keys.owner(sid)) == owner.get(sid), (step, sid)
                listed = await redis_client.hgetall(keys.running(sid))
                assert listed == running.get(sid, {}), (step, sid)
            with_turns = {sid for sid, turns in running.items() if turns}
            assert await redis_client.smembers(keys.running_sessions) == with_turns, step
        assert owner and any(running.values()), "the run never listed a turn"
    finally:
        await other.aclose()


async def test_only_the_holder_renews_and_release_is_clean(redis_client: aioredis.Redis) -> None:
    lost: list[str] = []
    a = Leases(redis_client, "a", ttl_ms=5_000, on_lease_lost=lost.append)
    b = Leases(redis_client, "b", ttl_ms=5_000)
    assert await a.acquire("s")
    assert not await b.acquire("s")
    assert await a.renew() == []
    # The lease is taken over behind a's back (as after a lapse): a's renewal says so.
    await redis_client.delete(a.keys.owner("s"))
    assert await b.acquire("s")
    assert await a.renew() == ["s"] and lost == ["s"]
    assert await a.owner_of("s") == "b"
    assert not await a.release("s")  # not a's to release
    await b.close()
    assert await a.owner_of("s") is None


async def test_first_answer_wins_among_concurrent_replicas(
    redis_client: aioredis.Redis, redis_server: RedisServer
) -> None:
    clients = [redis_server.client() for _ in range(4)]
    try:
        arbiters = [AnswerArbiter(c) for c in clients]
        answers = [
            arbiters[i % 4].decide(
                "req_1", "allow" if i % 2 else "deny", resolved_by=f"client{i}", scope="once"
            )
            for i in range(24)
        ]
        async with asyncio.timeout(STEP_TIMEOUT):
            outcomes = await asyncio.gather(*answers)
        winners = [o for o in outcomes if o.won]
        assert len(winners) == 1
        assert {(o.decision, o.resolved_by) for o in outcomes} == {
            (winners[0].decision, winners[0].resolved_by)
        }
        late = await arbiters[0].decide("req_1", "allow", resolved_by="late")
        assert not late.won and late.resolved_by == winners[0].resolved_by
    finally:
        for client in clients:
            await client.aclose()


async def test_forwarding_reaches_the_owner_and_reports_its_absence(
    redis_client: aioredis.Redis, redis_server: RedisServer
) -> None:
    owner_client = redis_server.client()
    owner = Forwarder(owner_client, "owner", block_ms=200)
    caller = Forwarder(redis_client, "caller")

    async def handle(op: str, payload: dict[str, object]) -> dict[str, object]:
        if op == "answer":
            raise HandlerRefused("already answered by someone", status=409)
        return {"op": op, "echo": payload, "ran_on": "owner"}

    try:
        with pytest.raises(ReplicaUnavailable):
            await caller.call("owner", "start_turn", {}, timeout_s=1)
        await owner.serve(handle)
        async with asyncio.timeout(STEP_TIMEOUT):
            result = await caller.call("owner", "start_turn", {"message": "hi"}, timeout_s=15)
            assert result == {"op": "start_turn", "echo": {"message": "hi"}, "ran_on": "owner"}
            with pytest.raises(ForwardError) as info:
                await caller.call("owner", "answer", {}, timeout_s=15)
            assert info.value.status == 409 and "already answered" in str(info.value)
        await owner.close()
        with pytest.raises(ReplicaUnavailable):
            await caller.call("owner", "cancel", {}, timeout_s=1)
    finally:
        await owner.close()
        await owner_client.aclose()


async def test_presence_is_the_union_of_live_replicas(redis_client: aioredis.Redis) -> None:
    a = Presence(redis_client, "a", ttl_ms=5_000)
    # b's entries live 2 s past its last attach: long enough for the reads
    # below on a busy machine, short enough to wait out.
    b = Presence(redis_client, "b", ttl_ms=2_000)
    await a.attach("s", "c1", {"name": "tui"})
    await b.attach("s", "c2", {"name": "web"})
    await b.attach("s", "c3", {"name": "script"})
    seen = await a.clients("s")
    assert [(c["client_id"], c["replica_id"]) for c in seen] == [
        ("c1", "a"),
        ("c2", "b"),
        ("c3", "b"),
    ]
    await b.detach("s", "c3")
    assert [c["client_id"] for c in await a.clients("s")] == ["c1", "c2"]
    # b stops refreshing (as if it died): its clients vanish with the TTL.
    for _ in range(1200):  # 60 s at most
        if [c["client_id"] for c in await a.clients("s")] == ["c1"]:
            break
        await asyncio.sleep(0.05)
    assert [c["client_id"] for c in await a.clients("s")] == ["c1"]
    await a.close()
    assert await b.clients("s") == []
