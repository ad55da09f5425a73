"""A subscriber that falls behind is cut off alone and resumes without a gap."""

from __future__ import annotations

import asyncio

import pytest

from eventbus import EventLog, EventRecord, SubscriberTooSlow, Subscription

from .conftest import STEP_TIMEOUT, cursors, mode_options, running_bus, take


@pytest.mark.parametrize("log_mode", ["process", "thread", "memory"], indirect=True)
async def test_slow_subscriber_is_cut_off_and_resumes_exactly(
    log_mode: str, mode_log: EventLog | None
) -> None:
    total = 600
    options = {"max_queue": 32, "fanout_chunk": 8}
    async with running_bus(mode_log, **options, **mode_options(log_mode)) as bus:
        fast = [await bus.subscribe() for _ in range(10)]
        slow = await bus.subscribe()
        fast_tasks = [asyncio.create_task(take(sub, total)) for sub in fast]

        for i in range(total):
            bus.publish("message.delta", {"text": str(i)}, session_id=f"ses_{i % 4}")
            if i % 5 == 0:
                await asyncio.sleep(0)  # the publisher never waits for anyone
        await bus.flush()

        # Every fast subscriber got everything, in order.
        for records in await asyncio.gather(*fast_tasks):
            assert cursors(records, per_session=False) == list(range(1, total + 1))
        stats = bus.stats()
        assert stats.dropped_subscribers == 1
        assert stats.subscribers == 10

        # The slow one gets what was queued before the cut, then the error.
        before: list[EventRecord] = []
        with pytest.raises(SubscriberTooSlow) as caught:
            async with asyncio.timeout(STEP_TIMEOUT):
                async for record in slow:
                    before.append(record)
        assert 0 < len(before) <= 32
        assert cursors(before, per_session=False) == list(range(1, len(before) + 1))
        assert caught.value.last_cursor == before[-1].seq == slow.last_cursor
        assert f"after={before[-1].seq}" in str(caught.value)

        # Resuming from the cursor in the error yields exactly the rest.
        resumed = await bus.subscribe(after=caught.value.last_cursor)
        rest = await take(resumed, total - len(before))
        assert cursors(before + rest, per_session=False) == list(range(1, total + 1))
        bus.publish("turn.started", {}, session_id="ses_0")
        assert [r.seq for r in await take(resumed, 1)] == [total + 1]


async def test_session_subscriber_is_cut_off_without_a_log() -> None:
    async with running_bus(None, max_queue=16, fanout_chunk=4) as bus:
        slow = await bus.subscribe(session_id="ses_a")
        other = await bus.subscribe(session_id="ses_b")
        for i in range(40):
            bus.publish("message.delta", {"text": str(i)}, session_id="ses_a")
        bus.publish("turn.started", {}, session_id="ses_b")
        await bus.flush()
        got = await take(other, 1)
        assert got[0].session_id == "ses_b"
        drained = []
        with pytest.raises(SubscriberTooSlow) as caught:
            async with asyncio.timeout(STEP_TIMEOUT):
                async for record in slow:
                    drained.append(record.session_seq)
        assert drained == list(range(1, 17))
        assert caught.value.last_cursor == 16 and caught.value.session_id == "ses_a"
        # Cut by count: the message says so.
        assert caught.value.max_bytes is None
        assert "more than 16 events behind (the queue's event count limit)" in str(caught.value)
        assert bus.subscriber_count("ses_a") == 0 and bus.subscriber_count("ses_b") == 1


