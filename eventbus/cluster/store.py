"""RedisStore: sessions, turns and conversations in Redis, for every replica.

It mirrors the methods of ``server.store.Store`` that routes use, as
coroutines, with records of the same field names (``StoredSession``,
``StoredTurn``, ``StoredMessage``; ``server.store.SessionRecord(**asdict(x))``
converts). Keys (see ``Keys``):

- ``session:<id>``: the session as JSON, ``deleted_at`` set on deletion
  (a tombstone: event visibility still needs the owner);
- ``sessions``: sorted set of ``<created_at> <id>`` of undeleted sessions,
  so listing is one ZRANGE in creation order; ``sessions_of:<owner>``: ids;
- ``turn:<id>``: the turn as JSON; ``turns:<session>``: ids by number;
  ``turns_running``: ids of running turns;
- ``messages:<session>``: list of messages (index = position, taken by
  RPUSH, so two replicas never share one); ``turn_messages:<turn>``: indexes.

Turn results are stored inline (the SQLite store's references into the
conversation are a size optimisation left for later).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Literal

import redis.asyncio as aioredis
from redis.exceptions import WatchError

from eventbus.cluster.keys import Keys

TurnStatus = Literal["running", "completed", "failed", "cancelled"]
TurnKind = Literal["tool_uses", "message"]
_WATCH_RETRIES = 50


def now_rfc3339() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


@dataclass(frozen=True, slots=True)
class StoredSession:
    """A session as stored (fields of server.store.SessionRecord)."""

    id: str
    workspace: str
    owner: str
    name: str | None = None
    model: str | None = None
    policy_overrides: dict[str, Any] = field(default_factory=dict)
    created_at: str = field(default_factory=now_rfc3339)


@dataclass(frozen=True, slots=True)
class StoredTurn:
    """A turn as stored (fields of server.store.TurnRecord)."""

    id: str
    session_id: str
    number: int
    kind: TurnKind
    status: TurnStatus
    request: dict[str, Any]
    created_by: str
    reason: str | None = None
    message: str | None = None
    results: list[dict[str, Any]] | None = None
    usage: dict[str, Any] | None = None
    created_at: str = field(default_factory=now_rfc3339)
    finished_at: str | None = None


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """One conversation message (fields of server.store.MessageRecord)."""

    index: int
    turn_id: str | None
    message: dict[str, Any]
    created_at: str


def _turn(text: str | bytes) -> StoredTurn:
    return StoredTurn(**json.loads(text))


class RedisStore:
    """Sessions, turns and messages in Redis; see the module docstring."""

    def __init__(self, client: aioredis.Redis, keys: Keys | None = None) -> None:
        self._redis = client
        self.keys = keys or Keys()

    # -- sessions ---------------------------------------------------------
    async def add_session(self, record: StoredSession) -> None:
        body = {**asdict(record), "deleted_at": None}
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.set(self.keys.session(record.id), json.dumps(body))
            pipe.zadd(self.keys.sessions_live, {f"{record.created_at} {record.id}": 0})
            pipe.sadd(self.keys.sessions_of(record.owner), record.id)
            await pipe.execute()

    async def _session_body(self, session_id: str) -> dict[str, Any] | None:
        text = await self._redis.get(self.keys.session(session_id))
        return None if text is None else dict(json.loads(text))

    async def get_session(self, session_id: str) -> StoredSession | None:
        body = await self._session_body(session_id)
        if body is None or body.pop("deleted_at") is not None:
            return None
        return StoredSession(**body)

    async def owner_of(self, session_id: str) -> str | None:
        """Who created the session, deleted or not."""
        body = await self._session_body(session_id)
        return None if body is None else str(body["owner"])

    async def session_ids_of(self, owner: str) -> list[str]:
        return sorted(str(s) for s in await self._redis.smembers(self.keys.sessions_of(owner)))

    async def list_sessions(self, *, owner: str | None = None) -> list[StoredSession]:
        members = await self._redis.zrange(self.keys.sessions_live, 0, -1)
        ids = [str(m).rpartition(" ")[2] for m in members]
        if not ids:
            return []
        texts = await self._redis.mget([self.keys.session(i) for i in ids])
        out = []
        for text in texts:
            if text is None:
                continue
            body = json.loads(text)
            if body.pop("deleted_at") is None and (owner is None or body["owner"] == owner):
                out.append(StoredSession(**body))
        return out

    async def delete_session(self, session_id: str) -> bool:
        key = self.keys.session(session_id)
        async with self._redis.pipeline(transaction=True) as pipe:
            for _ in range(_WATCH_RETRIES):
                try:
                    await pipe.watch(key)
                    text = await pipe.get(key)
                    body = None if text is None else json.loads(text)
                    if body is None or body["deleted_at"] is not None:
                        await pipe.unwatch()  # type: ignore[no-untyped-call]
                        return False
                    body["deleted_at"] = now_rfc3339()
                    pipe.multi()  # type: ignore[no-untyped-call]
                    pipe.set(key, json.dumps(body))
                    pipe.zrem(self.keys.sessions_live, f"{body['created_at']} {session_id}")
                    await pipe.execute()
                    return True
                except WatchError:
                    continue
        raise RuntimeError(f"session {session_id} kept changing; delete not applied")

    # -- turns ------------------------------------------------------------
    async def next_turn_number(self, session_id: str) -> int:
        last = await self._redis.zrange(self.keys.turns_of(session_id), -1, -1, withscores=True)
        return int(last[0][1]) + 1 if last else 1

    async def add_turn(self, record: StoredTurn) -> None:
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.set(self.keys.turn(record.id), json.dumps(asdict(record)))
            pipe.zadd(self.keys.turns_of(record.session_id), {record.id: record.number})
            if record.status == "running":
                pipe.sadd(self.keys.turns_running, record.id)
            await pipe.execute()

    async def _update_running(self, turn_id: str, changes: dict[str, Any]) -> StoredTurn | None:
        """Apply ``changes`` to a running turn atomically; None if it is not running."""
        key = self.keys.turn(turn_id)
        async with self._redis.pipeline(transaction=True) as pipe:
            for _ in range(_WATCH_RETRIES):
                try:
                    await pipe.watch(key)
                    text = await pipe.get(key)
                    if text is None or json.loads(text)["status"] != "running":
                        await pipe.unwatch()  # type: ignore[no-untyped-call]
                        return None
                    turn = replace(_turn(text), **changes)
                    pipe.multi()  # type: ignore[no-untyped-call]
                    pipe.set(key, json.dumps(asdict(turn)))
                    if turn.status != "running":
                        pipe.srem(self.keys.turns_running, turn_id)
                    await pipe.execute()
                    return turn
                except WatchError:
                    continue
        raise RuntimeError(f"turn {turn_id} kept changing; update not applied")

    async def finish_turn(
        self,
        turn_id: str,
        *,
        status: TurnStatus,
        reason: str | None = None,
        results: list[dict[str, Any]] | None = None,
        usage: dict[str, Any] | None = None,
        message: str | None = None,
    ) -> StoredTurn | None:
        """Record how a running turn ended; None if it was not running."""
        changes: dict[str, Any] = {
            "status": status,
            "reason": reason,
            "message": message,
            "finished_at": now_rfc3339(),
        }
        if results is not None:
            changes["results"] = results
        if usage is not None:
            changes["usage"] = usage
        return await self._update_running(turn_id, changes)

    async def set_turn_outcome(
        self,
        turn_id: str,
        *,
        results: list[dict[str, Any]] | None,
        usage: dict[str, Any] | None,
    ) -> None:
        changes: dict[str, Any] = {}
        if results is not None:
            changes["results"] = results
        if usage is not None:
            changes["usage"] = usage
        if changes:
            await self._update_running(turn_id, changes)

    async def get_turn(self, turn_id: str, *, session_id: str | None = None) -> StoredTurn | None:
        text = await self._redis.get(self.keys.turn(turn_id))
        if text is None:
            return None
        turn = _turn(text)
        if session_id is not None and turn.session_id != session_id:
            return None
        return turn

    async def _turns(self, ids: list[str]) -> list[StoredTurn]:
        if not ids:
            return []
        texts = await self._redis.mget([self.keys.turn(i) for i in ids])
        return [_turn(t) for t in texts if t is not None]

    async def list_turns(self, session_id: str) -> list[StoredTurn]:
        ids = await self._redis.zrange(self.keys.turns_of(session_id), 0, -1)
        return await self._turns([str(i) for i in ids])

    async def running_turns(self) -> list[StoredTurn]:
        ids = await self._redis.smembers(self.keys.turns_running)
        turns = await self._turns([str(i) for i in ids])
        return sorted(turns, key=lambda t: (t.created_at, t.id))

    # -- messages ---------------------------------------------------------
    async def append_message(
        self, session_id: str, message: dict[str, Any], *, turn_id: str | None
    ) -> StoredMessage:
        created_at = now_rfc3339()
        entry = json.dumps({"turn_id": turn_id, "message": message, "created_at": created_at})
        # RPUSH returns the new length: the index is ours alone, on any replica.
        index = int(await self._redis.rpush(self.keys.messages(session_id), entry)) - 1
        if turn_id is not None:
            await self._redis.rpush(self.keys.turn_messages(turn_id), index)
        return StoredMessage(index, turn_id, message, created_at)

    async def messages_after(self, session_id: str, index: int) -> list[StoredMessage]:
        """Messages with an index above ``index`` (-1: all), in order."""
        texts = await self._redis.lrange(self.keys.messages(session_id), index + 1, -1)
        out = []
        for offset, text in enumerate(texts):
            body = json.loads(text)
            out.append(
                StoredMessage(
                    index + 1 + offset, body["turn_id"], body["message"], body["created_at"]
                )
            )
        return out

    async def messages(self, session_id: str) -> list[StoredMessage]:
        return await self.messages_after(session_id, -1)

    async def turn_messages(self, session_id: str, turn_id: str) -> list[StoredMessage]:
        indexes = [
            int(i) for i in await self._redis.lrange(self.keys.turn_messages(turn_id), 0, -1)
        ]
        if not indexes:
            return []
        async with self._redis.pipeline(transaction=False) as pipe:
            for i in indexes:
                pipe.lindex(self.keys.messages(session_id), i)
            texts = await pipe.execute()
        out = []
        for i, text in zip(indexes, texts, strict=True):
            if text is not None:
                body = json.loads(text)
                out.append(StoredMessage(i, body["turn_id"], body["message"], body["created_at"]))
        return out
