"""EventBus: the in-process event bus with a durable log behind it.

``publish`` (a type and a dict) and ``emit`` (a typed ``protocol.payloads``
model) are synchronous and cheap: they assign ``seq`` and ``session_seq``
in call order, encode the envelope once and queue it for the log, which
commits batches off the event loop (one transaction for many events; see
eventbus.log_access for where). No subscriber ever sees an event a crash
could lose: with the log's process, ``publish`` copies the event into the
event ring (eventbus.ring: a crash of either process keeps it, and the log
process commits it on its next start) and fans it out at once; otherwise
the event is fanned out once committed. Satisfies
``dispatcher.publisher.EventPublisher`` structurally.

All methods are meant for the event loop's thread; ``publish`` is not
thread-safe.
"""

from __future__ import annotations

import asyncio
import os
import secrets
from collections import deque
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass
from functools import partial
from types import TracebackType
from typing import Any, Literal

from eventbus.encoding import EnvelopeEncoder, UtcClock
from eventbus.errors import (
    BusClosed,
    BusNotStarted,
    CursorExpired,
    CursorInFuture,
    EventLogError,
    EventNotSerializable,
    InvalidEvent,
    UnknownEventType,
)
from eventbus.log import (
    MAX_REPLAY_LIMIT,
    MEMORY,
    EventLog,
    LogBehind,
    OutOfSequence,
    StorageFault,
)
from eventbus.log_access import LogAccess, ProcessLogAccess, ThreadLogAccess
from eventbus.record import EventRecord
from eventbus.ring import DEFAULT_CAPACITY as DEFAULT_RING_BYTES
from eventbus.ring import Ring
from eventbus.subscription import Subscription, Visibility
from eventbus.validation import validate_payload
from protocol.catalog import EventType
from protocol.payloads import Payload

DEBUG_ENV = "TOOLRELAY_EVENT_DEBUG"
# What one replay page may hold (besides its count): a subscriber catching up
# holds one page at a time, so this bounds its memory together with its queue.
DEFAULT_REPLAY_PAGE_BYTES = 4 * 1024 * 1024
# Fan-out chunks stop after this many bytes (besides their count): see _deliver.
FANOUT_CHUNK_BYTES = 1024 * 1024
# The commit path to SQLite (see EventBus._send_ahead): an event published
# while no batch is in flight to the log process leaves SEND_DELAY_S later
# (at once if an event waits for its commit to become visible: the ring was
# full); later ones gather into one group commit, sent by the next reply or
# once GROUP_SEND of them wait. Nothing more is sent while the child's stdin
# pipe holds MAX_UNSENT_BYTES it could not take yet.
#
# Why wait at all: with the ring, an event is visible before it is committed,
# so the commit is on nobody's path, but a send wakes the log process at the
# very moment the publish woke a client's reader; on 2 cores the two then
# compete for the one core the server does not hold. A millisecond later the
# client has its event and the commit takes what gathered meanwhile (the
# paced run of benchmarks/fanout.py, 200 events/s to one socket: p99
# 0.74-1.09 ms -> 0.61-0.70 ms; specs/event-bus-and-trace-catalog.md).
GROUP_SEND = 256
SEND_DELAY_S = 0.001
MAX_UNSENT_BYTES = 256 * 1024
# Backoff of the writer's retries through a storage fault, and how long it
# keeps retrying once close() was called (a shutdown must end).
RETRY_FIRST_S = 0.05
RETRY_MAX_S = 1.0
CLOSE_RETRY_S = 3.0

# Maps each catalog name (and so each EventType member, which hashes as its
# value) to the plain str: one lookup both checks and normalises the type.
_TYPE_NAMES: dict[str, str] = {t.value: t.value for t in EventType}
# Payload class -> its catalog type, filled on each class's first emit (one
# dict look-up per event instead of a class attribute read and two checks).
_CLASS_NAMES: dict[type[Payload], str] = {}


@dataclass(frozen=True, slots=True)
class BusStats:
    """Counters for monitoring and benchmarks; cheap to take."""

    published: int
    committed: int
    delivered: int  # records handed to subscriber queues, summed over subscribers
    batches: int
    largest_batch: int
    pending: int
    subscribers: int
    dropped_subscribers: int
    replay_pages: int = 0  # log pages requested by subscribers catching up
    replay_records: int = 0  # records those pages returned


class _Batch:
    """One group commit on its way to the subscribers.

    ``committed`` once the log holds it; ``error`` is the reply of an append
    sent ahead that failed (the writer retries it, see ``EventBus._commit``).
    """

    __slots__ = ("committed", "error", "records", "ring_end")

    def __init__(self, records: list[EventRecord], ring_end: int = 0) -> None:
        self.records = records
        self.committed = False
        self.error: BaseException | None = None
        # The ring position SQLite holds everything before once this is in.
        self.ring_end = ring_end