async def test_a_stuck_consumer_never_blocks_publishing(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    log = EventLog.open(tmp_path_factory.mktemp("stuck") / "events.db")
    try:
        async with running_bus(log, max_queue=8, fanout_chunk=8) as bus:
            stuck: Subscription = await bus.subscribe()
            for i in range(5000):
                bus.publish("message.delta", {"text": str(i)}, session_id="s")
            await bus.flush()  # completes although nobody reads `stuck`
            assert stuck.closed
            assert bus.stats().committed == 5000
            assert log.count() == 5000
    finally:
        log.close()


@pytest.mark.parametrize("log_mode", ["process", "memory"], indirect=True)
async def test_a_resuming_subscriber_is_not_cut_off_before_it_catches_up(
    log_mode: str, mode_log: EventLog | None
) -> None:
    # Between subscribe() and its first read, a resuming client may fall far
    # behind; the log holds everything, so that costs a re-read, not a cut-off.
    async with running_bus(mode_log, max_queue=16, fanout_chunk=4) as bus:
        bus.publish("turn.started", {}, session_id="s")
        await bus.flush()
        resuming = await bus.subscribe(after=1)
        live_only = await bus.subscribe()
        for i in range(200):
            bus.publish("message.delta", {"text": str(i)}, session_id="s")
        await bus.flush()
        assert resuming.catching_up and live_only.closed
        got = await take(resuming, 200)
        assert cursors(got, per_session=False) == list(range(2, 202))
        # Caught up once it waits for the next event: from then on it is an
        # ordinary live subscriber.
        waiting = asyncio.create_task(anext(resuming))
        async with asyncio.timeout(STEP_TIMEOUT):
            while not waiting.done() and resuming.catching_up:  # noqa: ASYNC110 (a flag, no event)
                await asyncio.sleep(0)
        bus.publish("turn.started", {}, session_id="s")
        assert (await waiting).seq == 202
        assert not resuming.catching_up
        assert bus.stats().dropped_subscribers == 1  # only the live-only one
        with pytest.raises(SubscriberTooSlow):
            await take(live_only, 17)


@pytest.mark.parametrize("log_mode", ["process", "memory", "none"], indirect=True)
async def test_a_subscriber_is_cut_off_by_bytes_before_its_count_is_reached(
    log_mode: str, mode_log: EventLog | None
) -> None:
    # A few large events cost more memory than many small ones: the byte budget
    # cuts the subscriber although its queue holds far fewer than max_queue events.
    budget = 256 * 1024
    big = "x" * 50_000
    async with running_bus(mode_log, max_queue=1024, fanout_chunk=4, max_queue_bytes=budget) as bus:
        slow = await bus.subscribe()
        small = await bus.subscribe(max_queue_bytes=64 * 1024 * 1024)
        for i in range(40):
            bus.publish(
                "tool.output_delta",
                {"tool_use_id": "t", "stream": "stdout", "text": big},
                session_id=f"ses_{i % 2}",
            )
        await bus.flush()
        assert slow.closed and not small.closed
        assert bus.stats().dropped_subscribers == 1
        got: list[EventRecord] = []
        with pytest.raises(SubscriberTooSlow) as caught:
            async with asyncio.timeout(STEP_TIMEOUT):
                async for record in slow:
                    got.append(record)
        # What it held never went past the budget, and it was far from 1024 events.
        assert 0 < len(got) < 10
        assert sum(len(r.text) for r in got) <= budget
        assert caught.value.last_cursor == got[-1].seq
        # The message names the budget that was exceeded: bytes, not events.
        assert caught.value.max_bytes == budget
        assert f"more than {budget} bytes of events behind" in str(caught.value)
        assert "byte limit" in str(caught.value) and "count limit" not in str(caught.value)
        assert slow.queued_bytes == 0
        # The other one, with room enough, has all of it.
        assert len(await take(small, 40)) == 40
        if mode_log is not None:
            # Resuming from the cursor loses nothing.
            resumed = await bus.subscribe(after=caught.value.last_cursor)
            rest = await take(resumed, 40 - len(got))
            assert cursors(got + rest, per_session=False) == list(range(1, 41))


async def test_a_filtered_subscriber_queues_only_what_it_may_see() -> None:
    async with running_bus(None, max_queue=16, fanout_chunk=4) as bus:
        mine = {"ses_mine"}
        sub = await bus.subscribe(visible=mine.__contains__, visible_sessions=lambda: list(mine))
        # 200 events of a session it may not see take no room in its queue.
        for i in range(200):
            bus.publish("message.delta", {"text": str(i)}, session_id="ses_other")
        bus.publish("turn.started", {}, session_id="ses_mine")
        await bus.flush()
        assert not sub.closed and sub.queued == 1
        (record,) = await take(sub, 1)
        assert (record.session_id, record.seq) == ("ses_mine", 201)
        assert sub.last_cursor == 201


@pytest.mark.parametrize("log_mode", ["process", "none"], indirect=True)
async def test_a_reader_that_keeps_up_is_not_cut_off_by_a_burst_of_large_events(
    log_mode: str, mode_log: EventLog | None
) -> None:
    # One batch of events, each far larger than a tenth of the byte budget: the
    # bus hands them over a chunk (about a MiB) at a time and lets the reader
    # drain in between, so a reader that keeps up is never cut off.
    budget = 256 * 1024
    async with running_bus(mode_log, max_queue_bytes=budget) as bus:
        reader = await bus.subscribe()
        stuck = await bus.subscribe()
        task = asyncio.create_task(take(reader, 60))
        for i in range(60):
            bus.publish("message.delta", {"text": f"{i:02d}" + "z" * 100_000}, session_id="s")
        await bus.flush()
        got = await task
        assert cursors(got, per_session=False) == list(range(1, 61))
        assert not reader.closed and stuck.closed  # the one that never read was cut
        assert bus.stats().dropped_subscribers == 1
