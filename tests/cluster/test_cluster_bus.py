"""Two ClusterBus replicas on one real Redis: one order, seen the same everywhere."""

from __future__ import annotations

import asyncio
import json

import pytest
import redis.asyncio as aioredis

from eventbus import EventBus
from eventbus.cluster.bus import ClusterBus
from eventbus.errors import BusClosed, InvalidEvent, UnknownEventType
from eventbus.record import EventRecord
from protocol.payloads import TurnFailed
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


async def test_emit_stores_a_typed_payload_as_the_embedded_bus_encodes_it(
    redis_client: aioredis.Redis,
) -> None:
    payload = TurnFailed(reason="replica_lost", message="gone")
    embedded = EventBus()  # no log: only its encoding is compared
    await embedded.start()
    bus = ClusterBus(redis_client)
    await bus.start()
    try:
        local = await embedded.subscribe(session_id="s1")
        remote = await bus.subscribe(session_id="s1")
        embedded.emit(payload, session_id="s1", turn_id="t1")
        bus.emit(payload, session_id="s1", turn_id="t1")
        await bus.flush()
        (mine,), (theirs,) = await collect(local, 1), await collect(remote, 1)
        assert theirs.type == "turn.failed" and theirs.turn_id == "t1"
        assert json.loads(theirs.text)["data"] == json.loads(mine.text)["data"]
        assert bus.last_session_seq("s1") == 1
        with pytest.raises(UnknownEventType):
            bus.emit(object(), session_id="s1")  # type: ignore[arg-type]
        local.close()
        remote.close()
    finally:
        await bus.close()
        await embedded.close()
