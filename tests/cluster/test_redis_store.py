"""RedisStore read and written from two replicas (two clients) on real Redis."""

from __future__ import annotations

import asyncio

import redis.asyncio as aioredis

from eventbus.cluster.store import RedisStore, StoredSession, StoredTurn
from tests.cluster.conftest import STEP_TIMEOUT, RedisServer


async def test_state_written_on_one_replica_reads_on_another(
    redis_client: aioredis.Redis, redis_server: RedisServer
) -> None:
    other_client = redis_server.client()
    try:
        a, b = RedisStore(redis_client), RedisStore(other_client)
        s1 = StoredSession(
            id="s1", workspace="/w", owner="alice", created_at="2026-01-01T00:00:00Z"
        )
        s2 = StoredSession(id="s2", workspace="/w", owner="bob", policy_overrides={"x": 1})
        await a.add_session(s1)
        await a.add_session(s2)
        assert await b.get_session("s2") == s2
        assert [s.id for s in await b.list_sessions()] == ["s1", "s2"]
        assert [s.id for s in await b.list_sessions(owner="bob")] == ["s2"]
        assert await b.delete_session("s1") and not await a.delete_session("s1")
        assert await a.get_session("s1") is None and await a.owner_of("s1") == "alice"
        assert [s.id for s in await b.list_sessions()] == ["s2"]
        assert await b.session_ids_of("alice") == ["s1"]

        number = await a.next_turn_number("s2")
        turn = StoredTurn(
            id="t1", session_id="s2", number=number, kind="message", status="running",
            request={"message": "hi"}, created_by="bob",
        )  # fmt: skip
        await a.add_turn(turn)
        assert await b.next_turn_number("s2") == 2
        assert [t.id for t in await b.running_turns()] == ["t1"]
        # Two replicas race to finish the turn: exactly one does.
        async with asyncio.timeout(STEP_TIMEOUT):
            ends = await asyncio.gather(
                a.finish_turn("t1", status="completed", results=[]),
                b.finish_turn("t1", status="failed", reason="replica_lost"),
            )
        assert sum(e is not None for e in ends) == 1
        assert await b.running_turns() == []
        stored = await a.get_turn("t1", session_id="s2")
        assert stored is not None and stored.status in ("completed", "failed")
        assert await a.get_turn("t1", session_id="s1") is None

        appended = await asyncio.gather(
            *(
                (a if i % 2 else b).append_message(
                    "s2", {"role": "user", "content": [{"type": "text", "text": str(i)}]},
                    turn_id="t1" if i < 3 else None,
                )
                for i in range(6)
            )
        )  # fmt: skip
        assert sorted(m.index for m in appended) == list(range(6))
        assert [m.index for m in await b.messages("s2")] == list(range(6))
        assert [m.index for m in await b.messages_after("s2", 3)] == [4, 5]
        assert len(await a.turn_messages("s2", "t1")) == 3
    finally:
        await other_client.aclose()
