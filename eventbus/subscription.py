"""Subscription: one subscriber's ordered, gapless stream of EventRecords.

A subscription with a cursor starts by *catching up*: it reads what it
missed from the log, page by page, while the bus already fans new events out
to it. It is registered with the bus before its first log read, so every
event is either in the log when a read starts or fanned out to it
afterwards: nothing falls between the two. Events seen both ways are
dropped by cursor.

Until the consumer has once drained everything (the last short page and the
live events queued meanwhile), an overflowing queue costs nothing: every
fanned-out event was committed to the log first, so the queue is emptied and
the subscription goes back to reading the log. To rule out a gap, it only
trusts a read that *began after* the last overflow. Once it has caught up,
an overflow means the consumer is too slow: it is cut off (SubscriberTooSlow)
and the publisher never waits.

The queue is bounded twice: by a count of records (``max_queue``) and by
their encoded size (``max_bytes``), because a few large events (tool output)
can cost more memory than thousands of small ones.

A subscription may be *filtered* (``visible``): it then receives only the
events of the sessions the predicate accepts, live and from the log, and its
cursor moves forward by more than one where events it may not see lie in
between. Its log reads ask only for the sessions it may see
(``visible_sessions``), so catching up costs what it delivers.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from types import TracebackType

from eventbus.errors import CursorExpired, EventBusError, SubscriberTooSlow
from eventbus.record import EventRecord

PageReader = Callable[[int, int], Awaitable[list[EventRecord]]]
"""Reads up to ``limit`` logged events after a cursor: ``(after, limit) -> records``."""

Visibility = Callable[[str], bool]
"""Whether a filtered subscription may see a session's events: ``(session_id) -> bool``."""

DirectSink = Callable[[EventRecord], bool]
"""Passes a live record on at once (True), or declines it (False): see
``Subscription.deliver_directly``."""


