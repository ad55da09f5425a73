"""Delivery: the live subscribers of a bus and how visible events reach them.

``Fanout`` holds the subscriptions (the all-sessions ones and each session's)
and hands them each event the commit side made visible (eventbus.commit), in
``seq`` order, each event once: ``delivered_seq`` is the newest event fanned
out, and the next chunk must start right after it (checked in debug mode,
see eventbus.bus). A subscriber whose queue cannot take a chunk is cut off
with an explicit end (SubscriberTooSlow, see eventbus.subscription), never
skipped. A subscription may pass records straight on to its socket
(``Subscription.deliver_directly``); that happens inside ``_offer``, so the
order is the same either way.

It runs in the publisher's call and the log's reply callback
(``deliver_now``: one chunk every queue can take) and in the bus's writer
task (``deliver``: yields once before a chunk that would overflow a queue).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from eventbus.record import EventRecord
from eventbus.subscription import Subscription

# Fan-out chunks stop after this many bytes (besides their count): see Fanout.deliver.
FANOUT_CHUNK_BYTES = 1024 * 1024


class InvariantBroken(AssertionError):
    """A bus invariant (eventbus.bus's module docstring) does not hold: a bug."""


class Progress:
    """Wakes whoever waits for the bus to move (``flush``, ``durable``, a replay
    waiting for a retried commit). Each signal wakes the current waiters."""

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def signal(self) -> None:
        event, self._event = self._event, asyncio.Event()
        event.set()

    async def wait(self) -> None:
        await self._event.wait()


class Fanout:
    """The subscriber lists and the fan-out of visible events to them.

    ``chunk`` bounds the events offered at once; ``check`` turns on the
    debug-mode checks; ``track_sessions`` keeps each session's newest
    delivered ``session_seq`` (a bus without a log checks cursors against it).
    """

    def __init__(self, *, chunk: int, progress: Progress, track_sessions: bool, check: bool):
        self.chunk = chunk
        self.progress = progress
        self.global_subs: list[Subscription] = []
        self.session_subs: dict[str, list[Subscription]] = {}
        self.delivered_seq = 0  # the newest event fanned out
        self.delivered_session: dict[str, int] = {}
        self._track_sessions = track_sessions
        self._check = check
        self.closed = False
        self.delivered = 0  # records queued, summed over subscribers
        self.dropped = 0

    # -- subscribers -----------------------------------------------------------------

    def register(self, sub: Subscription) -> None:
        if sub.session_id is None:
            self.global_subs.append(sub)
        else:
            self.session_subs.setdefault(sub.session_id, []).append(sub)

    def unregister(self, sub: Subscription) -> None:
        subs = self.global_subs if sub.session_id is None else self.session_subs.get(sub.session_id)
        if subs is not None and sub in subs:
            subs.remove(sub)
            if sub.session_id is not None and not subs:
                del self.session_subs[sub.session_id]

    def count(self, session_id: str | None = None) -> int:
        if session_id is not None:
            return len(self.session_subs.get(session_id, ()))
        return len(self.global_subs) + sum(len(s) for s in self.session_subs.values())

    def finish(self, end: BaseException) -> None:
        """End every subscription with ``end`` (after what each holds)."""
        self.closed = True
        for sub in [*self.global_subs, *(s for subs in self.session_subs.values() for s in subs)]:
            sub._finish(end)
        self.global_subs.clear()
        self.session_subs.clear()

    # -- fanning out -----------------------------------------------------------------

    def deliver_now(self, batch: list[EventRecord]) -> bool:
        """Fan out visible records at once (from ``publish`` or a commit's reply
        callback) when they are one chunk that every queue can take (the usual
        case); else False, and the writer fans them out with ``deliver``,
        which may yield for a queue to drain."""
        if not self.global_subs and not self.session_subs:
            self._advance(batch)  # nobody to hand them to
            return True
        if self.closed or len(batch) > self.chunk:
            return False
        size = encoded_size(batch)
        if size >= FANOUT_CHUNK_BYTES or self._someone_full(batch, size):
            return False
        self._fan_out(batch, size)
        return True

    async def deliver(
        self, batch: list[EventRecord], consumed: Callable[[int], None] | None = None
    ) -> None:
        """Fan out visible records a chunk at a time (``consumed(n)`` after each).

        Before a chunk that would overflow some subscriber's queue, it yields
        to the loop once so that subscriber can drain; one that still cannot
        take the chunk afterwards is too slow and is cut off. Without such a
        subscriber it does not yield: on a busy loop every yield costs a
        whole iteration. A chunk holds ``chunk`` events at most and stops
        after FANOUT_CHUNK_BYTES, so that queues bounded in bytes get the
        same chance to drain between chunks of large events.
        """
        start, end = 0, len(batch)
        while start < end:
            stop = min(start + self.chunk, end)
            size = 0
            for i in range(start, stop):
                size += batch[i].size
                if size >= FANOUT_CHUNK_BYTES:
                    stop = i + 1
                    break
            chunk = batch[start:stop]
            start = stop
            if self._someone_full(chunk, size):
                await asyncio.sleep(0)
            self._fan_out(chunk, size)
            if consumed is not None:
                consumed(len(chunk))
        self.progress.signal()

    def _someone_full(self, chunk: list[EventRecord], size: int) -> bool:
        # Counted over the whole chunk: an upper bound for session and filtered
        # subscribers, which take only part of it (at worst one needless yield).
        incoming = len(chunk)
        for sub in self.global_subs:
            if _would_overflow(sub, incoming, size):
                return True
        for subs in self.session_subs.values():
            for sub in subs:
                if _would_overflow(sub, incoming, size):
                    return True
        return False

    def _advance(self, chunk: list[EventRecord]) -> None:
        """Move the watermarks past ``chunk``: the next event after the last one
        fanned out, every one once (checked in debug mode)."""
        if self._check:
            expected = self.delivered_seq + 1
            for record in chunk:
                if record.seq != expected:
                    raise InvariantBroken(
                        f"fan-out of seq {record.seq} where {expected} comes next: "
                        "events must reach subscribers once each, in seq order"
                    )
                expected += 1
        if self._track_sessions:
            for record in chunk:
                self.delivered_session[record.session_id] = record.session_seq
        self.delivered_seq = chunk[-1].seq

    def _fan_out(self, chunk: list[EventRecord], size: int) -> None:
        """Offer a chunk (``size``: its encoded bytes) to every subscriber."""
        self._advance(chunk)
        dropped: list[Subscription] = []
        delivered = 0
        for sub in self.global_subs:
            queued = sub._offer(chunk, size)
            if queued >= 0:
                delivered += queued
            else:
                dropped.append(sub)
        if self.session_subs:
            by_session: dict[str, list[EventRecord]] = {}
            session_subs = self.session_subs
            for record in chunk:
                if record.session_id in session_subs:
                    by_session.setdefault(record.session_id, []).append(record)
            for session_id, records in by_session.items():
                part = size if len(records) == len(chunk) else encoded_size(records)
                for sub in session_subs[session_id]:
                    queued = sub._offer(records, part)
                    if queued >= 0:
                        delivered += queued
                    else:
                        dropped.append(sub)
        self.delivered += delivered
        for sub in dropped:
            self.dropped += 1
            self.unregister(sub)


def encoded_size(records: list[EventRecord]) -> int:
    size = 0
    for record in records:
        size += record.size
    return size


def _would_overflow(sub: Subscription, incoming: int, size: int) -> bool:
    if sub.queued + incoming > sub.max_queue:
        return True
    # An empty queue takes any chunk (see Subscription._offer).
    return sub.max_bytes is not None and sub.queued > 0 and sub.queued_bytes + size > sub.max_bytes
