"""EventBus: the in-process event bus, a publish/subscribe facade over two parts.

- the commit side (eventbus.commit, ``CommitPath``): sequence numbers, the
  event ring, the log (its process or thread), and when each event becomes
  visible;
- delivery (eventbus.delivery, ``Fanout``): the subscribers and their queues
  (eventbus.subscription; a socket may take records directly, see
  server/streaming.py).

``publish`` (a type and a dict) and ``emit`` (a typed ``protocol.payloads``
model) check the event and hand it to the commit side; they are synchronous
and never wait. It implements ``eventbus.interface.Bus`` (as does the cluster
bus) and ``dispatcher.publisher.EventPublisher``. All methods are meant for
the event loop's thread; ``publish`` is not thread-safe.

Invariants
----------
Watermarks: ``published`` (the newest ``seq`` assigned), ``ringed`` (the
newest copied into the event ring), ``committed`` (the newest in the log),
``delivered`` (the newest fanned out to subscribers). ``visible`` is what
subscribers may see: everything up to ``delivered`` plus ``unseen``'s head
once the writer shows it.

1. ``published >= delivered``, ``published >= committed``, ``published >=
   ringed``; seq and each session's ``session_seq`` are gapless (they move only
   once an event is queued).
2. What is delivered is durable first: ``delivered <= max(ringed,
   committed)`` with the ring, ``delivered <= committed`` with a log
   without one. (Without a log nothing is durable: no replay before the
   subscription.)
3. Batches commit in seq order: ``settle`` + ``inflight`` + ``pending`` (the
   writer's ``writing`` batch, without the log's process) are contiguous,
   ascending and end at ``published``.
4. With the ring, ``unseen`` is exactly the events published and not yet
   delivered: it is empty, or runs from ``delivered + 1`` to ``published``.
5. Delivery is one pass in seq order: each chunk fanned out starts at
   ``delivered + 1`` and is contiguous, so each subscriber gets each
   visible event (of the sessions it may see) once, in order; a session's
   ``session_seq`` it sees is gapless.
6. A subscriber with a cursor gets the log's events after it, then the live
   ones, with no gap and no repeat (eventbus.subscription: it is registered
   before its first read, and a read holds everything delivered, see
   ``CommitPath.consistent_read``).
7. A subscriber whose queue cannot take a chunk is dropped with an explicit
   end (SubscriberTooSlow, close code 4429 on a socket) once it has caught
   up; it is never skipped silently.
8. After a crash and a restart nothing committed or ringed is lost (the log
   process commits what the ring holds beyond the log before anything reads
   it), so nothing ever delivered is lost, and ``seq`` continues from the
   newest durable event.

Debug mode (``check_invariants``, default: the ``TOOLRELAY_EVENT_DEBUG``
environment variable, which the server tests set; the eventbus tests turn it
on in ``running_bus``) checks 1-5 after each publish, each reply of the log
and each step of the writer: a handful of comparisons, plus one per event
fanned out. 6-8 are checked by tests/eventbus/test_bus_model.py, a Hypothesis
state machine against a plain list model, and by the replay and crash tests.
"""

from __future__ import annotations

import asyncio
import os
import secrets
from collections.abc import Callable, Collection, Mapping
from types import TracebackType
from typing import Any, Literal

from eventbus.commit import CommitPath
from eventbus.delivery import Fanout, InvariantBroken, Progress
from eventbus.errors import (
    BusClosed,
    BusNotStarted,
    CursorExpired,
    CursorInFuture,
    EventNotSerializable,
    InvalidEvent,
    UnknownEventType,
)
from eventbus.interface import BusStats
from eventbus.log import MAX_REPLAY_LIMIT, EventLog
from eventbus.log_access import access_for
from eventbus.record import EventRecord
from eventbus.ring import DEFAULT_CAPACITY as DEFAULT_RING_BYTES
from eventbus.subscription import Subscription, Visibility
from eventbus.validation import TYPE_NAMES, check_ids, payload_type, validate_payload
from protocol.payloads import Payload

__all__ = ["DEBUG_ENV", "BusStats", "EventBus", "InvariantBroken"]

