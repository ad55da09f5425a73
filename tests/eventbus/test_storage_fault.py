"""Storage faults in the log: the bus degrades, retries and resumes by itself.

The fault is SQLite's own "database or disk is full" (SQLITE_FULL), produced
for real by capping the write connection's ``max_page_count`` at the file's
current size; lifting the cap is "space freed". The log is a file written
from the bus's worker thread, so the test can reach that connection.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from eventbus import EventBus, EventLog
from eventbus.errors import BusClosed
from eventbus.log import StorageFault

BIG = "x" * 8000  # a few pages per event: a capped file fills at once


def cap(log: EventLog, pages: int | None) -> None:
    """Cap the log file at its current size (``None``), or at ``pages``."""
    with log._write_lock:
        conn = log._write
        if pages is None:
            pages = int(conn.execute("PRAGMA page_count").fetchone()[0])
        conn.execute(f"PRAGMA max_page_count = {pages}")


def uncap(log: EventLog) -> None:
    cap(log, 1 << 30)


async def wait_for(predicate: Callable[[], bool], within: float = 60.0) -> None:
    """Poll (bounded): the bus's state changes in its writer task and thread."""
    async with asyncio.timeout(within):
        while True:
            if predicate():
                return
            await asyncio.sleep(0.01)


async def test_a_full_log_degrades_the_bus_and_it_resumes_when_space_returns(
    tmp_path: Path,
) -> None:
    log = EventLog.open(tmp_path / "events.sqlite3")
    failures: list[BaseException] = []
    bus = EventBus(log, log_access="thread", on_failure=failures.append)
    await bus.start()
    try:
        sub = await bus.subscribe(session_id="s")
        for i in range(5):
            bus.publish("session.created", {"workspace": "/w", "i": i}, session_id="s")
        await bus.flush()
        acknowledged = [(await anext(sub)).seq for _ in range(5)]

        cap(log, None)
        for i in range(20):
            bus.publish("message.delta", {"text": BIG, "i": i}, session_id="s", turn_id="t")
        await wait_for(lambda: bus.fault is not None)
        assert "disk full" in (bus.fault or "")
        assert bus.running and bus.failure is None and not failures
        # Nothing of the failed batch is visible, and publishing still works.
        flush = asyncio.create_task(bus.flush())
        await asyncio.sleep(0.3)
        assert not flush.done()
        assert sub.queued == 0
        bus.publish("message.delta", {"text": "later", "i": 99}, session_id="s", turn_id="t")

        uncap(log)
        await asyncio.wait_for(flush, 10)
        await bus.flush()
        assert bus.fault is None
        got = [await asyncio.wait_for(anext(sub), 5) for _ in range(21)]
        assert [e.session_seq for e in got] == list(range(6, 27))
        # Everything is in the file, once, in order, the acknowledged events too.
        records = log.replay_session("s", limit=100)
        assert [r.session_seq for r in records] == list(range(1, 27))
        assert [r.seq for r in records[:5]] == acknowledged
    finally:
        await bus.close()
        log.close()


async def test_the_bus_gives_up_when_held_events_pass_the_bound(tmp_path: Path) -> None:
    """Where it cannot continue, it stops for good and tells its owner."""
    log = EventLog.open(tmp_path / "events.sqlite3")
    failures: list[BaseException] = []
    bus = EventBus(log, log_access="thread", max_pending_bytes=100_000, on_failure=failures.append)
    await bus.start()
    try:
        bus.publish("session.created", {"workspace": "/w"}, session_id="s")
        await bus.flush()
        cap(log, None)
        for i in range(40):  # about 320 kB: over the bound
            bus.publish("message.delta", {"text": BIG, "i": i}, session_id="s", turn_id="t")
        await wait_for(lambda: bool(failures))
        assert isinstance(failures[0], StorageFault)
        assert "giving up" in str(failures[0]) and "disk full" in str(failures[0])
        assert not bus.running and bus.failure is failures[0]
        with pytest.raises(BusClosed):
            bus.publish("message.delta", {"text": "x"}, session_id="s")
        # What was acknowledged before the fault is still there.
        uncap(log)
        assert [r.session_seq for r in log.replay_session("s", limit=10)] == [1]
    finally:
        await bus.close()
        log.close()


def test_a_failed_write_leaves_the_log_usable(tmp_path: Path) -> None:
    """The log itself: a batch that fails for lack of space writes nothing,
    leaves no transaction open, and the same batch succeeds on retry."""
    from eventbus.record import EventRecord

    def record(seq: int) -> EventRecord:
        text = (
            f'{{"seq":{seq},"session_seq":{seq},"id":"e{seq}","type":"message.delta",'
            f'"session_id":"s","turn_id":null,"ts":"2026-01-01T00:00:00Z",'
            f'"data":{{"text":"{BIG}"}}}}'
        )
        return EventRecord(seq, seq, "s", "message.delta", None, "2026-01-01T00:00:00Z", text)

    with EventLog.open(tmp_path / "events.sqlite3") as log:
        log.append_many([record(1)])
        cap(log, None)
        batch = [record(i) for i in range(2, 12)]
        with pytest.raises(StorageFault) as caught:
            log.append_many(batch)
        assert "disk full" in caught.value.cause
        assert not log._write.in_transaction
        assert log.last_seq() == 1
        uncap(log)
        log.append_many(batch)
        assert [r.seq for r in log.replay(limit=100)] == list(range(1, 12))
