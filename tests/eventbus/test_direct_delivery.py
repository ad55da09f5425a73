"""Direct delivery: while the consumer waits with nothing queued, the bus hands
live records to the subscription's sink in the publisher's call."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from eventbus import EventLog, EventRecord, Subscription

from .conftest import STEP_TIMEOUT, mode_options, running_bus


async def _parked(sub: Subscription) -> asyncio.Task[EventRecord]:
    """A consumer waiting for the next record (bounded wait until it waits)."""
    task = asyncio.create_task(anext(sub))
    async with asyncio.timeout(STEP_TIMEOUT):
        while sub._waiter is None and not task.done():  # noqa: ASYNC110 (its own state)
            await asyncio.sleep(0)
    return task


@pytest.mark.parametrize("log_mode", ["process", "memory", "none"], indirect=True)
async def test_a_sink_takes_each_record_once_in_order_and_declined_ones_are_yielded(
    log_mode: str, mode_log: EventLog | None, log_path: Path
) -> None:
    async with running_bus(mode_log, **mode_options(log_mode)) as bus:
        sub = await bus.subscribe(session_id="s")
        taken: list[int] = []
        declined = {4, 9, 10}

        def sink(record: EventRecord) -> bool:
            if record.session_seq in declined:
                return False
            taken.append(record.session_seq)
            return True

        sub.deliver_directly(sink)
        yielded: list[int] = []

        async def consume() -> None:
            async for record in sub:
                yielded.append(record.session_seq)

        consumer = asyncio.create_task(consume())
        async with asyncio.timeout(STEP_TIMEOUT):
            for i in range(1, 16):
                bus.publish("message.delta", {"text": str(i)}, session_id="s")
                for _ in range(3):  # the consumer takes what was queued, then waits
                    await asyncio.sleep(0)
            while sub.last_cursor != 15:  # noqa: ASYNC110 (the subscription's own state)
                await asyncio.sleep(0.001)
        consumer.cancel()
        # Every record exactly once, each way in order; a declined record and
        # whatever was published while it waited went through the queue.
        assert sorted(taken + yielded) == list(range(1, 16))
        assert taken == sorted(taken) and yielded == sorted(yielded)
        assert declined <= set(yielded) and taken
        assert sub.last_cursor == 15


async def test_nothing_goes_to_the_sink_while_records_wait_in_the_queue() -> None:
    async with running_bus(None) as bus:
        sub = await bus.subscribe(session_id="s")
        seen: list[int] = []

        def sink(record: EventRecord) -> bool:
            seen.append(record.session_seq)
            return True

        sub.deliver_directly(sink)
        # The consumer is not waiting: both are queued, none is handed over.
        bus.publish("message.delta", {"text": "a"}, session_id="s")
        bus.publish("message.delta", {"text": "b"}, session_id="s")
        await bus.flush()
        assert seen == [] and sub.queued == 2
        assert [(await anext(sub)).session_seq for _ in range(2)] == [1, 2]
        waiting = await _parked(sub)
        bus.publish("message.delta", {"text": "c"}, session_id="s")
        await bus.flush()
        assert seen == [3] and not waiting.done()
        waiting.cancel()
