"""Session ownership: one replica holds a session's lease and runs its turns.

A lease is ``SET owner:<session> <replica> NX PX ttl``. The holder renews
all its leases from one heartbeat task (a script extends only the keys it
still holds), and deletes them on a clean shutdown. The owner's running turns
are listed in ``running:<session>`` (turn id -> replica) by the event log, in
the step that stores their ``turn.started`` and end events (see
``RedisEventLog``): if the lease lapses while turns are listed, the replica
died mid-turn, and a surviving replica's ``LapseWatcher`` claims them (one
script, so exactly one replica does) and hands them to a callback that ends
them ``replica_lost``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from eventbus.cluster.keys import Keys
from eventbus.cluster.scripts import CLAIM_LOST, RELEASE, RENEW
from eventbus.cluster.streams import decoded

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LostTurns:
    """Running turns of a session whose owner's lease lapsed."""

    session_id: str
    turns: dict[str, str]  # turn id -> the replica that ran it


OnLost = Callable[[LostTurns], Awaitable[None]]
OnLeaseLost = Callable[[str], None]


class Leases:
    """This replica's leases: acquire, renew (heartbeat), release, look up.

    ``on_lease_lost(session_id)`` is called when a renewal finds a lease gone
    or taken (this replica must stop running that session's turns).
    """

    def __init__(
        self,
        client: aioredis.Redis,
        replica_id: str,
        *,
        ttl_ms: int = 10_000,
        keys: Keys | None = None,
        on_lease_lost: OnLeaseLost | None = None,
    ) -> None:
        if ttl_ms < 30:
            raise ValueError(f"ttl_ms must be at least 30, got {ttl_ms}")
        self._redis = client
        self.replica_id = replica_id
        self.ttl_ms = ttl_ms
        self.keys = keys or Keys()
        self._held: set[str] = set()
        self._renew = client.register_script(RENEW)
        self._release = client.register_script(RELEASE)
        self._on_lease_lost = on_lease_lost
        self._task: asyncio.Task[None] | None = None

    @property
    def held(self) -> frozenset[str]:
        return frozenset(self._held)

    async def acquire(self, session_id: str) -> bool:
        """Take the session's lease if nobody holds it (or this replica already does)."""
        key = self.keys.owner(session_id)
        if await self._redis.set(key, self.replica_id, nx=True, px=self.ttl_ms):
            self._held.add(session_id)
            return True
        if decoded(await self._redis.get(key)) == self.replica_id:
            self._held.add(session_id)
            return True
        return False

    async def try_adopt(self, session_id: str) -> bool:
        """Adopt a session whose owner is gone; False if someone holds it.

        The caller checks first that it can reach the workspace."""
        return await self.acquire(session_id)

    async def owner_of(self, session_id: str) -> str | None:
        """The replica holding the session's lease, or None."""
        return decoded(await self._redis.get(self.keys.owner(session_id)))

    async def renew(self) -> list[str]:
        """Extend every held lease once; the sessions whose lease was lost."""
        sessions = sorted(self._held)
        if not sessions:
            return []
        flags = await self._renew(
            keys=[self.keys.owner(s) for s in sessions], args=[self.replica_id, self.ttl_ms]
        )
        lost = [s for s, ok in zip(sessions, flags, strict=True) if not int(ok)]
        for session_id in lost:
            self._held.discard(session_id)
            if self._on_lease_lost is not None:
                self._on_lease_lost(session_id)
        return lost

    async def release(self, session_id: str) -> bool:
        """Give the lease up (only if held by this replica)."""
        self._held.discard(session_id)
        return bool(await self._release(keys=[self.keys.owner(session_id)], args=[self.replica_id]))

    async def start(self) -> None:
        """Start the heartbeat: renewals every third of the TTL."""
        self._task = asyncio.create_task(self._beat(), name="cluster-lease-heartbeat")

    async def _beat(self) -> None:
        while True:
            await asyncio.sleep(self.ttl_ms / 3000)
            try:
                await self.renew()
            except RedisError as exc:
                # Leases may lapse meanwhile; the next renewal reports which.
                log.warning("lease renewal failed: %s", exc)

    async def close(self, *, release: bool = True) -> None:
        """Stop the heartbeat and (clean shutdown) release every lease."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if release:
            for session_id in sorted(self._held):
                with contextlib.suppress(RedisError):
                    await self.release(session_id)


class LapseWatcher:
    """Finds sessions with running turns whose owner's lease lapsed.

    Polls every ``interval_s`` (a fraction of the lease TTL); each lost
    session is claimed atomically by exactly one watching replica, whose
    ``on_lost`` then publishes ``turn.failed`` (reason ``replica_lost``) and
    resolves the session's pending confirmations ``cancelled``. If
    ``on_lost`` raises, the turns are listed again for the next pass.
    """

    def __init__(
        self,
        client: aioredis.Redis,
        on_lost: OnLost,
        *,
        interval_s: float = 1.0,
        keys: Keys | None = None,
    ) -> None:
        self._redis = client
        self._on_lost = on_lost
        self.interval_s = interval_s
        self.keys = keys or Keys()
        self._claim = client.register_script(CLAIM_LOST)
        self._task: asyncio.Task[None] | None = None

    async def check(self) -> list[LostTurns]:
        """One pass; what this replica claimed and handed to ``on_lost``."""
        claimed: list[LostTurns] = []
        for raw in await self._redis.smembers(self.keys.running_sessions):
            session_id = str(raw)
            flat = await self._claim(
                keys=[
                    self.keys.owner(session_id),
                    self.keys.running(session_id),
                    self.keys.running_sessions,
                ],
                args=[session_id],
            )
            if not flat:
                continue
            lost = LostTurns(session_id, dict(zip(flat[::2], flat[1::2], strict=True)))
            try:
                await self._on_lost(lost)
            except Exception:
                log.exception("handling the lost turns of %s failed; retrying", session_id)
                async with self._redis.pipeline(transaction=True) as pipe:
                    pipe.hset(self.keys.running(session_id), mapping=dict(lost.turns.items()))
                    pipe.sadd(self.keys.running_sessions, session_id)
                    await pipe.execute()
                continue
            claimed.append(lost)
        return claimed

    async def start(self) -> None:
        self._task = asyncio.create_task(self._watch(), name="cluster-lapse-watcher")

    async def _watch(self) -> None:
        while True:
            try:
                await self.check()
            except RedisError as exc:
                log.warning("lapse watcher: %s", exc)
            await asyncio.sleep(self.interval_s)

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