class Subscription:
    """An async iterator of EventRecords for one session, or all sessions.

    Obtain one with ``await bus.subscribe(...)``. The cursor is ``session_seq``
    for a session stream and the global ``seq`` for the all-sessions stream;
    ``last_cursor`` is the cursor of the last record yielded. Iteration ends
    with StopAsyncIteration after ``close()``, with SubscriberTooSlow if the
    consumer fell behind, and with BusClosed when the bus shuts down (after
    the records already queued have been yielded). One task iterates at a time.

    ``max_bytes`` bounds the live queue's encoded size besides ``max_queue``;
    ``page_bytes`` is the byte bound of the log's replay pages (a short page
    that large may be cut, not the end); ``visible`` filters the stream by
    session (see the module docstring).
    """

    def __init__(
        self,
        *,
        session_id: str | None,
        after: int | None,
        max_queue: int,
        page_size: int,
        read_page: PageReader,
        on_close: Callable[[Subscription], None],
        replayable: bool,
        max_bytes: int | None = None,
        page_bytes: int | None = None,
        visible: Visibility | None = None,
    ) -> None:
        self.session_id = session_id
        self.max_queue = max_queue
        self.max_bytes = max_bytes
        self.visible = visible
        self._per_session = session_id is not None
        self._cursor = after
        self._page_size = page_size
        # A page the log cut by bytes holds at least this much (see _read_more).
        self._page_bytes = page_bytes
        self._read_page = read_page
        self._on_close = on_close
        # Reading: the log may hold events this subscription has not yielded.
        self._reading = after is not None
        # Tolerant: an overflow can be repaired from the log (not yet caught up).
        self._tolerant = after is not None and replayable
        self._page: deque[EventRecord] = deque()
        self._live: deque[EventRecord] = deque()
        # Encoded size of what _live holds (EventRecord.size).
        self._live_bytes = 0
        self._overflows = 0
        self._waiter: asyncio.Future[None] | None = None
        # Takes live records in the publisher's call while the consumer waits
        # with nothing queued (see deliver_directly).
        self._direct: DirectSink | None = None
        self._finished = False  # no more live records will arrive
        self._end: BaseException | None = None  # raised once the queues are drained
        self._iterating = False

    @property
    def last_cursor(self) -> int | None:
        """The cursor of the last record yielded (or the ``after`` it started from)."""
        return self._cursor

    @property
    def queued(self) -> int:
        """Live records waiting to be taken."""
        return len(self._live)

    @property
    def queued_bytes(self) -> int:
        """Encoded size of the live records waiting to be taken."""
        return self._live_bytes

    @property
    def catching_up(self) -> bool:
        """True until the consumer has caught up with the live stream once."""
        return self._tolerant

    @property
    def closed(self) -> bool:
        """True once no more live records will arrive (closed, cut off or bus closed)."""
        return self._finished

    def deliver_directly(self, sink: DirectSink | None) -> None:
        """Hand live records to ``sink`` in the publisher's own call (the bus's
        fan-out) while the consumer is waiting for the next record with nothing
        queued or left to read from the log, instead of waking the consumer's
        task: that wake-up waits for the rest of the loop's current iteration,
        which on a busy server is most of an event's way to a client.

        ``sink(record)`` returns True once it has passed the record on (the
        subscription then counts it as yielded: ``last_cursor`` moves) or
        False to decline it, and then it and what follows are queued for the
        consumer as usual. It must not raise nor wait. None stops it.
        """
        self._direct = sink

    # -- called by the bus (on the event loop) -------------------------------------------

    def _offer(self, records: list[EventRecord], size: int) -> int:
        """Queue freshly committed records (``size``: their encoded bytes, summed
        once by the bus for every subscriber); how many were queued, or -1 if
        this subscriber is cut off now."""
        if self._finished:
            return 0
        visible = self.visible
        incoming = size
        if visible is not None:
            records = [r for r in records if visible(r.session_id)]
            if not records:
                return 0
            incoming = 0
            for record in records:
                incoming += record.size
        direct = self._direct
        if (
            direct is not None
            and self._waiter is not None
            and not self._live
            and not self._reading
            and not self._page
        ):
            # The consumer waits with nothing ahead of these: pass them on now.
            taken = self._pass_on(direct, records)
            if taken == len(records):
                return taken
            records = records[taken:]
            incoming = 0
            for record in records:
                incoming += record.size
        # An empty queue takes any chunk, however large its events: a consumer
        # that keeps up is never cut off for the size of one chunk (the bus
        # keeps chunks to about a MiB; see eventbus.delivery.Fanout.deliver).
        over_count = len(self._live) + len(records) > self.max_queue
        if over_count or (
            self.max_bytes is not None
            and self._live
            and self._live_bytes + incoming > self.max_bytes
        ):
            if not self._tolerant:
                self._finish(
                    SubscriberTooSlow(
                        last_cursor=self._cursor,
                        session_id=self.session_id,
                        max_queue=self.max_queue,
                        max_bytes=None if over_count else self.max_bytes,
                    )
                )
                return -1
            # The log holds all of these: drop them and read it again.
            self._live.clear()
            self._live_bytes = 0
            self._overflows += 1
            self._reading = True
        self._live.extend(records)
        self._live_bytes += incoming
        self._wake()
        return len(records)

    def _pass_on(self, sink: DirectSink, records: list[EventRecord]) -> int:
        """How many of ``records`` (from the first) ``sink`` took, in order."""
        per_session = self._per_session
        taken = 0
        for record in records:
            cursor = record.cursor(per_session=per_session)
            if self._cursor is not None and cursor != self._cursor + 1 and self.visible is None:
                break  # not the next one: the consumer's checks see it (see _next_live)
            if not sink(record):
                break
            self._cursor = cursor
            taken += 1
        return taken

    def _finish(self, end: BaseException | None) -> None:
        """No more live records; iteration ends with ``end`` (None: plain stop)."""
        if self._finished:
            return
        self._finished = True
        self._end = end
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def _prime(self) -> None:
        """Read the first page now, so a bad cursor fails at subscribe time."""
        if self._reading:
            await self._read_more()

    # -- iteration -----------------------------------------------------------------------

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> EventRecord:
        if self._iterating:
            raise RuntimeError("a Subscription is iterated by one task at a time")
        self._iterating = True
        try:
            return await self._next()
        finally:
            self._iterating = False

    async def _next(self) -> EventRecord:
        # Each pass yields a record, ends, reads one page, or waits for the bus;
        # it cannot spin: reads and waits both need new events to come back.
        while True:
            if self._finished and self._end is None:
                raise StopAsyncIteration  # closed by its owner: stop at once
            if self._page:
                return self._take(self._page.popleft())
            if self._reading:
                if self._end is not None:
                    raise self._end
                try:
                    await self._read_more()
                except EventBusError as exc:
                    if self._end is not None:
                        # The bus closed while the read was in flight; say so.
                        raise self._end from exc
                    # An expired cursor or a failed log ends the subscription for good.
                    self._finish(exc)
                    self._on_close(self)
                    raise
                continue
            record = self._next_live()
            if record is not None:
                return record
            # Nothing in the log or the queue that was not yielded: caught up.
            self._tolerant = False
            if self._end is not None:
                if isinstance(self._end, SubscriberTooSlow):
                    # Name the cursor of the last record actually handed out.
                    self._end = SubscriberTooSlow(
                        last_cursor=self._cursor,
                        session_id=self.session_id,
                        max_queue=self.max_queue,
                        max_bytes=self._end.max_bytes,
                    )
                raise self._end
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None

    def _take(self, record: EventRecord) -> EventRecord:
        self._cursor = record.cursor(per_session=self._per_session)
        return record

    def _next_live(self) -> EventRecord | None:
        live = self._live
        while live:
            record = live.popleft()
            self._live_bytes -= record.size
            cursor = record.cursor(per_session=self._per_session)
            if self._cursor is None or cursor == self._cursor + 1:
                self._cursor = cursor
                return record
            if cursor <= self._cursor:
                continue  # already yielded from the log
            if self.visible is not None:
                # Filtered: the events in between belong to sessions it may not see.
                self._cursor = cursor
                return record
            # Fan-out is contiguous by construction; a hole here is a bus bug.
            raise EventBusError(
                f"internal error: event stream jumped from cursor {self._cursor} to {cursor}"
            )
        return None

    async def _read_more(self) -> None:
        assert self._cursor is not None
        overflows_before = self._overflows
        page = await self._read_page(self._cursor, self._page_size)
        if page and self.visible is None:
            # (A filtered page skips what it may not see; the log checks its expiry.)
            first = page[0].cursor(per_session=self._per_session)
            if first != self._cursor + 1:
                # Pruned between the expiry check and this read.
                raise CursorExpired(
                    cursor=self._cursor, oldest_cursor=first - 1, session_id=self.session_id
                )
        self._page.extend(page)
        if len(page) < self._page_size and self._overflows == overflows_before:
            if self._page_bytes is not None and page:
                size = 0
                for record in page:
                    size += record.size
                if size >= self._page_bytes:
                    # Maybe cut by bytes, not the end of the log: read on (at worst
                    # one more read that comes back empty).
                    return
            # The log is exhausted and the queue holds everything fanned out since.
            self._reading = False

    # -- closing -------------------------------------------------------------------------

    def close(self) -> None:
        """Stop receiving; iteration ends after nothing more. Idempotent."""
        if not self._finished:
            self._page.clear()
            self._live.clear()
            self._live_bytes = 0
            self._finish(None)
        self._on_close(self)

    async def aclose(self) -> None:
        self.close()

    async def __aenter__(self) -> Subscription:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        scope = "all sessions" if self.session_id is None else repr(self.session_id)
        state = "catching up" if self._tolerant else "live"
        return f"<Subscription {scope} {state} cursor={self._cursor} queued={len(self._live)}>"
