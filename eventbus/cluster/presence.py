"""Presence: which clients are attached to a session, on every replica.

Each replica keeps one hash per session it has clients of,
``presence:<session>:<replica>`` (client id -> JSON description), with a TTL
its heartbeat refreshes, and adds its id to ``presence:<session>``. Reading
takes the union of the hashes that still exist: a dead replica's clients
vanish when its TTL runs out, and a reader drops the replica from the index
(the index itself has no TTL: replicas' TTLs differ, and one replica's must
not end another's entry).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from eventbus.cluster.keys import Keys


class Presence:
    """This replica's attached clients, and the cluster-wide view."""

    def __init__(
        self,
        client: aioredis.Redis,
        replica_id: str,
        *,
        ttl_ms: int = 15_000,
        keys: Keys | None = None,
    ) -> None:
        self._redis = client
        self.replica_id = replica_id
        self.ttl_ms = ttl_ms
        self.keys = keys or Keys()
        self._local: dict[str, int] = {}  # session id -> attached clients here
        self._task: asyncio.Task[None] | None = None

    async def attach(self, session_id: str, client_id: str, info: dict[str, Any]) -> None:
        key = self.keys.presence(session_id, self.replica_id)
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.hset(key, client_id, json.dumps({**info, "replica_id": self.replica_id}))
            pipe.pexpire(key, self.ttl_ms)
            pipe.sadd(self.keys.presence_replicas(session_id), self.replica_id)
            await pipe.execute()
        self._local[session_id] = self._local.get(session_id, 0) + 1

    async def detach(self, session_id: str, client_id: str) -> None:
        await self._redis.hdel(self.keys.presence(session_id, self.replica_id), client_id)
        left = self._local.get(session_id, 1) - 1
        if left <= 0:
            self._local.pop(session_id, None)
        else:
            self._local[session_id] = left

    async def clients(self, session_id: str) -> list[dict[str, Any]]:
        """Every attached client of the session, on any live replica."""
        replicas = sorted(
            str(r) for r in await self._redis.smembers(self.keys.presence_replicas(session_id))
        )
        async with self._redis.pipeline(transaction=False) as pipe:
            for replica in replicas:
                pipe.hgetall(self.keys.presence(session_id, replica))
            hashes: list[dict[str, str]] = await pipe.execute()
        out: list[dict[str, Any]] = []
        for replica, entries in zip(replicas, hashes, strict=True):
            if not entries:
                # Expired (its replica died) or emptied: drop it from the index.
                await self._redis.srem(self.keys.presence_replicas(session_id), replica)
                continue
            for client_id in sorted(entries):
                out.append({"client_id": client_id, **json.loads(entries[client_id])})
        return out

    async def refresh(self) -> None:
        """Extend the TTL of this replica's hashes (the heartbeat calls it)."""
        async with self._redis.pipeline(transaction=False) as pipe:
            for session_id in self._local:
                pipe.pexpire(self.keys.presence(session_id, self.replica_id), self.ttl_ms)
                pipe.sadd(self.keys.presence_replicas(session_id), self.replica_id)
            await pipe.execute()

    async def start(self) -> None:
        self._task = asyncio.create_task(self._beat(), name="cluster-presence")

    async def _beat(self) -> None:
        while True:
            await asyncio.sleep(self.ttl_ms / 3000)
            with contextlib.suppress(RedisError):
                await self.refresh()

    async def close(self) -> None:
        """Stop the heartbeat and remove this replica's entries."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        with contextlib.suppress(RedisError):
            for session_id in list(self._local):
                await self._redis.delete(self.keys.presence(session_id, self.replica_id))
        self._local.clear()