DEBUG_ENV = "TOOLRELAY_EVENT_DEBUG"
# What one replay page may hold (besides its count): a subscriber catching up
# holds one page at a time, so this bounds its memory together with its queue.
DEFAULT_REPLAY_PAGE_BYTES = 4 * 1024 * 1024


def _positive(name: str, value: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return value


def _debug_env() -> bool:
    return os.environ.get(DEBUG_ENV, "") not in ("", "0", "false", "no")


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
    ``validate_payloads`` checks every payload against its model at publish
    time and ``check_invariants`` checks the invariants of the module
    docstring (both default to the ``TOOLRELAY_EVENT_DEBUG`` environment
    variable).

    A storage fault (disk full, I/O error, read-only) does not stop it: it
    turns degraded (``fault``), holds events in memory up to
    ``max_pending_bytes`` and retries until a commit succeeds (see
    ``CommitPath._commit``). When it does stop for good, ``on_failure`` is
    called once with the error (the server exits on it, for a supervisor to
    restart it).
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
        check_invariants: bool | None = None,
        max_pending_bytes: int = 64 * 1024 * 1024,
        on_failure: Callable[[BaseException], None] | None = None,
        ring_bytes: int = DEFAULT_RING_BYTES,
    ) -> None:
        self._log = log
        self._max_queue = _positive("max_queue", max_queue)
        self._max_queue_bytes = (
            None if max_queue_bytes is None else _positive("max_queue_bytes", max_queue_bytes)
        )
        chunk = _positive("fanout_chunk", fanout_chunk)
        if chunk > self._max_queue:
            raise ValueError(
                f"fanout_chunk ({fanout_chunk}) may not exceed max_queue ({max_queue}): a live "
                "subscriber receives a whole chunk at once"
            )
        self._page_size = _positive("replay_page_size", replay_page_size)
        if self._page_size > MAX_REPLAY_LIMIT:
            raise ValueError(f"replay_page_size may not exceed {MAX_REPLAY_LIMIT}")
        self._page_bytes = _positive("replay_page_bytes", replay_page_bytes)
        self._validate = _debug_env() if validate_payloads is None else validate_payloads
        checking = _debug_env() if check_invariants is None else check_invariants
        self._on_failure = on_failure
        access = access_for(log, log_access, ring_bytes)
        self._progress = Progress()
        self._fanout = Fanout(
            chunk=chunk, progress=self._progress, track_sessions=access is None, check=checking
        )
        self._commit = CommitPath(
            access,
            self._fanout,
            self._progress,
            max_batch=_positive("max_batch", max_batch),
            max_pending_bytes=_positive("max_pending_bytes", max_pending_bytes),
            on_fail=self._fail,
            check=self.check_invariants if checking else None,
        )
        self._checking = checking
        self._state = "new"  # new -> running -> closing -> closed
        self._failure: BaseException | None = None
        self._writer: asyncio.Task[None] | None = None
        # ``seq`` when the bus started: published = seq - this.
        self._first_seq = 0
        self._replay_pages = 0
        self._replay_records = 0

    # -- lifecycle -------------------------------------------------------------------

    async def start(self) -> None:
        """Open the log, load its counters and start the writer. Idempotent while running."""
        if self._state == "running":
            return
        if self._state != "new":
            raise BusClosed("this event bus was closed; create a new one")
        # Event ids: this head and the seq in hex, unique across restarts.
        await self._commit.start(f"evt_{secrets.token_hex(4)}")
        self._first_seq = self._commit.seq
        self._state = "running"
        self._writer = asyncio.create_task(self._commit.run(), name="eventbus-writer")

    async def flush(self) -> None:
        """Wait until every event published so far is committed to the log and
        fanned out."""
        commit = self._commit
        target = commit.seq
        commit.send_ahead()  # not SEND_DELAY_S later: someone waits for it
        while self._fanout.delivered_seq < target or (
            commit.ring is not None and commit.committed_seq < target
        ):
            if self._failure is not None:
                raise BusClosed("the event bus stopped after an event log failure") from (
                    self._failure
                )
            if self._writer is None or self._writer.done():
                if self._state == "new":
                    raise BusNotStarted("await bus.start() before flush()")
                raise BusClosed("the event bus writer is not running")
            await self._progress.wait()

    async def durable(self) -> None:
        """Wait until every event published so far would survive a crash: in
        the event ring or committed (with the ring, usually already so: then it
        returns without suspending). Without a ring, the same as ``flush``."""
        commit = self._commit
        if commit.ring is None:
            await self.flush()
            return
        target = commit.seq
        while commit.ringed_seq < target and commit.committed_seq < target:
            if self._failure is not None or self._state == "closed":
                self._refuse()
            await self._progress.wait()

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
            self._commit.closing = True
            self._commit.wake.set()
            await self._writer_done()
            self._shutdown(BusClosed("the event bus is closed"))
        if self._commit.access is not None:
            await self._commit.access.close()

    async def _writer_done(self) -> None:
        # asyncio.wait neither raises the writer's outcome nor cancels it.
        if self._writer is not None and not self._writer.done():
            await asyncio.wait([self._writer])

    def _shutdown(self, end: BaseException) -> None:
        self._state = "closed"
        self._commit.stop()
        self._fanout.finish(end)
        self._progress.signal()

    def _fail(self, exc: BaseException) -> None:
        """Stop for good: what was not committed is never delivered."""
        if self._failure is not None:
            return
        self._failure = exc
        self._commit.drop()
        end = BusClosed(f"the event bus stopped after an event log failure: {exc}")
        end.__cause__ = exc
        self._shutdown(end)
        if self._commit.access is not None:
            self._commit.access.abort()
        if self._on_failure is not None and not isinstance(exc, BusClosed):
            # The owner decides what a dead bus means (the server exits non-zero).
            self._on_failure(exc)

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
        fault = self._commit.fault
        return None if fault is None else fault.cause

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
    def local_log(self) -> EventLog | None:
        """The log this bus writes (``Bus.local_log``)."""
        return self._log

    @property
    def log_process_pid(self) -> int | None:
        """The pid of the child process that writes the log, when one does."""
        sender = self._commit.sender
        return None if sender is None else sender.pid

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
        name = TYPE_NAMES.get(type) if isinstance(type, str) else None
        if name is None:
            raise UnknownEventType(type)
        check_ids(session_id, turn_id)
        if not isinstance(data, dict):
            if not isinstance(data, Mapping):
                raise InvalidEvent(f"{name} data must be a mapping, got {data.__class__.__name__}")
            data = dict(data)
        if self._validate:
            validate_payload(name, data)
        self._commit.append(name, data, session_id, turn_id)
        if self._checking:
            self.check_invariants()

    def emit(self, payload: Payload, *, session_id: str, turn_id: str | None = None) -> None:
        """Publish a typed payload: its class names the event type.

        The same contract as ``publish`` (never waits; refused with the same
        errors before anything is assigned), without a type string to get
        wrong. The payload is not validated here (build it with its class,
        whose construction validates); debug mode checks it again.
        """
        if self._state != "running":
            self._refuse()
        name = payload_type(payload)
        check_ids(session_id, turn_id)
        if self._validate:
            try:
                dumped = payload.model_dump(mode="json")
            except Exception as exc:  # pydantic's serialization error: not JSON
                raise EventNotSerializable(f"{name} data is not JSON-serializable: {exc}") from exc
            validate_payload(name, dumped)
        # The payload's field dict itself (plus its extras, if any): orjson
        # writes a dict natively, where a model would cost a call back into
        # Python (its ``default``) per event (benchmarks/event_encoding.py).
        data: Mapping[str, Any] | Payload
        try:
            extra = payload.__pydantic_extra__
            data = {**payload.__dict__, **extra} if extra else payload.__dict__
        except AttributeError:
            data = payload  # not a pydantic model: the encoder refuses it
        self._commit.append(name, data, session_id, turn_id)
        if self._checking:
            self.check_invariants()

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
        return self._commit.seq

    def last_session_seq(self, session_id: str) -> int:
        """The ``session_seq`` of the session's newest event published (0 if none)."""
        return self._commit.session_seqs.get(session_id, 0)

    # -- invariants ------------------------------------------------------------------

    def check_invariants(self) -> None:
        """Raise InvariantBroken unless invariants 1-4 of the module docstring
        hold (5 is checked as each chunk is fanned out, see eventbus.delivery).
        Cheap: no walk over the queues, only their ends."""
        if self._failure is None and self._state != "new":  # (stopped: dropped on purpose)
            self._commit.check_invariants(self._fanout.delivered_seq)

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
        queue, queue_bytes = self._check_subscribe(
            session_id, after, max_queue, max_queue_bytes, visible, visible_sessions
        )

        async def read_page(cursor: int, limit: int) -> list[EventRecord]:
            if visible_sessions is None:
                return await self._read_page(session_id, cursor, limit)
            return await self._read_page(None, cursor, limit, sorted(visible_sessions()))

        sub = Subscription(
            session_id=session_id,
            after=after,
            max_queue=queue,
            page_size=self._page_size,
            page_bytes=self._page_bytes,
            read_page=read_page,
            on_close=self._fanout.unregister,
            replayable=self._commit.access is not None,
            max_bytes=queue_bytes,
            visible=visible,
        )
        # Register before the first log read: see eventbus.subscription.
        self._fanout.register(sub)
        try:
            await sub._prime()
        except BaseException:
            sub.close()
            raise
        return sub

    def _check_subscribe(
        self,
        session_id: str | None,
        after: int | None,
        max_queue: int | None,
        max_queue_bytes: int | None,
        visible: Visibility | None,
        visible_sessions: Callable[[], Collection[str]] | None,
    ) -> tuple[int, int | None]:
        """Refuse bad arguments; the queue bounds to use (events, bytes)."""
        if session_id is not None and (session_id.__class__ is not str or not session_id):
            raise ValueError(f"session_id must be a non-empty string or None, got {session_id!r}")
        if after is not None and (after.__class__ is not int or after < 0):
            raise ValueError(f"after must be a non-negative integer or None, got {after!r}")
        queue = self._max_queue if max_queue is None else _positive("max_queue", max_queue)
        if queue < self._fanout.chunk:
            raise ValueError(
                f"max_queue ({queue}) may not be below the bus's fanout_chunk "
                f"({self._fanout.chunk})"
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
        latest = self.last_seq if session_id is None else self.last_session_seq(session_id)
        if after is not None and after > latest:
            raise CursorInFuture(cursor=after, latest_cursor=latest, session_id=session_id)
        return queue, queue_bytes

    async def _read_page(
        self, session_id: str | None, after: int, limit: int, sessions: list[str] | None = None
    ) -> list[EventRecord]:
        """A replay page after ``after`` that holds everything delivered;
        ``sessions``: only those sessions' events of the all-sessions stream
        (none visible: no page is requested at all)."""
        if self._state != "running":
            self._refuse()
        access = self._commit.access
        if access is None or sessions == []:
            fanout = self._fanout
            delivered = (
                fanout.delivered_seq
                if session_id is None
                else fanout.delivered_session.get(session_id, 0)
            )
            if sessions is None and after < delivered:
                raise CursorExpired(cursor=after, oldest_cursor=delivered, session_id=session_id)
            return []
        page = await self._commit.consistent_read(
            lambda through: access.read_page(
                session_id,
                after,
                limit,
                sessions=sessions,
                max_bytes=self._page_bytes,
                through=through,
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
        access = self._commit.access
        if access is None:
            return 0
        self._commit.send_ahead()  # what is published goes first (the child answers in order)
        return await access.prune(keep_last, max_bytes, max_age_s)

    def subscriber_count(self, session_id: str | None = None) -> int:
        """Live subscriptions: all of them, or those of one session's stream."""
        return self._fanout.count(session_id)

    def stats(self) -> BusStats:
        """A snapshot of the counters since ``start()``."""
        c = self._commit
        return BusStats(
            published=c.seq - self._first_seq,
            committed=c.committed,
            delivered=self._fanout.delivered,
            batches=c.batches,
            largest_batch=c.largest_batch,
            pending=len(c.pending),
            subscribers=self.subscriber_count(),
            dropped_subscribers=self._fanout.dropped,
            replay_pages=self._replay_pages,
            replay_records=self._replay_records,
        )
