"""The commit path: checkpoints beside the commits, acknowledgements in order."""

from __future__ import annotations

import asyncio
import sqlite3
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

from eventbus import EventBus, EventLog, EventRecord
from eventbus.log import CHECKPOINT_BYTES, StorageFault
from eventbus.log_access import ProcessLogAccess

from .conftest import STEP_TIMEOUT
from .test_log import make_records


def test_commits_never_checkpoint_and_the_checkpointer_does(tmp_path: Path) -> None:
    path = tmp_path / "events.db"
    log = EventLog.open(path)
    try:
        assert log._write.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0
        big = "x" * 4096
        written = 0
        seq = 1
        while written <= 2 * CHECKPOINT_BYTES:
            records = make_records([("s", {"text": big})] * 16, first_seq=seq, start={"s": seq - 1})
            log.append_many(records)
            seq += len(records)
            written += sum(len(r.text) for r in records)
        # The checkpointer thread copies the WAL into the database file by itself.
        deadline = time.monotonic() + 30
        while path.stat().st_size < CHECKPOINT_BYTES:
            assert time.monotonic() < deadline, "no checkpoint ran"
            time.sleep(0.01)
        assert log.count() == seq - 1
    finally:
        log.close()
    with sqlite3.connect(path) as reader:
        assert reader.execute("SELECT COUNT(*) FROM events").fetchone()[0] == seq - 1


async def test_small_and_large_batches_are_delivered_in_order_after_commit(
    tmp_path: Path,
) -> None:
    path = tmp_path / "events.db"
    log = EventLog.open(path)
    reader = sqlite3.connect(path)
    try:
        bus = EventBus(log)
        await bus.start()
        sub = await bus.subscribe()
        for burst in (1, 3, 200, 1, 70, 2):  # one-chunk and multi-chunk batches
            for i in range(burst):
                bus.publish("message.delta", {"text": str(i)}, session_id=f"s{i % 2}")
            await asyncio.sleep(0)
        expected = bus.last_seq
        seen = 0
        async with asyncio.timeout(STEP_TIMEOUT):
            async for record in sub:
                seen += 1
                assert record.seq == seen
                row = reader.execute("SELECT json FROM events WHERE seq = ?", (record.seq,))
                assert row.fetchone() == (record.text,)
                if seen == expected:
                    break
        await bus.close()
        assert bus.stats().committed == expected
    finally:
        reader.close()
        log.close()


async def test_an_idle_bus_hands_the_first_event_to_the_log_from_publish(tmp_path: Path) -> None:
    """Send-ahead: nothing waits for the writer task to wake; one batch in flight."""
    log = EventLog.open(tmp_path / "events.db")
    reader = sqlite3.connect(tmp_path / "events.db")
    try:
        bus = EventBus(log)
        await bus.start()
        sub = await bus.subscribe(session_id="s")
        bus.publish("message.delta", {"text": "first"}, session_id="s")
        # Sent before this task yielded even once (the writer never ran).
        assert bus.stats().pending == 0
        # While it is in flight, later events queue for the next group commit.
        bus.publish("message.delta", {"text": "second"}, session_id="s")
        bus.publish("message.delta", {"text": "third"}, session_id="s")
        assert bus.stats().pending == 2
        got = []
        async with asyncio.timeout(STEP_TIMEOUT):
            for _ in range(3):
                record = await anext(sub)
                # Durable before visible, whichever path sent it.
                row = reader.execute("SELECT json FROM events WHERE seq = ?", (record.seq,))
                assert row.fetchone() == (record.text,)
                got.append(record.session_seq)
        assert got == [1, 2, 3]
        await bus.close()
        assert bus.stats().batches == 2
    finally:
        reader.close()
        log.close()


