"""The Redis event log and live feed against a real redis-server."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from eventbus.cluster.live import LiveFeed
from eventbus.cluster.log import EventDraft, RedisEventLog
from eventbus.errors import CursorExpired, CursorInFuture, EventLogError
from eventbus.record import EventRecord
from tests.cluster.conftest import STEP_TIMEOUT, RedisServer

ROOT = Path(__file__).resolve().parents[2]


def draft(session_id: str, n: int) -> EventDraft:
    return EventDraft(type="message.delta", session_id=session_id, data={"text": f"d{n}"})


def check_gapless(records: list[EventRecord]) -> None:
    """Global seq 1..N and each session's session_seq 1..k, in seq order."""
    records = sorted(records, key=lambda r: r.seq)
    assert [r.seq for r in records] == list(range(1, len(records) + 1))
    per_session: dict[str, int] = {}
    for record in records:
        expected = per_session.get(record.session_id, 0) + 1
        assert record.session_seq == expected, record
        per_session[record.session_id] = expected
        envelope = json.loads(record.text)
        assert (envelope["seq"], envelope["session_seq"]) == (record.seq, record.session_seq)


async def read_all(log: RedisEventLog, session_id: str | None) -> list[EventRecord]:
    out: list[EventRecord] = []
    cursor = 0
    for _ in range(1000):
        page = await log.read_page(session_id, cursor, 500)
        if not page:
            return out
        out.extend(page)
        cursor = page[-1].seq if session_id is None else page[-1].session_seq
    raise AssertionError("the log did not end")


async def test_two_replicas_number_gaplessly(
    redis_client: aioredis.Redis, redis_server: RedisServer
) -> None:
    other = redis_server.client()
    try:
        logs = [RedisEventLog(redis_client), RedisEventLog(other)]

        async def replica(log: RedisEventLog, tag: int) -> list[EventRecord]:
            got: list[EventRecord] = []
            for i in range(40):
                batch = [draft(f"s{(i + j + tag) % 3}", i) for j in range(1 + i % 4)]
                got.extend(await log.append(batch))
            return got

        async with asyncio.timeout(STEP_TIMEOUT):
            a, b = await asyncio.gather(replica(logs[0], 0), replica(logs[1], 1))
        returned = a + b
        check_gapless(returned)
        stored = await read_all(logs[0], None)
        assert [r.text for r in stored] == [r.text for r in sorted(returned, key=lambda r: r.seq)]
        for sid in ("s0", "s1", "s2"):
            per_session = await read_all(logs[1], sid)
            assert [r.session_seq for r in per_session] == list(range(1, len(per_session) + 1))
            assert per_session[-1].session_seq == await logs[0].last_session_seq(sid)
        last, counters = await logs[1].start()
        assert last == len(returned) and sum(counters.values()) == len(returned)
    finally:
        await other.aclose()


CHILD = """
import asyncio, sys
sys.path.insert(0, sys.argv[1])
import redis.asyncio as aioredis
from eventbus.cluster.log import EventDraft, RedisEventLog

async def main() -> None:
    client = aioredis.Redis.from_url(sys.argv[2], decode_responses=True)
    log = RedisEventLog(client)
    for i in range(150):
        await log.append([EventDraft(type="message.delta", session_id="shared", data={"i": i})])
    await client.aclose()

asyncio.run(main())
"""


async def test_two_processes_number_gaplessly(
    redis_client: aioredis.Redis, redis_server: RedisServer
) -> None:
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-c", CHILD, str(ROOT), redis_server.url
    )
    log = RedisEventLog(redis_client)
    try:
        for i in range(150):
            await log.append([draft("shared", i), draft("mine", i)])
        async with asyncio.timeout(STEP_TIMEOUT):
            assert await child.wait() == 0
    finally:
        if child.returncode is None:
            child.kill()
            await child.wait()
    stored = await read_all(log, None)
    assert len(stored) == 450
    check_gapless(stored)
    shared = await read_all(log, "shared")
    assert [r.session_seq for r in shared] == list(range(1, 301))


