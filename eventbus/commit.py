"""The commit side of the bus: sequence numbers, the event ring, the log.

``CommitPath.append`` assigns ``seq``/``session_seq`` in call order, encodes
the envelope once and queues the record for the log, which commits batches
off the event loop (one transaction for many events; see eventbus.log_access
for where). It decides when an event becomes *visible* and hands visible
events to delivery (eventbus.delivery) in ``seq`` order:

- with the log's process, an event is visible once copied into the event
  ring (eventbus.ring: a crash of either process keeps it, and the log
  process commits it on its next start), or once committed if the ring had
  no room; it is sent to the process in batches (``send_ahead``) whose
  replies come back in order in the pipe's read callback (``_on_reply``);
- with a log in a thread, or none, the writer task (``run``) commits a batch
  and then fans it out.

Three contexts run this code: the publisher's call (``append``), the pipe's
read callback (``_on_reply``) and the writer task (``run``, which retries a
failed append and fans out what could not go at once). The containers they
share, in ``seq`` order: ``settle`` (batches the writer must finish) before
``inflight`` (sent, no reply yet) before ``pending`` (not sent); ``unseen``
holds the published events not visible yet. eventbus.bus states the
invariants between them and checks them in debug mode.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from functools import partial
from typing import Any

from eventbus.delivery import Fanout, InvariantBroken, Progress, encoded_size
from eventbus.encoding import EnvelopeEncoder, UtcClock
from eventbus.errors import BusClosed, EventLogError, EventNotSerializable
from eventbus.log import LogBehind, OutOfSequence, StorageFault
from eventbus.log_access import LogAccess, ProcessLogAccess
from eventbus.record import EventRecord
from eventbus.ring import Ring
from protocol.payloads import Payload

# The commit path to SQLite (see CommitPath.send_ahead): an event published
# while no batch is in flight to the log process leaves SEND_DELAY_S later
# (at once if an event waits for its commit to become visible: the ring was
# full); later ones gather into one group commit, sent by the next reply or
# once GROUP_SEND of them wait. Nothing more is sent while the child's stdin
# pipe holds MAX_UNSENT_BYTES it could not take yet.
#
# Why wait at all: with the ring, an event is visible before it is committed,
# so the commit is on nobody's path, but a send wakes the log process at the
# very moment the publish woke a client's reader; on 2 cores the two then
# compete for the one core the server does not hold. The paced run of
# benchmarks/fanout.py measures it (figures in benchmarks/README.md).
GROUP_SEND = 256
SEND_DELAY_S = 0.001
MAX_UNSENT_BYTES = 256 * 1024
# Backoff of the writer's retries through a storage fault, and how long it
# keeps retrying once close() was called (a shutdown must end).
RETRY_FIRST_S = 0.05
RETRY_MAX_S = 1.0
CLOSE_RETRY_S = 3.0


class Batch:
    """One group commit on its way to the subscribers.

    ``committed`` once the log holds it; ``error`` is the reply of an append
    sent ahead that failed (the writer retries it, see ``CommitPath._commit``).
    ``ring_end``: the ring position SQLite holds everything before once this is in.
    """

    __slots__ = ("committed", "error", "records", "ring_end")

    def __init__(self, records: list[EventRecord], ring_end: int = 0) -> None:
        self.records = records
        self.committed = False
        self.error: BaseException | None = None
        self.ring_end = ring_end


class CommitPath:
    """Numbers, rings and commits events; tells delivery what is visible.

    ``on_fail`` stops the bus for good (eventbus.bus); ``check`` runs the
    debug-mode invariant checks after each step of the writer and each reply.
    """

    def __init__(
        self,
        access: LogAccess | None,
        fanout: Fanout,
        progress: Progress,
        *,
        max_batch: int,
        max_pending_bytes: int,
        on_fail: Callable[[BaseException], None],
        check: Callable[[], None] | None,
    ) -> None:
        self.access = access
        self.sender = access if isinstance(access, ProcessLogAccess) else None
        if self.sender is not None:
            self.sender.on_lost = self._log_lost
        self._fanout = fanout
        self._progress = progress
        self._max_batch = max_batch
        self._max_pending_bytes = max_pending_bytes
        self._on_fail = on_fail
        self._check = check
        self.seq = 0
        self.session_seqs: dict[str, int] = {}
        self.pending: list[EventRecord] = []
        self.inflight: deque[Batch] = deque()
        self.settle: deque[Batch] = deque()
        # The batch the writer commits and fans out (in-thread log or none).
        self.writing: Batch | None = None
        self.ring: Ring | None = None
        self.unseen: deque[EventRecord] = deque()
        # (seq, ring end) of ringed events SQLite may not hold yet.
        self.ring_marks: deque[tuple[int, int]] = deque()
        self.ringed_seq = 0
        self.committed_seq = 0
        self.fault: StorageFault | None = None  # the fault the writer retries through
        self.lost: EventLogError | None = None  # the log process died while idle
        self.closing = False  # close() was called: end once drained
        self.stopped = False  # closed or failed: nothing more is sent or shown
        self.wake = asyncio.Event()
        self._send_timer: asyncio.TimerHandle | None = None
        self._clock = UtcClock()
        self._encoder = EnvelopeEncoder()
        self._id_head = ""
        self.committed = 0
        self.batches = 0
        self.largest_batch = 0

    async def start(self, id_head: str) -> None:
        """Load the log's counters (its process recovers the ring first)."""
        self._id_head = id_head
        if self.access is not None:
            self.seq, self.session_seqs = await self.access.start()
        if self.sender is not None:
            self.ring = self.sender.ring
        self.committed_seq = self.ringed_seq = self._fanout.delivered_seq = self.seq

    def stop(self) -> None:
        """Nothing more is sent or shown; the writer ends."""
        self.stopped = self.closing = True
        self.wake.set()
        if self._send_timer is not None:
            self._send_timer.cancel()
            self._send_timer = None

    def drop(self) -> None:
        """After a failure: forget what was not committed (never delivered).
        Ringed but unseen events stay in the ring: a restart commits them."""
        self.fault = None
        self.pending = []
        self.inflight.clear()  # late replies to these are dropped (see _on_reply)
        self.settle.clear()
        self.writing = None
        self.unseen.clear()
        self.ring_marks.clear()

    # -- publishing ------------------------------------------------------------------

    def append(
        self, name: str, data: Mapping[str, Any] | Payload, session_id: str, turn_id: str | None
    ) -> None:
        """Assign the counters, encode once and queue (the checks are done).

        The hot path of every event (twice per tool call): locals over
        attribute look-ups (benchmarks/dispatch_overhead.py)."""
        seq = self.seq + 1
        session_seqs = self.session_seqs
        session_seq = session_seqs.get(session_id, 0) + 1
        ts = self._clock.now()
        try:
            encoded = self._encoder.encode(
                seq,
                session_seq,
                "%s%012x" % (self._id_head, seq),  # noqa: UP031 - the fastest spelling
                name,
                session_id,
                turn_id,
                ts,
                data,
            )
        except (TypeError, ValueError, RecursionError) as exc:
            raise EventNotSerializable(f"{name} data is not JSON-serializable: {exc}") from exc
        # Counters move only once the event is sure to be queued: no holes.
        self.seq = seq
        session_seqs[session_id] = session_seq
        record = EventRecord(seq, session_seq, session_id, name, turn_id, ts, encoded)
        pending = self.pending
        pending.append(record)
        ring = self.ring
        if ring is None:
            if len(pending) == 1:
                self.wake.set()
            return
        unseen = self.unseen
        if unseen or not self._into_ring(ring, seq, encoded):
            unseen.append(record)  # behind events not visible yet, or the ring is full
        elif not self._fanout.deliver_now([record]):
            unseen.append(record)  # a queue must drain first: the writer fans it out
            self.wake.set()
        if len(pending) >= GROUP_SEND:
            self.send_ahead()
        elif not self.inflight:
            if unseen:
                self.send_ahead()  # it becomes visible only once committed
            elif self._send_timer is None:
                self._send_timer = asyncio.get_running_loop().call_later(
                    SEND_DELAY_S, self._send_later
                )
        # (Else it gathers into the group commit sent by the next reply.)

    def _into_ring(self, ring: Ring, seq: int, encoded: bytes) -> bool:
        """Copy an event into the ring (in seq order); False if it does not fit."""
        end = ring.write(seq, encoded)
        if end is None:
            return False
        self.ring_marks.append((seq, end))
        self.ringed_seq = seq
        return True

    # -- sending to the log process --------------------------------------------------

    def send_ahead(self) -> None:
        """Hand what is pending to the log process now, from ``append``, from a
        reply's callback or before a replay read, without waiting for the
        batches already in flight (the child commits them one after another)
        nor for the writer task (on a busy loop each wake-up of a task costs a
        whole iteration).

        Nothing is sent while the writer finishes a batch (``settle``: a
        failed append is retried before anything behind it) or while the
        child's pipe is full (it is behind: events gather meanwhile). A batch
        that fails makes every one sent behind it fail too (OutOfSequence,
        nothing written); the writer retries them in order.
        """
        sender = self.sender
        if (
            sender is None
            or not self.pending
            or self.settle
            or self.lost is not None
            or self.stopped
            or sender.unsent_bytes > MAX_UNSENT_BYTES
        ):
            return
        batch = self._take_batch()
        try:
            sender.send_append(batch.records, partial(self._on_reply, batch), batch.ring_end)
        except EventLogError:
            self.wake.set()  # nothing was written; the writer meets the same error
            return
        del self.pending[: len(batch.records)]
        self.inflight.append(batch)
        # Its ring marks are in the batch now; dropped here, not at its reply,
        # so the next _take_batch does not walk them again (on a loop that does
        # not yield, replies come late and the walk would grow with every batch).
        self._drop_marks_through(batch.records[-1].seq)

    def _send_later(self) -> None:
        """The SEND_DELAY_S timer: send what gathered (if nothing did meanwhile)."""
        self._send_timer = None
        self.send_ahead()

    def _take_batch(self) -> Batch:
        """The next group commit from what is pending (not removed yet), with
        the ring position SQLite holds everything before once it is in."""
        records = self.pending[: self._max_batch]
        last = records[-1].seq
        marks = self.ring_marks
        if marks and marks[-1][0] <= last:
            return Batch(records, marks[-1][1])  # every mark is the batch's: no walk
        ring_end = 0
        # (Not popped here: a batch that fails is sent again.)
        for seq, end in marks:
            if seq > last:
                break
            ring_end = end
        return Batch(records, ring_end)

    def _drop_marks_through(self, last: int) -> None:
        """Forget the ring marks of events up to ``last`` (sent or committed)."""
        marks = self.ring_marks
        if marks and marks[-1][0] <= last:
            marks.clear()  # the usual case, a batch of everything pending: no walk
            return
        while marks and marks[0][0] <= last:
            marks.popleft()

    def _on_reply(self, batch: Batch, error: BaseException | None) -> None:
        """The log's reply to a batch sent ahead, in the pipe's read callback:
        settle a commit right here (``_on_committed``), leave a failure (and
        everything behind it) to the writer; then send what gathered meanwhile."""
        if self.stopped:
            return  # nothing more is delivered
        if not self.inflight or self.inflight[0] is not batch:
            self._on_fail(EventLogError("the event log process answered out of order"))
            return
        self.inflight.popleft()
        batch.committed = error is None
        batch.error = error
        if error is None and not self.settle:
            self._on_committed(batch)
            self.send_ahead()
            if self.closing and not self.inflight:
                self.wake.set()  # the writer ends a close
        else:
            self.settle.append(batch)
            self.wake.set()
        if self._check is not None:
            self._check()

    def _on_committed(self, batch: Batch) -> None:
        """SQLite holds ``batch`` (process access): its ring space may be reused,
        events waiting for it become visible, ``flush`` may return."""
        self._count(batch)
        last = batch.records[-1].seq
        self.committed_seq = last
        self._drop_marks_through(last)
        if batch.ring_end and self.ring is not None:
            self.ring.release(batch.ring_end)
        if self.unseen:
            visible = self._visible_prefix()
            if visible and self._fanout.deliver_now(visible):
                self._consume_unseen(len(visible))
            if self.unseen:
                self.wake.set()
        self._progress.signal()

    def _visible_prefix(self) -> list[EventRecord]:
        """The events at the head of ``unseen`` that may be shown now: each is
        committed, or is copied into the ring here (in seq order) if it fits.
        At most one fan-out chunk."""
        ring = self.ring
        out: list[EventRecord] = []
        for record in self.unseen:
            if len(out) >= self._fanout.chunk:
                break
            seq = record.seq
            if (
                seq > self.ringed_seq
                and seq > self.committed_seq
                and (ring is None or not self._into_ring(ring, seq, record.encoded))
            ):
                break  # waits for its commit (or for room in the ring)
            out.append(record)
        return out

    def _consume_unseen(self, count: int) -> None:
        for _ in range(count):
            self.unseen.popleft()

    def _count(self, batch: Batch) -> None:
        records = len(batch.records)
        self.committed += records
        self.batches += 1
        self.largest_batch = max(self.largest_batch, records)

    def _log_lost(self, exc: EventLogError) -> None:
        """The log process is gone: the writer stops the bus now, idle or not."""
        self.lost = exc
        self.wake.set()

    # -- the writer task -------------------------------------------------------------

    async def run(self) -> None:
        """The writer task: finishes what the reply callbacks could not, and
        commits for an in-process log (or fans out, without a log). Ends once
        ``closing`` and drained; a failure stops the bus (``on_fail``)."""
        try:
            while await self._step():
                if self._check is not None:
                    self._check()
        except asyncio.CancelledError:
            self._on_fail(BusClosed("the event bus writer was cancelled"))
            raise
        except Exception as exc:
            self._on_fail(exc)

    async def _step(self) -> bool:
        """One piece of the writer's work, or a wait for some; False once done."""
        if self.lost is not None:
            raise self.lost
        if self.settle:
            batch = self.settle[0]
            if not batch.committed:
                await self._commit(batch)
            # Still at the head until done: replies meanwhile queue behind it.
            if self.stopped:
                return False  # failed meanwhile (a reply out of order): nothing to finish
            self.settle.popleft()
            self._on_committed(batch)
            if not self.settle:
                self.send_ahead()  # what gathered while the writer worked
        elif self.unseen and (visible := self._visible_prefix()):
            # Fanned out with yields (a queue must drain first); until it is
            # done, new events queue behind it in unseen.
            await self._fanout.deliver(visible, self._consume_unseen)
        elif self.pending and self.sender is not None and not self.inflight:
            # Nothing in flight carries them (a send was refused: the log is
            # closing or lost): the writer commits them, or meets the error.
            self.settle.append(Batch(self.pending[: self._max_batch]))
            del self.pending[: self._max_batch]
        elif self.pending and self.sender is None:
            await self._commit_and_deliver()
        elif self.closing and not self.inflight and not self.pending and not self.unseen:
            return False
        else:
            self.wake.clear()
            await self.wake.wait()
        return True

    async def _commit_and_deliver(self) -> None:
        """An in-process log (or none): the writer commits, then fans out."""
        batch = self.writing = Batch(self.pending[: self._max_batch])
        del self.pending[: self._max_batch]
        if self.access is not None:
            await self._commit(batch)
            self.committed_seq = batch.records[-1].seq
        self._count(batch)
        await self._fanout.deliver(batch.records)
        self.writing = None

    async def _commit(self, batch: Batch) -> None:
        """Commit one batch the writer holds, riding out storage faults.

        A batch sent ahead may arrive here with its failed reply (``error``);
        others are appended here. A StorageFault (disk full, I/O error,
        read-only) wrote nothing of the batch: the bus turns *degraded*
        (``fault``), keeps accepting events in memory and retries the same
        batch with backoff, so it resumes by itself when the fault clears and
        nothing already acknowledged is lost. OutOfSequence (a batch sent
        behind one that failed) is sent again at once. The bus gives up
        (StorageFault raised: it stops for good) when the events held in
        memory pass ``max_pending_bytes``, or after ``CLOSE_RETRY_S`` once
        ``close()`` was called. Any other error stops the bus at once.
        """
        assert self.access is not None
        error, batch.error = batch.error, None
        resent = False
        delay = RETRY_FIRST_S
        gave_up_at: float | None = None
        while True:
            try:
                if error is not None:
                    failed, error = error, None
                    raise failed
                await self.access.append(batch.records, batch.ring_end)
            except OutOfSequence:
                # Sent behind a batch that failed, which is in by now: send it again.
                # Every earlier batch is committed when the writer sends one, so
                # a refusal of that send is a bug, not a reason to loop.
                if resent:
                    raise
                resent = True
                continue
            except StorageFault as exc:
                self._hold_through(exc, batch)
                if self.closing:
                    now = asyncio.get_running_loop().time()
                    gave_up_at = gave_up_at or now + CLOSE_RETRY_S
                    if now >= gave_up_at:
                        raise
                await asyncio.sleep(delay)
                delay = min(delay * 2, RETRY_MAX_S)
                continue
            batch.committed = True
            self.fault = None
            return

    def _hold_through(self, exc: StorageFault, batch: Batch) -> None:
        """Turn degraded on a storage fault, or give up (raise) when the events
        held in memory meanwhile pass ``max_pending_bytes``."""
        first = self.fault is None
        self.fault = exc
        if first:
            self._progress.signal()  # waiters may want to look at the fault
        held = (
            encoded_size(batch.records)
            + sum(encoded_size(b.records) for b in self.settle if b is not batch)
            + encoded_size(self.pending)
        )
        if held > self._max_pending_bytes:
            raise StorageFault(
                f"{exc}; {held} bytes of events wait in memory, over the "
                f"{self._max_pending_bytes} allowed: giving up",
                cause=exc.cause,
            ) from exc

    # -- invariants (eventbus.bus's module docstring) ---------------------------------

    def check_invariants(self, delivered: int) -> None:
        """Raise InvariantBroken unless invariants 1-4 hold, ``delivered`` being
        delivery's watermark. Only the ends of the containers are read."""
        c = self
        published = c.seq
        _require(published >= max(delivered, c.committed_seq, c.ringed_seq), "1: published")
        if c.ring is not None:
            _require(delivered <= max(c.ringed_seq, c.committed_seq), "2: delivered not durable")
            head = c.unseen[0].seq if c.unseen else published + 1
            _require(head == delivered + 1, "4: unseen must start right after delivered")
            _require(not c.unseen or c.unseen[-1].seq == published, "4: unseen must end at seq")
        elif c.access is not None:
            _require(delivered <= c.committed_seq, "2: delivered before committed")
        batches = [*c.settle, *c.inflight]
        if c.writing is not None:
            batches.append(c.writing)
        expected = batches[0].records[0].seq if batches else None
        for batch in batches:
            _require(batch.records[0].seq == expected, "3: batches out of seq order")
            expected = batch.records[-1].seq + 1
        if c.pending:
            _require(expected in (None, c.pending[0].seq), "3: pending does not follow the batches")
            _require(c.pending[-1].seq == published, "3: pending must end at seq")
        elif expected is not None:
            _require(expected == published + 1, "3: the batches must end at seq")

    # -- reads that must see what was shown ------------------------------------------

    async def consistent_read(
        self, read: Callable[[int], Awaitable[list[EventRecord]]]
    ) -> list[EventRecord]:
        """A log read that holds every event fanned out so far (the subscription's
        seam, see eventbus.subscription). With the ring, an event may be visible
        before SQLite has it: what is pending is sent ahead of the read (the
        child answers in order) and the read asks for everything delivered;
        if an append before it failed (LogBehind), it waits for the retry."""
        if self.ring is None:
            return await read(0)
        target = self._fanout.delivered_seq
        self.send_ahead()
        for _ in range(2):
            try:
                return await read(target)
            except LogBehind:
                while self.committed_seq < target:
                    if self.stopped:
                        raise BusClosed("the event bus is closed") from None
                    await self._progress.wait()
        raise EventLogError(f"the event log still lacks events up to seq {target} after a commit")


def _require(condition: bool, what: str) -> None:
    if not condition:
        raise InvariantBroken(f"event bus invariant {what}")
