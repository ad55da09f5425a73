"""ClusterBus: an ``eventbus.interface.Bus`` on the Redis log, for one replica.

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

import orjson
import redis.asyncio as aioredis

from eventbus.cluster.keys import Keys
from eventbus.cluster.live import LiveFeed
from eventbus.cluster.log import MAX_BATCH, EventDraft, RedisEventLog
from eventbus.encoding import encode_json
from eventbus.errors import (
    BusClosed,
    BusNotStarted,
    EventLogError,
    EventNotSerializable,
    UnknownEventType,
)
from eventbus.interface import BusStats
from eventbus.subscription import Subscription, Visibility
from protocol.catalog import EventType
from protocol.payloads import Payload

_TYPE_NAMES: dict[str, str] = {t.value: t.value for t in EventType}


class ClusterBus:
    """The ``Bus`` protocol on Redis (publish/subscribe/flush/close as ``EventBus``).

    ``client`` decodes responses; the live feed gets its own connection
    from the same pool for its blocking reads. ``replica_id`` and
    ``lease_ttl_ms`` (a server's replica) make the log keep ownership as the
    events are stored (see ``RedisEventLog``).
    """

    def __init__(
        self,
        client: aioredis.Redis,
        *,
        keys: Keys | None = None,
        on_failure: Callable[[BaseException], None] | None = None,
        max_queue: int = 10_000,
        replica_id: str | None = None,
        lease_ttl_ms: int = 10_000,
    ) -> None:
        self.log = RedisEventLog(client, keys, replica_id=replica_id, lease_ttl_ms=lease_ttl_ms)
        self.feed = LiveFeed(client, self.log, max_queue=max_queue)
        self._pending: list[EventDraft] = []
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._writer: asyncio.Task[None] | None = None
        self._state = "new"
        self._on_failure = on_failure
        self._failure: BaseException | None = None
        self.published = 0
        self.committed = 0
        self._batches = 0
        self._largest_batch = 0
        # The newest session_seq this replica appended per session (its own
        # events only: another replica's are not counted here).
        self._session_seqs: dict[str, int] = {}

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

    def emit(self, payload: Payload, *, session_id: str, turn_id: str | None = None) -> None:
        """Publish a typed payload (its class names the type), as ``EventBus.emit``.

        The payload is encoded as the embedded bus encodes it (orjson, the same
        fallback for nested models), so both logs hold the same ``data``."""
        event_type = getattr(payload.__class__, "event_type", None)
        name = _TYPE_NAMES.get(event_type) if isinstance(event_type, str) else None
        if name is None:
            raise UnknownEventType(f"{payload.__class__.__name__} (no catalog event_type)")
        try:
            data = orjson.loads(encode_json(payload))
        except TypeError as exc:
            raise EventNotSerializable(f"{name} data is not JSON-serializable: {exc}") from exc
        self.publish(name, data, session_id=session_id, turn_id=turn_id)

    # -- the rest of the Bus protocol ---------------------------------------------

    @property
    def running(self) -> bool:
        return self._state == "running"

    @property
    def failure(self) -> BaseException | None:
        """Why the bus stopped (a failed append), or None."""
        return self._failure

    @property
    def fault(self) -> str | None:
        """A Redis error the live feed is retrying through (None when well)."""
        return self.feed.error

    @property
    def last_seq(self) -> int:
        """The newest ``seq`` this replica has delivered to its subscribers."""
        return self.feed.delivered_seq

    @property
    def local_log(self) -> None:
        """No SQLite file of this process holds the events: Redis does."""
        return None

    def last_session_seq(self, session_id: str) -> int:
        """The newest ``session_seq`` this replica appended for the session."""
        return self._session_seqs.get(session_id, 0)

    def subscriber_count(self, session_id: str | None = None) -> int:
        return self.feed.subscriber_count()

    def stats(self) -> BusStats:
        return BusStats(
            published=self.published,
            committed=self.committed,
            delivered=0,
            batches=self._batches,
            largest_batch=self._largest_batch,
            pending=len(self._pending),
            subscribers=self.feed.subscriber_count(),
            dropped_subscribers=0,
        )

    async def prune(
        self,
        *,
        keep_last: int | None = None,
        max_bytes: int | None = None,
        max_age_s: float | None = None,
    ) -> int:
        """Retention on the Redis streams (see ``RedisEventLog.prune``; no ``max_bytes``)."""
        if keep_last is None and max_age_s is None:
            return 0  # byte retention alone: Redis's maxmemory bounds it instead
        return await self.log.prune(keep_last, max_age_s=max_age_s)

    async def _write(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._pending:
                batch = self._pending[:MAX_BATCH]
                del self._pending[:MAX_BATCH]
                try:
                    records = await self.log.append(batch)
                except EventLogError as exc:
                    self._fail(exc)
                    return
                self.committed += len(batch)
                self._batches += 1
                self._largest_batch = max(self._largest_batch, len(batch))
                for record in records:
                    self._session_seqs[record.session_id] = record.session_seq
            self._idle.set()

    def _fail(self, exc: BaseException) -> None:
        self._failure = exc
        self._state = "closed"
        self._pending.clear()
        self._idle.set()
        if self._on_failure is not None:
            self._on_failure(exc)

    async def flush(self) -> None:
        """Wait until everything published so far is in Redis (or the bus failed)."""
        await self._idle.wait()
        if self._failure is not None:
            raise BusClosed(f"the cluster bus stopped: {self._failure}") from self._failure

    async def durable(self) -> None:
        """Wait until everything published so far would survive a crash: here,
        once it is in Redis (``flush``)."""
        await self.flush()

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
