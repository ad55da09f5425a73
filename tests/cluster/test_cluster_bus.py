"""Two ClusterBus replicas on one real Redis: one order, seen the same everywhere."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis

from eventbus.cluster.bus import ClusterBus
from eventbus.errors import BusClosed, InvalidEvent
from eventbus.record import EventRecord
from tests.cluster.conftest import STEP_TIMEOUT, RedisServer


async def collect(sub: object, count: int) -> list[EventRecord]:
    out: list[EventRecord] = []
    async with asyncio.timeout(STEP_TIMEOUT):
        async for record in sub:  # type: ignore[attr-defined]
            out.append(record)
            if len(out) == count:
                break
    return out


async def test_two_replicas_publish_and_every_subscriber_sees_one_order(
    redis_client: aioredis.Redis, redis_server: RedisServer
) -> None:
    other = redis_server.client()
    a, b = ClusterBus(redis_client), ClusterBus(other)
    await a.start()
    await b.start()
    try:
        subs = [await a.subscribe(), await b.subscribe(), await b.subscribe(session_id="s1")]
        with pytest.raises(InvalidEvent):
            a.publish("no.such.type", {}, session_id="s1")
        for i in range(300):
            (a if i % 2 else b).publish(
                "message.delta", {"i": i}, session_id=f"s{i % 3}", turn_id="t"
            )
            if i % 50 == 0:
                await asyncio.sleep(0)
        await asyncio.gather(a.flush(), b.flush())
        on_a, on_b = await collect(subs[0], 300), await collect(subs[1], 300)
        assert [r.seq for r in on_a] == list(range(1, 301))
        assert [r.text for r in on_a] == [r.text for r in on_b]
        session = await collect(subs[2], 100)
        assert [r.session_seq for r in session] == list(range(1, 101))
        assert {r.session_id for r in session} == {"s1"}
        for sub in subs:
            sub.close()
    finally:
        await a.close()
        await b.close()
        await other.aclose()
    with pytest.raises(BusClosed):
        a.publish("message.delta", {}, session_id="s1")
