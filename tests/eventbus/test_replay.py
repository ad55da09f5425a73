"""Replay from a cursor, the seam into live events, restarts, expiry."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from eventbus import CursorExpired, CursorInFuture, EventBus, EventLog

from .conftest import cursors, mode_options, running_bus, take


def publish_round(bus: EventBus, count: int, sessions: int = 3) -> None:
    for i in range(count):
        bus.publish("message.delta", {"text": str(i)}, session_id=f"ses_{i % sessions}")


@pytest.mark.parametrize("log_mode", ["process", "thread", "memory"], indirect=True)
async def test_replay_after_n_for_one_session_and_for_all(
    log_mode: str, mode_log: EventLog | None
) -> None:
    async with running_bus(mode_log, replay_page_size=7, **mode_options(log_mode)) as bus:
        publish_round(bus, 90)
        await bus.flush()
        everything = await bus.subscribe(after=40)
        assert cursors(await take(everything, 50), per_session=False) == list(range(41, 91))
        one = await bus.subscribe(session_id="ses_2", after=11)
        got = await take(one, 19)
        assert cursors(got, per_session=True) == list(range(12, 31))
        assert {r.session_id for r in got} == {"ses_2"}
        # Then live, seamlessly.
        publish_round(bus, 3)
        assert [r.seq for r in await take(everything, 3)] == [91, 92, 93]
        assert cursors(await take(one, 1), per_session=True) == [31]
        assert one.last_cursor == 31 and everything.last_cursor == 93
        # after=0 replays from the very first event; after=latest waits for new ones.
        from_start = await bus.subscribe(session_id="ses_0", after=0)
        assert cursors(await take(from_start, 31), per_session=True) == list(range(1, 32))
        at_end = await bus.subscribe(after=93)
        publish_round(bus, 1)
        assert [r.seq for r in await take(at_end, 1)] == [94]


async def test_cursor_in_the_future_is_refused(log_path: Path) -> None:
    log = EventLog.open(log_path)
    try:
        async with running_bus(log) as bus:
            publish_round(bus, 6)  # not even flushed: the bus knows what it assigned
            with pytest.raises(CursorInFuture) as caught:
                await bus.subscribe(after=7)
            assert (caught.value.cursor, caught.value.latest_cursor) == (7, 6)
            assert "after=7" in str(caught.value) and "6" in str(caught.value)
            with pytest.raises(CursorInFuture):
                await bus.subscribe(session_id="ses_1", after=3)
            with pytest.raises(CursorInFuture):
                await bus.subscribe(session_id="ses_new", after=1)
            sub = await bus.subscribe(session_id="ses_1", after=2)
            publish_round(bus, 2)
            assert cursors(await take(sub, 1), per_session=True) == [3]
            assert bus.subscriber_count() == 1  # the refused ones were not registered
    finally:
        log.close()


@pytest.mark.parametrize("log_mode", ["process", "thread", "memory"], indirect=True)
@pytest.mark.parametrize(("page", "queue"), [(3, 8), (50, 16), (500, 1024)])
async def test_no_gap_and_no_repeat_at_the_seam_under_concurrent_publishing(
    log_mode: str, mode_log: EventLog | None, page: int, queue: int
) -> None:
    # Small pages force many log reads; a small live queue overflows while
    # catching up, which must cost nothing (the log holds those events).
    options = {"replay_page_size": page, "max_queue": queue, "fanout_chunk": 4}
    async with running_bus(mode_log, **options, **mode_options(log_mode)) as bus:
        total = 1200

        async def publisher() -> None:
            for i in range(total):
                bus.publish("message.delta", {"text": str(i)}, session_id=f"ses_{i % 3}")
                if i % 5 == 0:
                    await asyncio.sleep(0)

        task = asyncio.create_task(publisher())
        async with asyncio.timeout(20):
            while bus.last_seq < 300:  # noqa: ASYNC110 - polls a counter the publisher bumps
                await asyncio.sleep(0)
        start_all = bus.last_seq // 2
        start_one = bus.last_session_seq("ses_1") // 3
        # Subscribe mid-stream, while the publisher keeps going, and consume at
        # once: a subscription nobody reads is a slow subscriber.
        everything = await bus.subscribe(after=start_all)
        all_task = asyncio.create_task(take(everything, total - start_all))
        one = await bus.subscribe(session_id="ses_1", after=start_one)
        got_one = await take(one, total // 3 - start_one)
        got_all = await all_task
        await task
        assert cursors(got_all, per_session=False) == list(range(start_all + 1, total + 1))
        assert cursors(got_one, per_session=True) == list(range(start_one + 1, total // 3 + 1))
        assert bus.stats().dropped_subscribers == 0


async def test_counters_survive_a_restart(log_path: Path) -> None:
    log = EventLog.open(log_path)
    async with running_bus(log) as bus:
        publish_round(bus, 8, sessions=2)  # ses_0: 4, ses_1: 4
    log.close()

    log = EventLog.open(log_path)  # a new process would do just this
    try:
        async with running_bus(log) as bus:
            assert (bus.last_seq, bus.last_session_seq("ses_1")) == (8, 4)
            sub = await bus.subscribe(session_id="ses_1", after=0)
            bus.publish("turn.started", {}, session_id="ses_1")
            bus.publish("turn.started", {}, session_id="ses_new")
            got = await take(sub, 5)
            assert cursors(got, per_session=True) == [1, 2, 3, 4, 5]
            assert got[-1].seq == 9
            assert bus.last_session_seq("ses_new") == 1
            # Prune everything; the counters still continue after another restart.
            assert await bus.prune(keep_last=0) == 10
    finally:
        log.close()

    log = EventLog.open(log_path)
    try:
        async with running_bus(log) as bus:
            assert (bus.last_seq, bus.last_session_seq("ses_1")) == (10, 5)
            live = await bus.subscribe(session_id="ses_1", after=5)
            bus.publish("turn.started", {}, session_id="ses_1")
            (record,) = await take(live, 1)
            assert (record.seq, record.session_seq) == (11, 6)
    finally:
        log.close()


@pytest.mark.parametrize("log_mode", ["process", "thread", "memory"], indirect=True)
async def test_cursor_expired_after_prune_names_the_oldest_cursor(
    log_mode: str, mode_log: EventLog | None
) -> None:
    async with running_bus(mode_log, **mode_options(log_mode)) as bus:
        publish_round(bus, 100, sessions=2)
        await bus.flush()
        assert await bus.prune(keep_last=30) == 70
        with pytest.raises(CursorExpired) as caught:
            await bus.subscribe(after=10)
        assert (caught.value.cursor, caught.value.oldest_cursor) == (10, 70)
        assert caught.value.session_id is None
        assert "after=70" in str(caught.value)
        with pytest.raises(CursorExpired) as session_caught:
            await bus.subscribe(session_id="ses_1", after=0)
        assert session_caught.value.oldest_cursor == 35
        assert bus.subscriber_count() == 0
        # The oldest usable cursor works and loses nothing.
        resumed = await bus.subscribe(after=70)
        assert cursors(await take(resumed, 30), per_session=False) == list(range(71, 101))
        session_resumed = await bus.subscribe(session_id="ses_1", after=35)
        got = await take(session_resumed, 15)
        assert cursors(got, per_session=True) == list(range(36, 51))


async def test_prune_during_catch_up_is_reported_not_skipped(log_path: Path) -> None:
    log = EventLog.open(log_path)
    try:
        async with running_bus(log, replay_page_size=10) as bus:
            publish_round(bus, 100)
            await bus.flush()
            sub = await bus.subscribe(after=0)  # first page read, 90 more to go
            first_page = await take(sub, 10)
            assert cursors(first_page, per_session=False) == list(range(1, 11))
            await bus.prune(keep_last=50)
            with pytest.raises(CursorExpired) as caught:
                await take(sub, 1)
            assert (caught.value.cursor, caught.value.oldest_cursor) == (10, 50)
            assert bus.subscriber_count() == 0
            with pytest.raises(CursorExpired):
                await anext(sub)  # it stays ended
    finally:
        log.close()


async def test_without_a_log_only_undelivered_cursors_are_served() -> None:
    async with running_bus(None) as bus:
        publish_round(bus, 9)
        # Nothing delivered yet: after=0 still misses nothing.
        early = await bus.subscribe(session_id="ses_0", after=0)
        await bus.flush()
        assert cursors(await take(early, 3), per_session=True) == [1, 2, 3]
        with pytest.raises(CursorExpired) as caught:
            await bus.subscribe(after=4)
        assert caught.value.oldest_cursor == 9
        current = await bus.subscribe(after=9)
        publish_round(bus, 1)
        assert [r.seq for r in await take(current, 1)] == [10]
        assert await bus.prune(keep_last=0) == 0