async def test_replay_then_live_has_no_gap_or_repeat(
    redis_client: aioredis.Redis, redis_server: RedisServer
) -> None:
    publisher_client = redis_server.client()
    publisher = RedisEventLog(publisher_client)
    log = RedisEventLog(redis_client)
    feed = LiveFeed(redis_client, log, page_size=16, max_queue=300)
    await feed.start()
    try:
        await publisher.append([draft("s", i) for i in range(50)])
        stop = asyncio.Event()

        async def publish() -> None:
            for i in range(200):
                await publisher.append([draft("s", i), draft("other", i)])
                if i % 20 == 0:
                    await asyncio.sleep(0)
            stop.set()

        task = asyncio.create_task(publish())
        session_sub = await feed.subscribe(session_id="s", after=10)
        global_sub = await feed.subscribe(after=7)
        got: list[EventRecord] = []
        got_all: list[EventRecord] = []
        async with asyncio.timeout(STEP_TIMEOUT):
            async for record in session_sub:
                got.append(record)
                if record.session_seq == 250:
                    break
            async for record in global_sub:
                got_all.append(record)
                if record.seq == 450:
                    break
            await task
        assert [r.session_seq for r in got] == list(range(11, 251))
        assert [r.seq for r in got_all] == list(range(8, 451))
        session_sub.close()
        global_sub.close()
        with pytest.raises(CursorInFuture):
            await feed.subscribe(session_id="s", after=251)
    finally:
        await feed.close()
        await publisher_client.aclose()


async def test_own_events_reach_live_subscribers_after_redis_took_them(
    redis_client: aioredis.Redis,
) -> None:
    log = RedisEventLog(redis_client)
    feed = LiveFeed(redis_client, log)
    await feed.start()
    try:
        sub = await feed.subscribe(session_id="s")
        records = await log.append([draft("s", 1), draft("s", 2)])
        async with asyncio.timeout(STEP_TIMEOUT):
            seen = [await anext(sub), await anext(sub)]
        assert [r.text for r in seen] == [r.text for r in records]
        sub.close()
    finally:
        await feed.close()


async def test_pruned_cursor_is_expired(redis_client: aioredis.Redis) -> None:
    log = RedisEventLog(redis_client)
    await log.append([draft("a" if i % 2 else "b", i) for i in range(20)])
    assert await log.prune(keep_last=6) == 14
    with pytest.raises(CursorExpired) as info:
        await log.read_page(None, 3, 10)
    assert info.value.oldest_cursor == 14
    assert [r.seq for r in await log.read_page(None, 14, 10)] == list(range(15, 21))
    # session a holds seqs 2,4,..,20 as session_seq 1..10; seq 16 is session_seq 8
    with pytest.raises(CursorExpired) as info:
        await log.read_page("a", 2, 10)
    assert info.value.oldest_cursor == 7 and info.value.session_id == "a"
    assert await log.oldest_cursor("a") == 7
    assert [r.session_seq for r in await log.read_page("a", 7, 10)] == [8, 9, 10]
    feed = LiveFeed(redis_client, log)
    await feed.start()
    try:
        with pytest.raises(CursorExpired):
            await feed.subscribe(after=0)
    finally:
        await feed.close()
    # Everything older than now: nothing is held, only "after the last" is usable.
    await log.prune(keep_last=None, max_age_s=0)
    assert await log.oldest_cursor() == 20
    assert await log.read_page(None, 20, 10) == []
    with pytest.raises(CursorExpired):
        await log.read_page("b", 9, 10)
    numbered = await log.append([draft("b", 0)])
    assert (numbered[0].seq, numbered[0].session_seq) == (21, 11)


async def test_log_and_live_feed_survive_a_redis_restart_with_appendonly(
    tmp_path: Path, redis_factory: list[RedisServer]
) -> None:
    server = RedisServer(tmp_path / "aof", appendonly=True)
    redis_factory.append(server)
    server.start()
    writer, follower = server.client(), server.client()
    log = RedisEventLog(writer)
    feed = LiveFeed(follower, RedisEventLog(follower))
    try:
        written = await log.append([draft("s", i) for i in range(30)])
        await feed.start()
        sub = await feed.subscribe(session_id="s", after=25)
        server.stop()  # SIGTERM: with appendfsync always, everything accepted is on disk
        # Redis is down: the append fails and no client is shown anything.
        with pytest.raises(EventLogError):
            await log.append([draft("s", 98)])
        await asyncio.sleep(0.05)
        assert sub.queued == 0
        server.start()  # same port and dir
        more: list[EventRecord] = []
        for _attempt in range(200):  # the clients reconnect on their own
            try:
                more = await log.append([draft("s", 99)])
                break
            except EventLogError:
                await asyncio.sleep(0.05)
        assert more and (more[0].seq, more[0].session_seq) == (31, 31)
        got: list[EventRecord] = []
        async with asyncio.timeout(STEP_TIMEOUT):
            async for record in sub:
                got.append(record)
                if record.session_seq == 31:
                    break
        assert [r.session_seq for r in got] == list(range(26, 32))
        stored = await read_all(RedisEventLog(follower), "s")
        assert [r.text for r in stored] == [r.text for r in written + more]
        sub.close()
    finally:
        await feed.close()
        await writer.aclose()
        await follower.aclose()