class _FlakySender(ProcessLogAccess):
    """A process access whose first ``faults`` commits fail with a storage fault
    (for real, the child answers that way on a full disk); the rest commit into
    an in-process log, answered on a later loop iteration as the pipe would."""

    def __init__(self, log: EventLog, faults: int) -> None:
        super().__init__("unused-path")
        self.log = log
        self.faults = faults
        self.sent: list[list[int]] = []

    async def start(self) -> tuple[int, dict[str, int]]:
        return 0, {}

    async def close(self) -> None:
        return None

    def abort(self) -> None:
        return None

    def send_append(
        self, records: list[EventRecord], on_commit: Callable[[], None]
    ) -> asyncio.Future[tuple[bytes, bytes]]:
        self.sent.append([r.seq for r in records])
        future: asyncio.Future[tuple[bytes, bytes]] = asyncio.get_running_loop().create_future()

        def reply() -> None:
            if self.faults:
                self.faults -= 1
                future.set_exception(StorageFault("disk full", cause="disk full (test)"))
                return
            self.log.append_many(records)
            on_commit()
            future.set_result((b"K", b""))

        asyncio.get_running_loop().call_soon(reply)
        return future

    async def wait_append(self, sent: asyncio.Future[tuple[bytes, bytes]]) -> None:
        await sent

    async def append(
        self, records: list[EventRecord], on_commit: Callable[[], None] | None = None
    ) -> None:
        await self.wait_append(self.send_append(records, on_commit or (lambda: None)))


async def test_a_batch_sent_ahead_rides_out_a_storage_fault_in_order(tmp_path: Path) -> None:
    log = EventLog.open(tmp_path / "events.db")
    try:
        bus = EventBus(log, log_access="thread")
        # The bus sends ahead through any ProcessLogAccess: give it a flaky one.
        flaky = _FlakySender(log, faults=2)
        bus._access = bus._sender = flaky
        await bus.start()
        sub = await bus.subscribe(session_id="s")
        bus.publish("message.delta", {"text": "a"}, session_id="s")  # sent ahead, fails
        bus.publish("message.delta", {"text": "b"}, session_id="s")
        async with asyncio.timeout(STEP_TIMEOUT):
            for _ in range(1000):  # the first reply fails a loop iteration later
                if bus.fault is not None:
                    break
                await asyncio.sleep(0)
            assert bus.fault is not None
            bus.publish("message.delta", {"text": "c"}, session_id="s")
            # Nothing is sent ahead while the fault is retried, nothing delivered.
            assert sub.queued == 0
            await bus.flush()
            got = [(await anext(sub)).session_seq for _ in range(3)]
        assert got == [1, 2, 3] and bus.fault is None
        # The failed batch was retried alone, twice, before anything behind it.
        assert flaky.sent[:3] == [[1], [1], [1]]
        assert [seq for batch in flaky.sent[3:] for seq in batch] == [2, 3]
        assert [r.seq for r in log.replay(after_seq=0, limit=10)] == [1, 2, 3]
        await bus.close()
    finally:
        log.close()


def test_a_record_holds_its_envelope_once() -> None:
    """Each queued event costs its size once, not bytes plus decoded text (the
    regression that failed tests/reliability/test_slow_consumer.py)."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        # As the bus makes them: orjson's bytes, one record each.
        encoded = [(b'{"seq":%d,"data":"' % i) + b"y" * 4000 + b'"}' for i in range(500)]
        size = sum(len(e) for e in encoded)
        records = [
            EventRecord(i, i, "s", "message.delta", None, "ts", e) for i, e in enumerate(encoded)
        ]
        for record in records:
            assert record.text  # what every subscriber reads
        del encoded  # the publisher's bytes are gone once the batch went to the log
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert held < 1.3 * size, (held, size)
    assert records[7].encoded.decode() == records[7].text and records[7].size == len(
        records[7].text
    )


async def test_a_sent_ahead_batch_too_large_to_fan_out_at_once_goes_to_the_writer(
    tmp_path: Path,
) -> None:
    log = EventLog.open(tmp_path / "events.db")
    try:
        bus = EventBus(log, fanout_chunk=4, max_queue=8)
        await bus.start()
        sub = await bus.subscribe(session_id="s")
        got: list[int] = []
        async with asyncio.timeout(STEP_TIMEOUT):
            for burst in range(3):
                # The first event leaves at once; the other 11 follow as one batch,
                # sent from the first one's reply callback: three chunks of 4.
                for i in range(12):
                    bus.publish("message.delta", {"text": f"{burst}.{i}"}, session_id="s")
                for _ in range(12):
                    got.append((await anext(sub)).session_seq)
        assert got == list(range(1, 37))
        await bus.close()
        stats = bus.stats()
        assert stats.committed == 36 and stats.dropped_subscribers == 0
        assert stats.largest_batch == 11
    finally:
        log.close()
