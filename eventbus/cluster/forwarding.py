"""Forwarder: a request/reply channel to a session's owner replica.

Each replica reads its inbox, the stream ``replica:<id>:inbox``, through a
consumer group (XREADGROUP), and keeps ``replica:<id>:alive`` set with a
short TTL while it serves. A caller checks that key, adds the request
(operation, JSON payload, reply key, deadline) and waits on the reply key
with BLPOP for a bounded time. The owner runs its handler and pushes the
result (or the error it raised) to the reply key, which expires on its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import RedisError, ResponseError

from eventbus.cluster.keys import Keys

log = logging.getLogger(__name__)

Handler = Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]
"""Runs a forwarded operation on the owner: ``(op, payload) -> result``."""

GROUP = "owner"
READ_COUNT = 64


class ForwardError(Exception):
    """A forwarded call failed; ``status`` is the HTTP status to answer with."""

    def __init__(self, message: str, *, status: int) -> None:
        super().__init__(message)
        self.status = status


class ReplicaUnavailable(ForwardError):
    """The target replica is not serving (gone, or did not answer in time)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, status=503)


class HandlerRefused(Exception):
    """Raised by a handler to answer with a given status (e.g. 409) and message."""

    def __init__(self, message: str, *, status: int) -> None:
        super().__init__(message)
        self.status = status


class Forwarder:
    """Serves this replica's inbox and calls other replicas' inboxes."""

    def __init__(
        self,
        client: aioredis.Redis,
        replica_id: str,
        *,
        keys: Keys | None = None,
        alive_ttl_ms: int = 5_000,
        block_ms: int = 1_000,
    ) -> None:
        self._redis = client
        self.replica_id = replica_id
        self.keys = keys or Keys()
        self.alive_ttl_ms = alive_ttl_ms
        self.block_ms = block_ms
        self._tasks: list[asyncio.Task[None]] = []
        self._handler: Handler | None = None
        self._closing = False
        self._calls: set[asyncio.Task[None]] = set()  # handlers running

    async def serve(self, handler: Handler) -> None:
        """Start answering forwarded calls with ``handler``."""
        self._handler = handler
        inbox = self.keys.inbox(self.replica_id)
        with contextlib.suppress(ResponseError):  # BUSYGROUP: it exists already
            await self._redis.xgroup_create(inbox, GROUP, id="$", mkstream=True)
        await self._redis.set(self.keys.alive(self.replica_id), "1", px=self.alive_ttl_ms)
        self._tasks = [
            asyncio.create_task(self._read_inbox(), name="cluster-forward-inbox"),
            asyncio.create_task(self._keep_alive(), name="cluster-forward-alive"),
        ]

    async def _keep_alive(self) -> None:
        while not self._closing:
            await asyncio.sleep(self.alive_ttl_ms / 3000)
            with contextlib.suppress(RedisError):
                await self._redis.set(self.keys.alive(self.replica_id), "1", px=self.alive_ttl_ms)

    async def _read_inbox(self) -> None:
        inbox = self.keys.inbox(self.replica_id)
        while not self._closing:
            try:
                reply: Any = await self._redis.xreadgroup(
                    GROUP, self.replica_id, {inbox: ">"}, count=READ_COUNT, block=self.block_ms
                )
            except RedisError as exc:
                if self._closing:
                    return
                log.warning("forward inbox read failed: %s", exc)
                await asyncio.sleep(0.2)
                continue
            for _stream, entries in reply or []:
                for entry_id, fields in entries:
                    # Each call runs on its own: a slow one does not hold the others.
                    task = asyncio.create_task(self._answer(inbox, entry_id, fields))
                    self._calls.add(task)
                    task.add_done_callback(self._calls.discard)

    async def _answer(self, inbox: str, entry_id: str, fields: dict[str, str]) -> None:
        try:
            if int(fields["deadline_ms"]) < time.time() * 1000:
                return  # the caller gave up already
            assert self._handler is not None
            result: dict[str, Any]
            try:
                result = {"ok": await self._handler(fields["op"], json.loads(fields["payload"]))}
            except HandlerRefused as exc:
                result = {"error": str(exc), "status": exc.status}
            except Exception as exc:
                log.exception("forwarded %s failed", fields.get("op"))
                result = {"error": f"{type(exc).__name__}: {exc}", "status": 500}
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.rpush(fields["reply"], json.dumps(result))
                pipe.pexpire(fields["reply"], 60_000)
                await pipe.execute()
        except RedisError as exc:
            log.warning("forwarded reply lost: %s", exc)
        finally:
            with contextlib.suppress(RedisError):
                await self._redis.xack(inbox, GROUP, entry_id)
                await self._redis.xdel(inbox, entry_id)

    async def call(
        self, replica_id: str, op: str, payload: dict[str, Any], *, timeout_s: float = 10.0
    ) -> dict[str, Any]:
        """Run ``op`` on ``replica_id`` and return its result.

        Raises ReplicaUnavailable if that replica is not serving or does not
        answer within ``timeout_s``, ForwardError with the owner's status if
        its handler refused (HandlerRefused) or failed.
        """
        if not await self._redis.exists(self.keys.alive(replica_id)):
            raise ReplicaUnavailable(f"replica {replica_id!r} is not running")
        reply_key = self.keys.reply(uuid.uuid4().hex)
        deadline_ms = int((time.time() + timeout_s) * 1000)
        await self._redis.xadd(
            self.keys.inbox(replica_id),
            {
                "op": op,
                "payload": json.dumps(payload),
                "reply": reply_key,
                "deadline_ms": str(deadline_ms),
                "from": self.replica_id,
            },
        )
        # BLPOP takes whole seconds on old servers; a float works from Redis 6.
        popped: Any = await self._redis.blpop([reply_key], timeout=timeout_s)
        if popped is None:
            raise ReplicaUnavailable(
                f"replica {replica_id!r} did not answer {op!r} within {timeout_s}s"
            )
        result = json.loads(popped[1])
        if "error" in result:
            raise ForwardError(str(result["error"]), status=int(result["status"]))
        return dict(result["ok"])

    async def close(self) -> None:
        """Stop serving; callers then get ReplicaUnavailable."""
        self._closing = True
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        with contextlib.suppress(RedisError):
            await self._redis.delete(self.keys.alive(self.replica_id))
