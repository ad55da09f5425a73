"""The commit path: checkpoints beside the commits, acknowledgements in order."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest

from eventbus import BusClosed, EventBus, EventLog, EventRecord
from eventbus.errors import EventLogError
from eventbus.log import CHECKPOINT_BYTES, OutOfSequence, StorageFault
from eventbus.log_access import ProcessLogAccess
from eventbus.ring import Ring

from .conftest import STEP_TIMEOUT, take
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


async def test_small_and_large_bursts_are_delivered_in_order_and_logged(
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
        received = await take(sub, expected)
        assert [r.seq for r in received] == list(range(1, expected + 1))
        await bus.flush()  # committed: SQLite holds each, as delivered
        for record in received:
            row = reader.execute("SELECT json FROM events WHERE seq = ?", (record.seq,))
            assert row.fetchone() == (record.text,)
        await bus.close()
        assert bus.stats().committed == expected
    finally:
        reader.close()
        log.close()


async def test_events_are_seen_while_the_log_process_is_frozen_and_survive_its_death(
    tmp_path: Path,
) -> None:
    """Visible once in the ring: a stopped log process delays nothing, and what
    was seen survives killing it (the next start commits it from the ring)."""
    path = tmp_path / "events.db"
    log = EventLog.open(path)
    try:
        bus = EventBus(log)
        await bus.start()
        sub = await bus.subscribe(session_id="s")
        pid = bus.log_process_pid
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)  # the child this test's bus started
        try:
            for i in range(50):
                bus.publish("message.delta", {"text": f"seen {i}"}, session_id="s")
            seen = [r.text for r in await take(sub, 50)]
            assert log.count() == 0  # SQLite has none of them yet
        finally:
            os.kill(pid, signal.SIGKILL)  # (a stopped process dies of it too)
        with pytest.raises(BusClosed):
            await bus.flush()
        await bus.close()
        assert log.count() == 0
        # A restart's log process commits them from the ring before anything reads.
        again = EventBus(log)
        await again.start()
        replay = await again.subscribe(session_id="s", after=0)
        assert [r.text for r in await take(replay, 50)] == seen
        again.publish("message.delta", {"text": "next"}, session_id="s")
        assert (await anext(replay)).session_seq == 51
        await again.close()
        assert log.count() == 51
    finally:
        log.close()


async def test_a_full_ring_shows_events_once_committed_in_order(tmp_path: Path) -> None:
    """Events that do not fit in the ring wait for their commit; order holds."""
    log = EventLog.open(tmp_path / "events.db")
    try:
        bus = EventBus(log, ring_bytes=64 * 1024)
        await bus.start()
        sub = await bus.subscribe(session_id="s")
        big = "x" * 6000
        for i in range(40):  # ~240 KB: more than the ring holds at once
            bus.publish("message.delta", {"text": big, "i": i}, session_id="s")
        got = [r.session_seq for r in await take(sub, 40)]
        assert got == list(range(1, 41))
        # One larger than a quarter of the ring never goes into it.
        bus.publish("message.delta", {"text": "y" * 20_000}, session_id="s")
        assert (await anext(sub)).session_seq == 41
        await bus.close()
        assert log.count() == 41
    finally:
        log.close()


async def test_events_published_together_are_committed_together_unasked(tmp_path: Path) -> None:
    """Nobody flushes: the bus sends what a publishing stretch left by itself
    (a moment later, see SEND_DELAY_S), as one group commit."""
    log = EventLog.open(tmp_path / "events.db")
    try:
        bus = EventBus(log)
        await bus.start()
        sub = await bus.subscribe(session_id="s")
        for i in range(5):
            bus.publish("message.delta", {"text": str(i)}, session_id="s")
        # Visible at once (the ring), before any commit.
        assert [(await anext(sub)).session_seq for _ in range(5)] == [1, 2, 3, 4, 5]
        async with asyncio.timeout(STEP_TIMEOUT):
            # Polled: waiting on the bus (flush) would send them, which is what is tested.
            while bus.stats().committed < 5:  # noqa: ASYNC110
                await asyncio.sleep(0.001)
        assert bus.stats().batches == 1
        assert log.count() == 5
        await bus.close()
    finally:
        log.close()


async def test_sending_ahead_keeps_only_the_ring_marks_of_unsent_events(tmp_path: Path) -> None:
    """A loop that never yields reads no reply, so every batch is sent ahead
    from ``publish``: what the bus keeps per event must not outlive the send
    (each send used to walk every ring mark since the last reply, so a long
    burst grew quadratic), and the ring positions sent must still add up."""
    log = EventLog.open(tmp_path / "events.db")
    try:
        bus = EventBus(log)
        await bus.start()
        total = 6 * 256 + 17  # several sends ahead, one partial group left
        for i in range(total):
            bus.publish("message.delta", {"text": "x" * 64, "i": i}, session_id="s")
            # Only what waits to be sent keeps a mark: never more marks than that.
            assert len(bus._commit.ring_marks) <= len(bus._commit.pending)
        assert bus.stats().published == total
        await bus.flush()
        assert log.count() == total
        # The ring's header says SQLite holds everything written to it.
        ring = bus._commit.ring
        assert ring is not None and ring.ingested == ring.position
        await bus.close()
    finally:
        log.close()


async def test_each_batch_sent_releases_the_ring_up_to_its_own_last_event(
    tmp_path: Path,
) -> None:
    """Batches smaller than what is pending (``max_batch``) are sent while
    later events are already in the ring: each batch must carry the ring
    position right after its own last event (not 0, not a later event's:
    the log process would let the server overwrite what SQLite lacks), and
    the marks of the events still pending must survive its send."""
    log = EventLog.open(tmp_path / "events.db")
    try:
        bus = EventBus(log, max_batch=100)
        await bus.start()
        sender = bus._commit.sender
        ring = bus._commit.ring
        assert sender is not None and ring is not None
        ends: dict[int, int] = {}
        sent: list[tuple[int, int]] = []
        send_append = sender.send_append

        def recording(
            records: list[EventRecord],
            on_reply: Callable[[BaseException | None], None],
            ring_end: int = 0,
        ) -> None:
            sent.append((records[-1].seq, ring_end))
            send_append(records, on_reply, ring_end)

        sender.send_append = recording  # type: ignore[method-assign]
        total = 3 * 256 + 41
        for i in range(total):
            bus.publish("message.delta", {"text": "x" * 64, "i": i}, session_id="s")
            ends[bus.last_seq] = ring.position  # copied into the ring at publish
            assert len(bus._commit.ring_marks) <= len(bus._commit.pending)
        await bus.flush()
        assert log.count() == total
        assert len(sent) >= total // 100
        assert any(last < bus.last_seq - 100 for last, _ in sent), "no partial batch was sent"
        for last, ring_end in sent:
            assert ring_end == ends[last], (last, ring_end)
        assert ring.ingested == ring.position
        await bus.close()
    finally:
        log.close()


async def test_the_log_process_refuses_a_batch_that_would_leave_a_hole(tmp_path: Path) -> None:
    """Appends sent back to back through the real child: each is committed only
    if it continues the log, so one sent behind a failed one fails too."""
    access = ProcessLogAccess(str(tmp_path / "events.db"))
    await access.start()
    try:
        replies: list[tuple[str, BaseException | None]] = []
        batches = {
            "first": make_records([("s", {"text": "a"})] * 2),
            # Seqs 5-6: as if the batch with 3-4 had failed before it.
            "behind a hole": make_records([("s", {"text": "b"})] * 2, first_seq=5),
            "next": make_records([("s", {"text": "c"})] * 2, first_seq=3, start={"s": 2}),
        }

        def on_reply(name: str) -> Callable[[BaseException | None], None]:
            return lambda error: replies.append((name, error))

        for name, records in batches.items():
            access.send_append(records, on_reply(name))
        async with asyncio.timeout(STEP_TIMEOUT):
            while len(replies) < 3:  # noqa: ASYNC110 (the callbacks are the API under test)
                await asyncio.sleep(0.01)
        assert [name for name, _ in replies] == list(batches)  # in the order sent
        assert replies[0][1] is None and replies[2][1] is None
        refused = replies[1][1]
        assert isinstance(refused, OutOfSequence) and "earlier batch is missing" in str(refused)
        pages = await access.read_page(None, 0, 10)
        assert [r.seq for r in pages] == [1, 2, 3, 4]
    finally:
        await access.close()


class _FlakySender(ProcessLogAccess):
    """A process access whose first ``faults`` appends of the batch holding seq 1
    fail with a storage fault (for real, the child answers that way on a full
    disk); the rest go to an
    in-process log, which refuses what does not continue it as the child does,
    answered on a later loop iteration as the pipe would."""

    def __init__(self, log: EventLog, faults: int, ring: Ring) -> None:
        super().__init__("unused-path")
        self.log = log
        self.faults = faults
        self.sent: list[list[int]] = []
        self.ring = ring

    async def start(self) -> tuple[int, dict[str, int]]:
        return 0, {}

    async def close(self) -> None:
        return None

    def abort(self) -> None:
        return None

    @property
    def unsent_bytes(self) -> int:
        return 0

    def _outcome(self, records: list[EventRecord]) -> BaseException | None:
        self.sent.append([r.seq for r in records])
        if self.faults and records[0].seq == 1:
            self.faults -= 1
            return StorageFault("disk full", cause="disk full (test)")
        try:
            self.log.append_many(records)
        except EventLogError as exc:
            return exc
        return None

    def send_append(
        self,
        records: list[EventRecord],
        on_reply: Callable[[BaseException | None], None],
        ring_end: int = 0,
    ) -> None:
        asyncio.get_running_loop().call_soon(lambda: on_reply(self._outcome(records)))

    async def append(self, records: list[EventRecord], ring_end: int = 0) -> None:
        await asyncio.sleep(0)
        error = self._outcome(records)
        if error is not None:
            raise error


async def test_a_failed_batch_is_retried_before_the_ones_sent_behind_it(tmp_path: Path) -> None:
    log = EventLog.open(tmp_path / "events.db")
    try:
        bus = EventBus(log, log_access="thread")
        # The bus sends ahead through any ProcessLogAccess: give it a flaky one.
        ring = Ring.open(str(tmp_path / "events.ring"), log_inode=1, capacity=64 * 1024)
        flaky = _FlakySender(log, faults=2, ring=ring)
        bus._commit.access = bus._commit.sender = flaky
        flaky.on_lost = bus._commit._log_lost
        await bus.start()
        sub = await bus.subscribe(session_id="s")
        # Each sent at once, as a replay read sends what is pending (a publish
        # sends SEND_DELAY_S later): "a" fails, "b" is sent behind it.
        bus.publish("message.delta", {"text": "a"}, session_id="s")
        bus._commit.send_ahead()
        bus.publish("message.delta", {"text": "b"}, session_id="s")
        bus._commit.send_ahead()
        async with asyncio.timeout(STEP_TIMEOUT):
            for _ in range(1000):  # the first reply fails a loop iteration later
                if bus.fault is not None:
                    break
                await asyncio.sleep(0)
            assert bus.fault is not None
            bus.publish("message.delta", {"text": "c"}, session_id="s")
            # Nothing is sent while the fault is retried; all are seen (in the ring).
            sent_during_fault = len(flaky.sent)
            got = [(await anext(sub)).session_seq for _ in range(3)]
            assert got == [1, 2, 3]
            await bus.flush()
        assert bus.fault is None
        # Both were sent at once; the one behind the failure was refused (no
        # hole), and sent again only once the failed one was in, then "c".
        assert flaky.sent == [[1], [2], [1], [1], [2], [3]]
        assert sent_during_fault <= 4
        assert [r.seq for r in log.replay(after_seq=0, limit=10)] == [1, 2, 3]
        await bus.close()
        ring.close()
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


async def test_a_full_subscriber_queue_makes_later_events_wait_in_order(
    tmp_path: Path,
) -> None:
    """Events that cannot be fanned out at publish (a queue is full) wait, and
    the writer fans them out with yields; nothing overtakes, nobody is cut off."""
    log = EventLog.open(tmp_path / "events.db")
    try:
        bus = EventBus(log, fanout_chunk=4, max_queue=8)
        await bus.start()
        sub = await bus.subscribe(session_id="s")
        got: list[int] = []
        async with asyncio.timeout(STEP_TIMEOUT):
            for n in range(3):
                for i in range(20):  # more than the subscriber's queue holds
                    bus.publish("message.delta", {"text": f"{n}.{i}"}, session_id="s")
                for _ in range(20):
                    got.append((await anext(sub)).session_seq)
        assert got == list(range(1, 61))
        await bus.close()
        stats = bus.stats()
        assert stats.committed == 60 and stats.dropped_subscribers == 0
    finally:
        log.close()