def _positive(name: str, value: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return value


class EventBus:
    """Orders, logs and fans out events. Start with ``await bus.start()``.

    ``log=None`` runs without durability: subscribers then cannot replay
    anything that was delivered before they subscribed. ``log_access`` picks
    how a log is written off the loop: ``"process"`` (default for files) or
    ``"thread"`` (the only choice for ``:memory:``). With the process, an
    event is shown as soon as it is copied into the event ring (eventbus.ring,
    ``ring_bytes`` large), which survives a crash of either process like a
    commit does; otherwise once it is committed.

    ``max_batch`` bounds one commit. Durable events are fanned out
    ``fanout_chunk`` at a time; before a chunk that would overflow someone's
    queue the writer yields to the loop once, so subscribers that keep up can
    drain. ``max_queue`` bounds each live subscriber's queue (see
    eventbus.subscription) and must hold at least one chunk; ``max_queue_bytes``
    (None: no limit) bounds the encoded size it holds as well. A replay page
    holds at most ``replay_page_size`` events and, beyond its first event,
    ``replay_page_bytes``.
    ``validate_payloads`` (default: the ``TOOLRELAY_EVENT_DEBUG`` environment
    variable) checks every payload against its model at publish time.

    A storage fault (disk full, I/O error, read-only) does not stop it: it
    turns degraded (``fault``), holds events in memory up to
    ``max_pending_bytes`` and retries until a commit succeeds (see
    ``_commit``). When it does stop for good, ``on_failure`` is called once
    with the error (the server exits on it, for a supervisor to restart it).
    """

    def __init__(
        self,
        log: EventLog | None = None,
        *,
        log_access: Literal["process", "thread"] | None = None,
        max_queue: int = 1024,
        max_queue_bytes: int | None = None,
        max_batch: int = 4096,
        fanout_chunk: int = 256,
        replay_page_size: int = 500,
        replay_page_bytes: int = DEFAULT_REPLAY_PAGE_BYTES,
        validate_payloads: bool | None = None,
        max_pending_bytes: int = 64 * 1024 * 1024,
        on_failure: Callable[[BaseException], None] | None = None,
        ring_bytes: int = DEFAULT_RING_BYTES,
    ) -> None:
        self._log = log
        self._access: LogAccess | None = None
        if log is not None:
            if log_access is None:
                log_access = "thread" if log.path == MEMORY else "process"
            if log_access == "process":
                # Absolute: the child must find the file even if the cwd changes.
                self._access = ProcessLogAccess(
                    log.path if log.path == MEMORY else os.path.abspath(log.path), ring_bytes
                )
            elif log_access == "thread":
                self._access = ThreadLogAccess(log)
            else:
                raise ValueError(f"log_access must be 'process' or 'thread', got {log_access!r}")
        self._max_queue = _positive("max_queue", max_queue)
        self._max_queue_bytes = (
            None if max_queue_bytes is None else _positive("max_queue_bytes", max_queue_bytes)
        )
        self._max_batch = _positive("max_batch", max_batch)
        self._fanout_chunk = _positive("fanout_chunk", fanout_chunk)
        if self._fanout_chunk > self._max_queue:
            raise ValueError(
                f"fanout_chunk ({fanout_chunk}) may not exceed max_queue ({max_queue}): a live "
                "subscriber receives a whole chunk at once"
            )
        self._page_size = _positive("replay_page_size", replay_page_size)
        if self._page_size > MAX_REPLAY_LIMIT:
            raise ValueError(f"replay_page_size may not exceed {MAX_REPLAY_LIMIT}")
        self._page_bytes = _positive("replay_page_bytes", replay_page_bytes)
        if validate_payloads is None:
            validate_payloads = os.environ.get(DEBUG_ENV, "") not in ("", "0", "false", "no")
        self._validate = validate_payloads
        self._max_pending_bytes = _positive("max_pending_bytes", max_pending_bytes)
        self._on_failure = on_failure
        # The storage fault the writer is retrying through (None: healthy).
        self._fault: StorageFault | None = None
        # The log process died while the writer was idle (see _log_lost).
        self._lost: EventLogError | None = None
        # The process access takes batches synchronously (see _send_ahead).
        self._sender: ProcessLogAccess | None = None
        if isinstance(self._access, ProcessLogAccess):
            self._access.on_lost = self._log_lost
            self._sender = self._access
        # Batches sent to the log process whose replies have not come, in seq
        # order (replies come in that order); and batches the writer task must
        # finish (retry a failed append, fan out a large batch), in seq order:
        # while it holds any, later replies queue behind them (see _on_reply).
        self._inflight: deque[_Batch] = deque()
        self._settle: deque[_Batch] = deque()
        # The event ring (eventbus.ring), with the process access: an event is
        # visible once it is in the ring or committed, whichever comes first.
        # _unseen: published, not visible yet (the ring was full, or a queue
        # had to drain first), in seq order; _ring_marks: (seq, ring end) of
        # ringed events SQLite may not hold yet.
        self._ring: Ring | None = None
        self._unseen: deque[EventRecord] = deque()
        self._ring_marks: deque[tuple[int, int]] = deque()
        self._ringed_seq = 0
        self._committed_seq = 0
        self._send_timer: asyncio.TimerHandle | None = None

        self._state = "new"  # new -> running -> closing -> closed
        self._failure: BaseException | None = None
        self._seq = 0
        self._session_seqs: dict[str, int] = {}
        self._pending: list[EventRecord] = []
        self._clock = UtcClock()
        self._encoder = EnvelopeEncoder()
        # Event ids: this head and the seq in hex (``_queue``), unique across restarts.
        self._id_head = f"evt_{secrets.token_hex(4)}"

        self._global_subs: list[Subscription] = []
        self._session_subs: dict[str, list[Subscription]] = {}
        # Without a log, what was delivered is all a cursor can be checked against.
        self._delivered_seq = 0
        self._delivered_session: dict[str, int] = {}

        self._wake = asyncio.Event()
        self._progress = asyncio.Event()
        self._writer: asyncio.Task[None] | None = None

        # ``seq`` when the bus started: published = seq - this (no counter on
        # the publish path).
        self._first_seq = 0
        self._committed = 0
        self._delivered = 0
        self._batches = 0
        self._largest_batch = 0
        self._dropped = 0
        self._replay_pages = 0
        self._replay_records = 0

    # -- lifecycle -------------------------------------------------------------------

    async def start(self) -> None:
        """Open the log, load its counters and start the writer. Idempotent while running."""
        if self._state == "running":
            return
        if self._state != "new":
            raise BusClosed("this event bus was closed; create a new one")
        if self._access is not None:
            self._seq, self._session_seqs = await self._access.start()
        if self._sender is not None:
            self._ring = self._sender.ring
        self._delivered_seq = self._committed_seq = self._ringed_seq = self._seq
        self._first_seq = self._seq
        self._state = "running"
        self._writer = asyncio.create_task(self._run_writer(), name="eventbus-writer")

    async def flush(self) -> None:
        """Wait until every event published so far is committed to the log and
        fanned out."""
        target = self._seq
        self._send_ahead()  # not SEND_DELAY_S later: someone waits for it
        while self._delivered_seq < target or (
            self._ring is not None and self._committed_seq < target
        ):
            if self._failure is not None:
                raise BusClosed("the event bus stopped after an event log failure") from (
                    self._failure
                )
            if self._writer is None or self._writer.done():
                if self._state == "new":
                    raise BusNotStarted("await bus.start() before flush()")
                raise BusClosed("the event bus writer is not running")
            progress = self._progress
            await progress.wait()

    async def durable(self) -> None:
        """Wait until every event published so far would survive a crash: in
        the event ring or committed (with the ring, usually already so: then it
        returns without suspending). Without a ring, the same as ``flush``."""
        if self._ring is None:
            await self.flush()
            return
        target = self._seq
        while self._ringed_seq < target and self._committed_seq < target:
            if self._failure is not None or self._state == "closed":
                self._refuse()
            progress = self._progress
            await progress.wait()

    async def close(self) -> None:
        """Stop accepting events, flush what was published, end every subscription.

        Subscriptions yield what they already hold, then raise BusClosed. The
        log is not closed: whoever opened it closes it. Idempotent.
        """
        if self._state == "closing":
            await self._writer_done()
            return
        if self._state != "closed":
            self._state = "closing"
            self._wake.set()
            await self._writer_done()
            self._shutdown(BusClosed("the event bus is closed"))
        if self._access is not None:
            await self._access.close()

    async def _writer_done(self) -> None:
        # asyncio.wait neither raises the writer's outcome nor cancels it.
        if self._writer is not None and not self._writer.done():
            await asyncio.wait([self._writer])

    def _shutdown(self, end: BaseException) -> None:
        self._state = "closed"
        if self._send_timer is not None:
            self._send_timer.cancel()
            self._send_timer = None
        for sub in [*self._global_subs, *(s for subs in self._session_subs.values() for s in subs)]:
            sub._finish(end)
        self._global_subs.clear()
        self._session_subs.clear()
        self._signal_progress()

    async def __aenter__(self) -> EventBus:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    @property
    def fault(self) -> str | None:
        """While a storage fault stops commits: what failed (``"disk full (...)"``).

        The bus is degraded then, not stopped: it keeps events in memory and
        retries; ``None`` again once a commit succeeds."""
        return None if self._fault is None else self._fault.cause

    @property
    def failure(self) -> BaseException | None:
        """Why the bus stopped for good after a log failure (None otherwise)."""
        return self._failure

    @property
    def running(self) -> bool:
        """True between ``start()`` and ``close()`` while the log is healthy."""
        return self._state == "running"

    @property
    def log(self) -> EventLog | None:
        return self._log

    @property
    def log_process_pid(self) -> int | None:
        """The pid of the child process that writes the log, when one does."""
        return self._access.pid if isinstance(self._access, ProcessLogAccess) else None

    # -- publishing ------------------------------------------------------------------

    def publish(
        self,
        type: str,
        data: Mapping[str, Any],
        *,
        session_id: str,
        turn_id: str | None = None,
    ) -> None:
        """Assign the next ``seq``/``session_seq``, encode once, queue for the
        log (and, with the event ring, copy it there and fan it out at once).

        Never waits. Raises InvalidEvent (and nothing is assigned) for an
        unknown type, an empty session id, or data that is not a JSON object;
        BusNotStarted/BusClosed outside ``start()``..``close()``.
        """
        if self._state != "running":
            self._refuse()
        name = _TYPE_NAMES.get(type) if isinstance(type, str) else None
        if name is None:
            raise UnknownEventType(type)
        if session_id.__class__ is not str or not session_id:
            raise InvalidEvent(f"session_id must be a non-empty string, got {session_id!r}")
        if turn_id is not None and turn_id.__class__ is not str:
            raise InvalidEvent(f"turn_id must be a string or None, got {turn_id!r}")
        if not isinstance(data, dict):
            if not isinstance(data, Mapping):
                raise InvalidEvent(f"{name} data must be a mapping, got {data.__class__.__name__}")
            data = dict(data)
        if self._validate:
            validate_payload(name, data)
        self._queue(name, data, session_id, turn_id)

    def emit(self, payload: Payload, *, session_id: str, turn_id: str | None = None) -> None:
        """Publish a typed payload: its class names the event type.

        The same contract as ``publish`` (never waits; refused with the same
        errors before anything is assigned), without a type string to get
        wrong. The payload is not validated here (build it with its class,
        whose construction validates); debug mode checks it again.
        """
        if self._state != "running":
            self._refuse()
        cls = payload.__class__
        name = _CLASS_NAMES.get(cls)
        if name is None:
            event_type = getattr(cls, "event_type", None)
            name = _TYPE_NAMES.get(event_type) if isinstance(event_type, str) else None
            if name is None:
                raise UnknownEventType(f"{cls.__name__} (no catalog event_type)")
            _CLASS_NAMES[cls] = name
        if session_id.__class__ is not str or not session_id:
            raise InvalidEvent(f"session_id must be a non-empty string, got {session_id!r}")
        if turn_id is not None and turn_id.__class__ is not str:
            raise InvalidEvent(f"turn_id must be a string or None, got {turn_id!r}")
        if self._validate:
            try:
                dumped = payload.model_dump(mode="json")
            except Exception as exc:  # pydantic's serialization error: not JSON
                raise EventNotSerializable(f"{name} data is not JSON-serializable: {exc}") from exc
            validate_payload(name, dumped)
        # The payload's field dict itself (plus its extras, if any): orjson
        # writes a dict natively, where a model would cost a call back into
        # Python (its ``default``) per event; nested parts still take that path.
        data: Mapping[str, Any] | Payload
        try:
            extra = payload.__pydantic_extra__
            data = {**payload.__dict__, **extra} if extra else payload.__dict__
        except AttributeError:
            data = payload  # not a pydantic model: the encoder refuses it, as before
        self._queue(name, data, session_id, turn_id)

    def _queue(
        self, name: str, data: Mapping[str, Any] | Payload, session_id: str, turn_id: str | None
    ) -> None:
        """Assign the counters, encode once and queue (the checks are done).

        The hot path of every event (twice per tool call): written for the
        interpreter, locals over attribute look-ups."""
        seq = self._seq + 1
        session_seqs = self._session_seqs
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
        self._seq = seq
        session_seqs[session_id] = session_seq
        record = EventRecord(seq, session_seq, session_id, name, turn_id, ts, encoded)
        pending = self._pending
        pending.append(record)
        ring = self._ring
        if ring is None:
            if len(pending) == 1:
                self._wake.set()
            return
        unseen = self._unseen
        if unseen:
            unseen.append(record)  # behind events not visible yet
        elif not self._into_ring(ring, seq, encoded):
            unseen.append(record)  # visible once committed, or the ring has room
        else:
            # Durable now (see eventbus.ring): visible at once.
            if not self._global_subs and not self._session_subs:
                self._delivered_seq = seq  # nobody to hand it to
            elif not self._deliver_now([record]):
                unseen.append(record)
                self._wake.set()
        if len(pending) >= GROUP_SEND:
            self._send_ahead()
        elif not self._inflight:
            if unseen:
                self._send_ahead()  # it becomes visible only once committed
            elif self._send_timer is None:
                self._send_timer = asyncio.get_running_loop().call_later(
                    SEND_DELAY_S, self._send_later
                )
        # (Else it gathers into the group commit sent by the next reply.)

    def _refuse(self) -> None:
        if self._state == "new":
            raise BusNotStarted("await bus.start() before publishing")
        if self._failure is not None:
            raise BusClosed(
                f"the event bus stopped after an event log failure: {self._failure}"
            ) from self._failure
        raise BusClosed("the event bus is closed")

    @property
    def last_seq(self) -> int:
        """The ``seq`` of the newest event published (maybe not yet delivered)."""
        return self._seq

    def last_session_seq(self, session_id: str) -> int:
        """The ``session_seq`` of the session's newest event published (0 if none)."""
        return self._session_seqs.get(session_id, 0)

    # -- the writer -------------------------------------------------------------------

    async def _run_writer(self) -> None:
        """Finishes what the reply callbacks could not, and commits for an
        in-process log (or fans out, without a log)."""
        try:
            while True:
                if self._lost is not None:
                    raise self._lost
                if self._settle:
                    batch = self._settle[0]
                    if not batch.committed:
                        await self._commit(batch)
                    # Still at the head until done: replies meanwhile queue behind it.
                    self._settle.popleft()
                    self._on_committed(batch)
                    if not self._settle:
                        self._send_ahead()  # what gathered while the writer worked
                    continue
                if self._unseen and (visible := self._visible_prefix()):
                    # Fanned out with yields (a queue must drain first); until it is
                    # done, new events queue behind it in _unseen.
                    await self._deliver(visible)
                    for _ in range(len(visible)):
                        self._unseen.popleft()
                    continue
                if self._pending and self._sender is not None and not self._inflight:
                    # Nothing in flight carries them (a send was refused: the log is
                    # closing or lost): the writer commits them, or meets the error.
                    self._settle.append(_Batch(self._pending[: self._max_batch]))
                    del self._pending[: self._max_batch]
                    continue
                if self._pending and self._sender is None:
                    # An in-process log (or none): the writer commits, then fans out.
                    batch = _Batch(self._pending[: self._max_batch])
                    del self._pending[: self._max_batch]
                    if self._access is not None:
                        await self._commit(batch)
                    self._count(batch)
                    await self._deliver(batch.records)
                    continue
                if (
                    self._state != "running"
                    and not self._inflight
                    and not self._pending
                    and not self._unseen
                ):
                    return
                self._wake.clear()
                await self._wake.wait()
        except asyncio.CancelledError:
            self._fail(BusClosed("the event bus writer was cancelled"))
            raise
        except Exception as exc:
            self._fail(exc)

    def _count(self, batch: _Batch) -> None:
        records = len(batch.records)
        self._committed += records
        self._batches += 1
        self._largest_batch = max(self._largest_batch, records)

    def _send_ahead(self) -> None:
        """Hand what is pending to the log process now, from ``publish``, from a
        reply's callback or before a replay read, without waiting for the
        batches already in flight (the child commits them one after another)
        nor for the writer task (on a busy loop each wake-up of a task costs a
        whole iteration).

        ``publish`` calls it, SEND_DELAY_S later, when no batch is in flight
        (else events gather into one group commit, sent by the next reply, or
        once GROUP_SEND of them wait). Nothing is sent while the writer
        finishes a batch (``_settle``: a failed append is retried before
        anything behind it) or while the child's pipe is full (it is behind:
        events gather meanwhile). A batch that fails makes every one sent behind it fail
        too (OutOfSequence, nothing written); the writer retries them in order.
        """
        sender = self._sender
        if (
            sender is None
            or not self._pending
            or self._settle
            or self._lost is not None
            or self._failure is not None
            or self._state == "closed"
            or sender.unsent_bytes > MAX_UNSENT_BYTES
        ):
            return
        batch = self._take_batch()
        try:
            sender.send_append(batch.records, partial(self._on_reply, batch), batch.ring_end)
        except EventLogError:
            self._wake.set()  # nothing was written; the writer meets the same error
            return
        del self._pending[: len(batch.records)]
        self._inflight.append(batch)
        # Its ring marks are in the batch now; dropped here, not at its reply,
        # so the next _take_batch does not walk them again (on a loop that does
        # not yield, replies come late and the walk grew with every batch).
        self._drop_marks_through(batch.records[-1].seq)

    def _drop_marks_through(self, last: int) -> None:
        """Forget the ring marks of events up to ``last`` (sent or committed)."""
        marks = self._ring_marks
        if marks and marks[-1][0] <= last:
            marks.clear()  # the usual case, a batch of everything pending: no walk
            return
        while marks and marks[0][0] <= last:
            marks.popleft()

    def _send_later(self) -> None:
        """The SEND_DELAY_S timer: send what gathered (if nothing did meanwhile)."""
        self._send_timer = None
        self._send_ahead()

    def _take_batch(self) -> _Batch:
        """The next group commit from what is pending (not removed yet), with
        the ring position SQLite holds everything before once it is in."""
        records = self._pending[: self._max_batch]
        last = records[-1].seq
        marks = self._ring_marks
        if marks and marks[-1][0] <= last:
            return _Batch(records, marks[-1][1])  # every mark is the batch's: no walk
        ring_end = 0
        # (Not popped here: a batch that fails is sent again.)
        for seq, end in marks:
            if seq > last:
                break
            ring_end = end
        return _Batch(records, ring_end)

    def _on_reply(self, batch: _Batch, error: BaseException | None) -> None:
        """The log's reply to a batch sent ahead, in the pipe's read callback:
        settle a commit right here (``_on_committed``), leave a failure (and
        everything behind it) to the writer; then send what gathered meanwhile."""
        if self._failure is not None or self._state == "closed":
            return  # stopped: nothing more is delivered
        if not self._inflight or self._inflight[0] is not batch:
            self._fail(EventLogError("the event log process answered out of order"))
            return
        self._inflight.popleft()
        batch.committed = error is None
        batch.error = error
        if error is None and not self._settle:
            self._on_committed(batch)
            self._send_ahead()
            if self._state != "running" and not self._inflight:
                self._wake.set()  # the writer ends a close
            return
        self._settle.append(batch)
        self._wake.set()

    def _on_committed(self, batch: _Batch) -> None:
        """SQLite holds ``batch`` (process access): its ring space may be reused,
        events waiting for it become visible, ``flush`` may return."""
        self._count(batch)
        last = batch.records[-1].seq
        self._committed_seq = last
        self._drop_marks_through(last)
        if batch.ring_end and self._ring is not None:
            self._ring.release(batch.ring_end)
        if self._unseen:
            visible = self._visible_prefix()
            if visible and self._deliver_now(visible):
                for _ in range(len(visible)):
                    self._unseen.popleft()
            if self._unseen:
                self._wake.set()
        self._signal_progress()

    def _visible_prefix(self) -> list[EventRecord]:
        """The events at the head of ``_unseen`` that may be shown now: each is
        committed, or is copied into the ring here (in seq order) if it fits.
        At most one fan-out chunk."""
        ring = self._ring
        out: list[EventRecord] = []
        for record in self._unseen:
            if len(out) >= self._fanout_chunk:
                break
            seq = record.seq
            if (
                seq > self._ringed_seq
                and seq > self._committed_seq
                and (ring is None or not self._into_ring(ring, seq, record.encoded))
            ):
                break  # waits for its commit (or for room in the ring)
            out.append(record)
        return out

    def _into_ring(self, ring: Ring, seq: int, encoded: bytes) -> bool:
        """Copy an event into the ring (in seq order); False if it does not fit."""
        end = ring.write(seq, encoded)
        if end is None:
            return False
        self._ring_marks.append((seq, end))
        self._ringed_seq = seq
        return True

    async def _commit(self, batch: _Batch) -> None:
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
        assert self._access is not None
        error, batch.error = batch.error, None
        resent = False
        delay = RETRY_FIRST_S
        gave_up_at: float | None = None
        while True:
            try:
                if error is not None:
                    failed, error = error, None
                    raise failed
                await self._access.append(batch.records, batch.ring_end)
            except OutOfSequence:
                # Sent behind a batch that failed, which is in by now: send it again.
                # Every earlier batch is committed when the writer sends one, so
                # a refusal of that send is a bug, not a reason to loop.
                if resent:
                    raise
                resent = True
                continue
            except StorageFault as exc:
                first = self._fault is None
                self._fault = exc
                if first:
                    self._signal_progress()  # waiters may want to look at the fault
                held = (
                    _encoded_size(batch.records)
                    + sum(_encoded_size(b.records) for b in self._settle if b is not batch)
                    + _encoded_size(self._pending)
                )
                if held > self._max_pending_bytes:
                    raise StorageFault(
                        f"{exc}; {held} bytes of events wait in memory, over the "
                        f"{self._max_pending_bytes} allowed: giving up",
                        cause=exc.cause,
                    ) from exc
                if self._state != "running":
                    now = asyncio.get_running_loop().time()
                    gave_up_at = gave_up_at or now + CLOSE_RETRY_S
                    if now >= gave_up_at:
                        raise
                await asyncio.sleep(delay)
                delay = min(delay * 2, RETRY_MAX_S)
                continue
            batch.committed = True
            self._fault = None
            return

    async def _deliver(self, batch: list[EventRecord]) -> None:
        """Fan out a committed batch a chunk at a time.

        Before a chunk that would overflow some subscriber's queue, it yields
        to the loop once so that subscriber can drain; one that still cannot
        take the chunk afterwards is too slow and is cut off. Without such a
        subscriber it does not yield: on a busy loop every yield costs a
        whole iteration. A chunk holds ``fanout_chunk`` events at most and
        stops after FANOUT_CHUNK_BYTES, so that queues bounded in bytes get
        the same chance to drain between chunks of large events.
        """
        count = self._fanout_chunk
        end = len(batch)
        start = 0
        while start < end:
            stop = min(start + count, end)
            size = 0
            for i in range(start, stop):
                size += len(batch[i].text)
                if size >= FANOUT_CHUNK_BYTES:
                    stop = i + 1
                    break
            chunk = batch[start:stop]
            start = stop
            if self._someone_full(chunk, size):
                await asyncio.sleep(0)
            self._fan_out(chunk, size)
            self._delivered_seq = chunk[-1].seq
        self._signal_progress()

    def _deliver_now(self, batch: list[EventRecord]) -> bool:
        """Fan out durable records at once (from ``publish`` or a commit's
        reply callback) when they are one chunk that every queue can take
        (the usual case); else False, and the writer fans them out with
        ``_deliver``, which may yield for a queue to drain."""
        if self._state == "closed" or len(batch) > self._fanout_chunk:
            return False
        size = _encoded_size(batch)
        if size >= FANOUT_CHUNK_BYTES or self._someone_full(batch, size):
            return False
        self._fan_out(batch, size)
        self._delivered_seq = batch[-1].seq
        return True

    def _someone_full(self, chunk: list[EventRecord], size: int) -> bool:
        # Counted over the whole chunk: an upper bound for session and filtered
        # subscribers, which take only part of it (at worst one needless yield).
        incoming = len(chunk)
        for sub in self._global_subs:
            if _would_overflow(sub, incoming, size):
                return True
        for subs in self._session_subs.values():
            for sub in subs:
                if _would_overflow(sub, incoming, size):
                    return True
        return False

    def _log_lost(self, exc: EventLogError) -> None:
        """The log process is gone: the writer stops the bus now, idle or not."""
        self._lost = exc
        self._wake.set()

    def _fail(self, exc: BaseException) -> None:
        """Stop for good: what was not committed is never delivered."""
        self._failure = exc
        self._fault = None
        self._pending = []
        # Late replies to these are dropped (see _on_reply).
        self._inflight.clear()
        self._settle.clear()
        # Ringed but unseen events stay in the ring: a restart commits them.
        self._unseen.clear()
        self._ring_marks.clear()
        end = BusClosed(f"the event bus stopped after an event log failure: {exc}")
        end.__cause__ = exc
        self._shutdown(end)
        if self._access is not None:
            self._access.abort()
        if self._on_failure is not None and not isinstance(exc, BusClosed):
            # The owner decides what a dead bus means (the server exits non-zero).
            self._on_failure(exc)

    def _signal_progress(self) -> None:
        progress, self._progress = self._progress, asyncio.Event()
        progress.set()

    def _fan_out(self, chunk: list[EventRecord], size: int) -> None:
        """Offer a chunk (``size``: its encoded bytes) to every subscriber."""
        if self._access is None:
            for record in chunk:
                self._delivered_session[record.session_id] = record.session_seq
        dropped: list[Subscription] = []
        delivered = 0
        if self._global_subs:
            for sub in self._global_subs:
                queued = sub._offer(chunk, size)
                if queued >= 0:
                    delivered += queued
                else:
                    dropped.append(sub)
        if self._session_subs:
            by_session: dict[str, list[EventRecord]] = {}
            session_subs = self._session_subs
            for record in chunk:
                if record.session_id in session_subs:
                    by_session.setdefault(record.session_id, []).append(record)
            for session_id, records in by_session.items():
                part = size if len(records) == len(chunk) else _encoded_size(records)
                for sub in session_subs[session_id]:
                    queued = sub._offer(records, part)
                    if queued >= 0:
                        delivered += queued
                    else:
                        dropped.append(sub)
        self._delivered += delivered
        for sub in dropped:
            self._dropped += 1
            self._unregister(sub)

    # -- subscribing ------------------------------------------------------------------

    async def subscribe(
        self,
        *,
        session_id: str | None = None,
        after: int | None = None,
        max_queue: int | None = None,
        max_queue_bytes: int | None = None,
        visible: Visibility | None = None,
        visible_sessions: Callable[[], Collection[str]] | None = None,
    ) -> Subscription:
        """A stream of one session's events (cursor ``session_seq``) or of all
        (``session_id=None``, cursor ``seq``).

        ``max_queue``/``max_queue_bytes`` bound its live queue in events and in
        encoded bytes (defaults: the bus's). For the all-sessions stream,
        ``visible`` filters it to the sessions the predicate accepts, and
        ``visible_sessions`` (required with it) names them for log reads, which
        then read only those sessions' rows (see eventbus.subscription).

        With ``after``, it first yields what the log holds after the cursor,
        then live events, with no gap and no repeat. Without it, it starts
        with the next event fanned out. Raises CursorInFuture for a cursor
        beyond the newest event and CursorExpired (with the oldest usable
        cursor) when events after it were pruned.
        """
        if self._state != "running":
            self._refuse()
        if session_id is not None and (session_id.__class__ is not str or not session_id):
            raise ValueError(f"session_id must be a non-empty string or None, got {session_id!r}")
        if after is not None and (after.__class__ is not int or after < 0):
            raise ValueError(f"after must be a non-negative integer or None, got {after!r}")
        queue = self._max_queue if max_queue is None else _positive("max_queue", max_queue)
        if queue < self._fanout_chunk:
            raise ValueError(
                f"max_queue ({queue}) may not be below the bus's fanout_chunk "
                f"({self._fanout_chunk})"
            )
        queue_bytes = (
            self._max_queue_bytes
            if max_queue_bytes is None
            else _positive("max_queue_bytes", max_queue_bytes)
        )
        if (visible is None) != (visible_sessions is None):
            raise ValueError("visible and visible_sessions go together: pass both or neither")
        if visible is not None and session_id is not None:
            raise ValueError("visible filters the all-sessions stream only (session_id=None)")
        latest = self._seq if session_id is None else self._session_seqs.get(session_id, 0)
        if after is not None and after > latest:
            raise CursorInFuture(cursor=after, latest_cursor=latest, session_id=session_id)

        async def read_page(cursor: int, limit: int) -> list[EventRecord]:
            if visible_sessions is None:
                return await self._read_page(session_id, cursor, limit)
            return await self._read_visible_page(sorted(visible_sessions()), cursor, limit)

        sub = Subscription(
            session_id=session_id,
            after=after,
            max_queue=queue,
            page_size=self._page_size,
            page_bytes=self._page_bytes,
            read_page=read_page,
            on_close=self._unregister,
            replayable=self._access is not None,
            max_bytes=queue_bytes,
            visible=visible,
        )
        # Register before the first log read: see eventbus.subscription.
        if session_id is None:
            self._global_subs.append(sub)
        else:
            self._session_subs.setdefault(session_id, []).append(sub)
        try:
            await sub._prime()
        except BaseException:
            sub.close()
            raise
        return sub

    async def _read_page(self, session_id: str | None, after: int, limit: int) -> list[EventRecord]:
        if self._state != "running":
            self._refuse()
        if self._access is None:
            delivered = (
                self._delivered_seq
                if session_id is None
                else self._delivered_session.get(session_id, 0)
            )
            if after < delivered:
                raise CursorExpired(cursor=after, oldest_cursor=delivered, session_id=session_id)
            return []
        access = self._access
        page = await self._consistent_read(
            lambda through: access.read_page(
                session_id, after, limit, max_bytes=self._page_bytes, through=through
            )
        )
        self._replay_pages += 1
        self._replay_records += len(page)
        return page

    async def _consistent_read(
        self, read: Callable[[int], Awaitable[list[EventRecord]]]
    ) -> list[EventRecord]:
        """A log read that holds every event fanned out so far (the subscription's
        seam, see eventbus.subscription). With the ring, an event may be visible
        before SQLite has it: what is pending is sent ahead of the read (the
        child answers in order) and the read asks for everything delivered;
        if an append before it failed (LogBehind), it waits for the retry."""
        if self._ring is None:
            return await read(0)
        target = self._delivered_seq
        self._send_ahead()
        for _ in range(2):
            try:
                return await read(target)
            except LogBehind:
                while self._committed_seq < target:
                    if self._failure is not None or self._state == "closed":
                        self._refuse()
                    await self._progress.wait()
        raise EventLogError(f"the event log still lacks events up to seq {target} after a commit")

    async def _read_visible_page(
        self, sessions: list[str], after: int, limit: int
    ) -> list[EventRecord]:
        """A page of the all-sessions stream holding only ``sessions``' events."""
        if self._state != "running":
            self._refuse()
        if not sessions or self._access is None:
            # Nothing visible, nothing to read: no page is requested at all.
            return []
        access = self._access
        page = await self._consistent_read(
            lambda through: access.read_page(
                None, after, limit, sessions=sessions, max_bytes=self._page_bytes, through=through
            )
        )
        self._replay_pages += 1
        self._replay_records += len(page)
        return page

    async def prune(
        self,
        *,
        keep_last: int | None = None,
        max_bytes: int | None = None,
        max_age_s: float | None = None,
    ) -> int:
        """Apply a retention policy to the log (0 without one): keep the newest
        ``keep_last`` events, none older than ``max_age_s`` seconds, and the
        log's pages in use within ``max_bytes`` (see ``EventLog.prune``).

        Runs where the log is written (its process or thread), off the loop.
        """
        if keep_last is not None and (
            not isinstance(keep_last, int) or isinstance(keep_last, bool) or keep_last < 0
        ):
            raise ValueError(f"keep_last must be a non-negative integer, got {keep_last!r}")
        if keep_last is None and max_bytes is None and max_age_s is None:
            raise ValueError("prune needs keep_last, max_bytes or max_age_s")
        if self._state != "running":
            self._refuse()
        if self._access is None:
            return 0
        self._send_ahead()  # what is published goes first (the child answers in order)
        return await self._access.prune(keep_last, max_bytes, max_age_s)

    def _unregister(self, sub: Subscription) -> None:
        subs = (
            self._global_subs if sub.session_id is None else self._session_subs.get(sub.session_id)
        )
        if subs is not None and sub in subs:
            subs.remove(sub)
            if sub.session_id is not None and not subs:
                del self._session_subs[sub.session_id]

    def subscriber_count(self, session_id: str | None = None) -> int:
        """Live subscriptions: all of them, or those of one session's stream."""
        if session_id is not None:
            return len(self._session_subs.get(session_id, ()))
        return len(self._global_subs) + sum(len(s) for s in self._session_subs.values())

    def stats(self) -> BusStats:
        """A snapshot of the counters since ``start()``."""
        return BusStats(
            published=self._seq - self._first_seq,
            committed=self._committed,
            delivered=self._delivered,
            batches=self._batches,
            largest_batch=self._largest_batch,
            pending=len(self._pending),
            subscribers=self.subscriber_count(),
            dropped_subscribers=self._dropped,
            replay_pages=self._replay_pages,
            replay_records=self._replay_records,
        )


def _encoded_size(records: list[EventRecord]) -> int:
    size = 0
    for record in records:
        size += record.size
    return size


def _would_overflow(sub: Subscription, incoming: int, size: int) -> bool:
    if sub.queued + incoming > sub.max_queue:
        return True
    # An empty queue takes any chunk (see Subscription._offer).
    return sub.max_bytes is not None and sub.queued > 0 and sub.queued_bytes + size > sub.max_bytes
