"""ClusterBus: the EventBus interface on the Redis log, for one replica.

``publish`` never waits, as ``EventBus.publish``: it queues a draft, and one
writer task appends what is queued as one script call (one batch), in
publish order. Redis numbers the events; the replica's subscribers get them
from its ``LiveFeed``, after Redis accepted them. If an append fails the bus
stops, as the embedded bus does after a log failure (``on_failure`` is told;
the server exits and is restarted): an append whose outcome is unknown is
never retried, so no event is ever stored twice.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Collection, Mapping
from typing import Any

import redis.asyncio as aioredis

from eventbus.cluster.keys import Keys
from eventbus.cluster.live import LiveFeed
from eventbus.cluster.log import MAX_BATCH, EventDraft, RedisEventLog
from eventbus.errors import BusClosed, BusNotStarted, EventLogError
from eventbus.subscription import Subscription, Visibility


class ClusterBus:
    """publish/subscribe/flush/close like ``eventbus.EventBus``, on Redis.

    ``client`` decodes responses; the live feed gets its own connection
    from the same pool for its blocking reads.
    """

    def __init__(
        self,
        client: aioredis.Redis,
        *,
        keys: Keys | None = None,
        on_failure: Callable[[BaseException], None] | None = None,
        max_queue: int = 10_000,
    ) -> None:
        self.log = RedisEventLog(client, keys)
        self.feed = LiveFeed(client, self.log, max_queue=max_queue)
        self._pending: list[EventDraft] = []
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._writer: asyncio.Task[None] | None = None
        self._state = "new"
        self._on_failure = on_failure
        self.failure: BaseException | None = None
        self.published = 0
        self.committed = 0

    async def start(self) -> None:
        await self.feed.start()
        self._writer = asyncio.create_task(self._write(), name="cluster-bus-writer")
        self._state = "running"

    def publish(
        self,
        type: str,
        data: Mapping[str, Any],
        *,
        session_id: str,
        turn_id: str | None = None,
    ) -> None:
        """Queue an event; Redis numbers it when the writer appends it.

        Raises InvalidEvent at once for a bad type, id or data."""
        if self._state != "running":
            if self._state == "new":
                raise BusNotStarted("the cluster bus was used before start()")
            raise BusClosed("the cluster bus is closed")
        draft = EventDraft(type=type, session_id=session_id, data=dict(data), turn_id=turn_id)
        draft.body()  # validates now, so the caller gets the error, not the writer
        self._pending.append(draft)
        self.published += 1
        self._idle.clear()
        self._wake.set()

    async def _write(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._pending:
                batch = self._pending[:MAX_BATCH]
                del self._pending[:MAX_BATCH]
                try:
                    await self.log.append(batch)
                except EventLogError as exc:
                    self._fail(exc)
                    return
                self.committed += len(batch)
            self._idle.set()

    def _fail(self, exc: BaseException) -> None:
        self.failure = exc
        self._state = "closed"
        self._pending.clear()
        self._idle.set()
        if self._on_failure is not None:
            self._on_failure(exc)

    async def flush(self) -> None:
        """Wait until everything published so far is in Redis (or the bus failed)."""
        await self._idle.wait()
        if self.failure is not None:
            raise BusClosed(f"the cluster bus stopped: {self.failure}") from self.failure

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
        """See ``LiveFeed.subscribe`` (the same contract as ``EventBus.subscribe``)."""
        return await self.feed.subscribe(
            session_id=session_id,
            after=after,
            max_queue=max_queue,
            max_queue_bytes=max_queue_bytes,
            visible=visible,
            visible_sessions=visible_sessions,
        )

    async def close(self) -> None:
        """Append what is queued, then stop the writer and the feed."""
        if self._state == "running":
            with contextlib.suppress(BusClosed):
                await self.flush()
        self._state = "closed"
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await writer
        await self.feed.close()
