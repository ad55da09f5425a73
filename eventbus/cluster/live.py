"""LiveFeed: one replica's live view of the cluster's event log.

One reader task per replica follows the global stream with XREAD BLOCK and
offers every event, in ``seq`` order, to the replica's local subscribers.
Every replica's events, its own included, reach its clients this way, so
they are in the one order Redis gave them and were accepted by Redis before
any client sees them.

Subscribers are ``eventbus.subscription.Subscription``s, used as the
embedded bus uses them: registered before their first log read, so each
event is either in Redis when a read starts or offered afterwards; events
seen both ways are dropped by cursor. Replay then live has no gap and no
repeat, as in the embedded bus.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Collection

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from eventbus.cluster.log import RedisEventLog, record_of
from eventbus.cluster.streams import xread_one
from eventbus.errors import BusClosed, CursorInFuture, SubscriberTooSlow
from eventbus.record import EventRecord
from eventbus.subscription import Subscription, Visibility

log = logging.getLogger(__name__)

READ_COUNT = 1000
BLOCK_MS = 1000
CHUNK = 256
RETRY_S = (0.05, 0.1, 0.2, 0.5, 1.0)


class LiveFeed:
    """Follows the global stream and fans it out to local Subscriptions.

    ``await start()`` begins after the newest event; ``subscribe`` mirrors
    ``EventBus.subscribe``. While Redis is unreachable the reader retries
    with backoff and resumes where it stopped: nothing is skipped.
    """

    def __init__(
        self,
        client: aioredis.Redis,
        log: RedisEventLog,
        *,
        max_queue: int = 10_000,
        max_queue_bytes: int | None = 64 * 1024 * 1024,
        page_size: int = 500,
        page_bytes: int | None = 4 * 1024 * 1024,
    ) -> None:
        self._redis = client
        self._log = log
        self._max_queue = max_queue
        self._max_queue_bytes = max_queue_bytes
        self._page_size = page_size
        self._page_bytes = page_bytes
        self._global: list[Subscription] = []
        self._sessions: dict[str, list[Subscription]] = {}
        self._task: asyncio.Task[None] | None = None
        self._last_id = "0-0"
        self._closing = False
        self.delivered_seq = 0
        self.error: str | None = None  # the last Redis error while following, None when well

    async def start(self) -> None:
        """Start following after the newest event Redis holds now."""
        self.delivered_seq = await self._log.last_seq()
        self._last_id = f"{self.delivered_seq}-0"
        self._task = asyncio.create_task(self._follow(), name="cluster-live-feed")

    async def close(self) -> None:
        """Stop the reader; every subscription ends with BusClosed."""
        task, self._task = self._task, None
        self._closing = True
        if task is not None:
            # A cancelled blocking read may surface as a connection error inside
            # redis-py instead of CancelledError: the flag ends the loop either way.
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        end = BusClosed("the cluster live feed is closed")
        for sub in [*self._global, *(s for subs in self._sessions.values() for s in subs)]:
            sub._finish(end)
        self._global.clear()
        self._sessions.clear()

    async def _follow(self) -> None:
        failures = 0
        while not self._closing:
            try:
                entries = await xread_one(
                    self._redis, self._log.keys.global_stream, self._last_id, READ_COUNT, BLOCK_MS
                )
            except RedisError as exc:
                if self._closing:
                    return
                self.error = str(exc)
                delay = RETRY_S[min(failures, len(RETRY_S) - 1)]
                failures += 1
                log.warning("live feed: redis read failed (%s); retrying in %ss", exc, delay)
                await asyncio.sleep(delay)
                continue
            failures = 0
            self.error = None
            if not entries:
                continue
            self._last_id = entries[-1][0]
            records = [record_of(e, global_entry=True) for e in entries]
            if records[0].seq != self.delivered_seq + 1:
                self._lost_events(records[0].seq)
            await self._deliver(records)

    def _lost_events(self, first: int) -> None:
        """Retention trimmed events this feed had not read yet (it lagged that
        far behind). Every live subscription is cut off as too slow: resuming
        from its last cursor replays from Redis, which either has the events
        or raises CursorExpired (the explicit close), never a silent gap."""
        log.warning(
            "live feed: events %s..%s were pruned unread", self.delivered_seq + 1, first - 1
        )
        for sub in self._all_subs():
            sub._finish(
                SubscriberTooSlow(
                    last_cursor=sub.last_cursor, session_id=sub.session_id, max_queue=sub.max_queue
                )
            )
            self._unregister(sub)

    async def _deliver(self, records: list[EventRecord]) -> None:
        for start in range(0, len(records), CHUNK):
            chunk = records[start : start + CHUNK]
            size = sum(len(r.text) for r in chunk)
            if self._someone_full(len(chunk), size):
                await asyncio.sleep(0)  # let a consumer drain before it is cut off
            self._fan_out(chunk, size)
            self.delivered_seq = chunk[-1].seq

    def _all_subs(self) -> list[Subscription]:
        return [*self._global, *(s for subs in self._sessions.values() for s in subs)]

    def _someone_full(self, incoming: int, size: int) -> bool:
        for sub in self._all_subs():
            if sub.queued + incoming > sub.max_queue:
                return True
            if sub.max_bytes is not None and sub.queued and sub.queued_bytes + size > sub.max_bytes:
                return True
        return False

    def _fan_out(self, chunk: list[EventRecord], size: int) -> None:
        dropped: list[Subscription] = []
        for sub in self._global:
            if sub._offer(chunk, size) < 0:
                dropped.append(sub)
        if self._sessions:
            by_session: dict[str, list[EventRecord]] = {}
            for record in chunk:
                if record.session_id in self._sessions:
                    by_session.setdefault(record.session_id, []).append(record)
            for session_id, part in by_session.items():
                part_size = sum(len(r.text) for r in part)
                for sub in self._sessions[session_id]:
                    if sub._offer(part, part_size) < 0:
                        dropped.append(sub)
        for sub in dropped:
            self._unregister(sub)

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
        """Like ``EventBus.subscribe``: replay after ``after`` from Redis, then live.

        Raises CursorInFuture beyond the newest event and CursorExpired for a
        pruned cursor (at subscribe time, as the embedded bus does).
        """
        if self._task is None:
            raise BusClosed("the cluster live feed is not running")
        if (visible is None) != (visible_sessions is None):
            raise ValueError("visible and visible_sessions go together: pass both or neither")
        if visible is not None and session_id is not None:
            raise ValueError("visible filters the all-sessions stream only (session_id=None)")
        if after is not None:
            if session_id is None:
                latest = await self._log.last_seq()
            else:
                latest = await self._log.last_session_seq(session_id)
            if after > latest:
                raise CursorInFuture(cursor=after, latest_cursor=latest, session_id=session_id)
        log_ = self._log

        async def read_page(cursor: int, limit: int) -> list[EventRecord]:
            if visible_sessions is None:
                return await log_.read_page(session_id, cursor, limit, max_bytes=self._page_bytes)
            return await log_.read_page(
                None, cursor, limit, sessions=sorted(visible_sessions()), max_bytes=self._page_bytes
            )

        sub = Subscription(
            session_id=session_id,
            after=after,
            max_queue=max_queue or self._max_queue,
            page_size=self._page_size,
            page_bytes=self._page_bytes,
            read_page=read_page,
            on_close=self._unregister,
            replayable=True,
            max_bytes=max_queue_bytes or self._max_queue_bytes,
            visible=visible,
        )
        # Registered before the first read: see the module docstring.
        if session_id is None:
            self._global.append(sub)
        else:
            self._sessions.setdefault(session_id, []).append(sub)
        try:
            await sub._prime()
        except BaseException:
            sub.close()
            raise
        return sub

    def _unregister(self, sub: Subscription) -> None:
        subs = self._global if sub.session_id is None else self._sessions.get(sub.session_id)
        if subs is not None and sub in subs:
            subs.remove(sub)
            if sub.session_id is not None and not subs:
                del self._sessions[sub.session_id]

    def subscriber_count(self) -> int:
        """Local subscriptions, all streams."""
        return len(self._all_subs())
