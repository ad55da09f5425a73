"""RedisEventLog: the durable event log of a cluster, in Redis Streams.

The same semantics as the embedded log (eventbus.log), with Redis assigning
the numbers: one script call appends a batch, taking the next ``seq`` for
each event and the next ``session_seq`` of its session, and adds it to the
global stream (entry id ``<seq>-0``) and to its session's stream (entry id
``<session_seq>-0``), so replaying after a cursor is one XRANGE. A caller
gets the records back only once Redis ran the script: nothing is shown to a
client before Redis accepted it (durable before visible).

Retention trims the streams from the oldest entry (XTRIM MINID); the
counters stay, so numbers continue, and a cursor older than what is kept
raises CursorExpired exactly as the embedded log does.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError

from eventbus.cluster.keys import Keys
from eventbus.cluster.scripts import APPEND
from eventbus.cluster.streams import Entry, entry_number, xrange
from eventbus.errors import CursorExpired, EventLogError, InvalidEvent
from eventbus.record import EventRecord
from protocol.catalog import EventType

_TYPES = frozenset(t.value for t in EventType)
# Entries walked per XRANGE while looking for where retention cuts a stream.
_WALK = 512
# A script call is one Redis command: bound how much one carries.
MAX_BATCH = 1000
HEADER_SEPARATOR = "\x1f"
# The events that change ownership in the step that stores them (see
# scripts.APPEND): a session's creation takes its lease, a turn's start lists
# it as running, a turn's end unlists it.
OWNERSHIP_EVENTS = frozenset(
    {
        EventType.SESSION_CREATED,
        EventType.TURN_STARTED,
        EventType.TURN_COMPLETED,
        EventType.TURN_FAILED,
        EventType.TURN_CANCELLED,
    }
)


def _utc_now() -> str:
    now = time.time()
    second = int(now)
    return "%s.%06dZ" % (  # noqa: UP031 - same layout as the embedded bus
        time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second)),
        (now - second) * 1_000_000,
    )


@dataclass(frozen=True, slots=True)
class EventDraft:
    """An event before Redis numbered it."""

    type: str
    session_id: str
    data: dict[str, Any]
    turn_id: str | None = None
    id: str = field(default_factory=lambda: f"evt_{uuid.uuid4().hex}")
    ts: str = field(default_factory=_utc_now)

    def body(self) -> str:
        """The envelope's JSON text after ``seq`` and ``session_seq``."""
        if self.type not in _TYPES:
            raise InvalidEvent(f"unknown event type {self.type!r}")
        if not isinstance(self.session_id, str) or not self.session_id:
            raise InvalidEvent(f"session_id must be a non-empty string, got {self.session_id!r}")
        if HEADER_SEPARATOR in self.session_id + (self.turn_id or "") + self.ts:
            raise InvalidEvent("session_id, turn_id and ts may not hold the 0x1F character")
        try:
            # Keys in the order of protocol.envelope.Event, strict ASCII JSON.
            rest = json.dumps(
                {
                    "id": self.id,
                    "type": self.type,
                    "session_id": self.session_id,
                    "turn_id": self.turn_id,
                    "ts": self.ts,
                    "data": self.data,
                },
                ensure_ascii=True,
                allow_nan=False,
                separators=(",", ":"),
            )
        except (TypeError, ValueError, RecursionError) as exc:
            raise InvalidEvent(f"{self.type} data is not JSON-serializable: {exc}") from exc
        return rest[1:]  # without the opening brace: the script writes the counters first


def record_of(entry: Entry, *, global_entry: bool) -> EventRecord:
    """The record of a stream entry (see scripts.APPEND for its two fields)."""
    entry_id, fields = entry
    number = int(entry_id.partition("-")[0])
    session_id, type_, turn_id, ts, other, _ms = fields["h"].split(HEADER_SEPARATOR)
    if global_entry:
        seq, session_seq = number, int(other)
    else:
        seq, session_seq = int(other), number
    return EventRecord(seq, session_seq, session_id, type_, turn_id or None, ts, fields["d"])


def header_field(fields: dict[str, str], index: int) -> str:
    """One field of an entry's header: 0 session, 3 ts, 4 the other number, 5 ms."""
    return fields["h"].split(HEADER_SEPARATOR)[index]


class RedisEventLog:
    """The cluster's event log; every replica holds one on the same Redis.

    ``client`` must decode responses (``decode_responses=True``). Methods
    raise EventLogError when Redis fails, CursorExpired for a pruned cursor.

    With a ``replica_id`` (a server's replica), appending an event also
    keeps ownership, in the same script that stores it: ``session.created``
    takes the session's lease for ``lease_ttl_ms`` (if nobody holds it; the
    replica's ``Leases.acquire`` then adopts it into its heartbeat),
    ``turn.started`` lists the turn as running (``Keys.running``, for the
    lapse watcher) while this replica holds the lease, and the turn's end
    unlists it. A turn that any reader saw start is therefore listed, however
    soon after its replica dies.
    """

    def __init__(
        self,
        client: aioredis.Redis,
        keys: Keys | None = None,
        *,
        replica_id: str | None = None,
        lease_ttl_ms: int = 10_000,
    ) -> None:
        self._redis = client
        self.keys = keys or Keys()
        self.replica_id = replica_id
        self.lease_ttl_ms = lease_ttl_ms
        self._append = client.register_script(APPEND)

    async def start(self) -> tuple[int, dict[str, int]]:
        """The last ``seq`` and every session's last ``session_seq`` (like LogAccess.start)."""
        try:
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.get(self.keys.seq)
                pipe.hgetall(self.keys.session_seqs)
                last, counters = await pipe.execute()
        except RedisError as exc:
            raise EventLogError(f"redis event log unreachable: {exc}") from exc
        return int(last or 0), {str(k): int(v) for k, v in counters.items()}

    async def append(self, drafts: Sequence[EventDraft]) -> list[EventRecord]:
        """Number and store the drafts in one atomic step; their records, in order.

        The records exist only once Redis ran the script, so fanning them out
        after this returns keeps "durable before visible". On EventLogError
        nothing is known to be stored (a script that Redis ran is all or
        nothing unless Redis itself ran out of memory mid-way).
        """
        records: list[EventRecord] = []
        for start in range(0, len(drafts), MAX_BATCH):
            records.extend(await self._append_batch(drafts[start : start + MAX_BATCH]))
        return records

    async def _append_batch(self, drafts: Sequence[EventDraft]) -> list[EventRecord]:
        if not drafts:
            return []
        k = self.keys
        keys = [k.seq, k.global_stream, k.session_seqs, k.running_sessions]
        owner_keys: list[str] = []
        args: list[str] = [self.replica_id or "", str(self.lease_ttl_ms)]
        bodies: list[str] = []
        for draft in drafts:
            body = draft.body()
            bodies.append(body)
            keys.append(k.session_stream(draft.session_id))
            marked = bool(self.replica_id) and draft.type in OWNERSHIP_EVENTS
            if marked:
                owner_keys += [k.owner(draft.session_id), k.running(draft.session_id)]
            args += [draft.session_id, draft.type, draft.turn_id or "", draft.ts, body]
            args.append("1" if marked else "")
        try:
            numbers = await self._append(keys=keys + owner_keys, args=args)
        except RedisError as exc:
            raise EventLogError(f"redis event log append failed: {exc}") from exc
        records = []
        for i, draft in enumerate(drafts):
            seq, session_seq = int(numbers[2 * i]), int(numbers[2 * i + 1])
            text = f'{{"seq":{seq},"session_seq":{session_seq},{bodies[i]}'
            records.append(
                EventRecord(
                    seq, session_seq, draft.session_id, draft.type, draft.turn_id, draft.ts, text
                )
            )
        return records

    async def read_page(
        self,
        session_id: str | None,
        after: int,
        limit: int,
        *,
        sessions: Sequence[str] | None = None,
        max_bytes: int | None = None,
    ) -> list[EventRecord]:
        """Up to ``limit`` records after the cursor (``session_seq`` for a session,
        ``seq`` for all); CursorExpired if events right after it were pruned.

        ``sessions`` keeps only those sessions' events of the global stream;
        ``max_bytes`` cuts the page as the embedded log does (at least one).
        """
        if after < 0 or limit < 1:
            raise ValueError(f"need after >= 0 and limit >= 1, got {after}, {limit}")
        if sessions is not None and session_id is not None:
            raise ValueError("sessions filters all-sessions pages only (session_id=None)")
        if sessions is None:
            entries = await self._range(session_id, after, limit)
        else:
            entries = await self._filtered(set(sessions), after, limit)
        records = [record_of(e, global_entry=session_id is None) for e in entries]
        if max_bytes is not None:
            size = 0
            for i, record in enumerate(records):
                if size >= max_bytes:
                    return records[:i]
                size += len(record.text)
        return records

    async def _range(self, session_id: str | None, after: int, limit: int) -> list[Entry]:
        """One snapshot: the oldest entry, the entries after the cursor, the last number."""
        if session_id is None:
            stream = self.keys.global_stream
        else:
            stream = self.keys.session_stream(session_id)
        # A read may be retried: after a Redis restart the pool's first
        # connection is stale, and redis-py does not retry a MULTI by itself.
        for attempt in range(2):
            try:
                async with self._redis.pipeline(transaction=True) as pipe:
                    pipe.xrange(stream, "-", "+", count=1)
                    pipe.xrange(stream, f"{after + 1}-0", "+", count=limit)
                    if session_id is None:
                        pipe.get(self.keys.seq)
                    else:
                        pipe.hget(self.keys.session_seqs, session_id)
                    oldest, entries, last = await pipe.execute()
                break
            except RedisConnectionError as exc:
                if attempt:
                    raise EventLogError(f"redis event log read failed: {exc}") from exc
            except RedisError as exc:
                raise EventLogError(f"redis event log read failed: {exc}") from exc
        # As the embedded log: with events held, the one before the oldest is the
        # oldest usable cursor; with none, only "after the last ever written".
        oldest_cursor = entry_number(oldest[0][0]) - 1 if oldest else int(last or 0)
        if after < oldest_cursor:
            raise CursorExpired(cursor=after, oldest_cursor=oldest_cursor, session_id=session_id)
        return list(entries)

    async def _filtered(self, sessions: set[str], after: int, limit: int) -> list[Entry]:
        """Global-stream entries of ``sessions`` only; reads on until ``limit`` are
        found or the stream ends (a short page means the end, as the
        subscription expects)."""
        found: list[Entry] = []
        cursor = after
        while len(found) < limit:
            entries = await self._range(None, cursor, max(limit, _WALK))
            if not entries:
                break
            found.extend(e for e in entries if header_field(e[1], 0) in sessions)
            cursor = entry_number(entries[-1][0])
        return found[:limit]

    async def oldest_cursor(self, session_id: str | None = None) -> int:
        """The smallest ``after`` a replay can start from without a gap."""
        stream = (
            self.keys.global_stream if session_id is None else self.keys.session_stream(session_id)
        )
        try:
            oldest = await xrange(self._redis, stream, "-", count=1)
            if oldest:
                return entry_number(oldest[0][0]) - 1
            if session_id is None:
                return int(await self._redis.get(self.keys.seq) or 0)
            return int(await self._redis.hget(self.keys.session_seqs, session_id) or 0)
        except RedisError as exc:
            raise EventLogError(f"redis event log read failed: {exc}") from exc

    async def last_seq(self) -> int:
        """The highest ``seq`` ever assigned (0 for a new log)."""
        return int(await self._redis.get(self.keys.seq) or 0)

    async def last_session_seq(self, session_id: str) -> int:
        """The highest ``session_seq`` ever assigned in the session (0 if none)."""
        return int(await self._redis.hget(self.keys.session_seqs, session_id) or 0)

    async def prune(
        self,
        keep_last: int | None,
        max_bytes: int | None = None,
        max_age_s: float | None = None,
    ) -> int:
        """Apply a retention policy; how many global-stream entries were deleted.

        ``keep_last`` keeps the newest N events, ``max_age_s`` deletes events
        older than that (by Redis's clock at append). ``max_bytes`` is not
        offered: bound Redis's memory with its own ``maxmemory`` instead. One
        cut ``seq`` is computed and every stream loses its entries below it.
        """
        if max_bytes is not None:
            raise ValueError("max_bytes retention is not offered on Redis; use keep_last/max_age_s")
        if keep_last is None and max_age_s is None:
            raise ValueError("prune needs keep_last or max_age_s")
        try:
            last = int(await self._redis.get(self.keys.seq) or 0)
            cut = 0  # entries with seq <= cut go
            if keep_last is not None:
                cut = max(cut, last - keep_last)
            if max_age_s is not None:
                seconds, micros = await self._redis.time()
                cutoff_ms = int(seconds) * 1000 + int(micros) // 1000 - int(max_age_s * 1000)
                young = await self._first_young(cutoff_ms)
                cut = max(cut, (young - 1) if young is not None else last)
            if cut <= 0:
                return 0
            deleted = int(
                await self._redis.xtrim(
                    self.keys.global_stream, minid=f"{cut + 1}-0", approximate=False
                )
            )
            for session_id in await self._redis.hkeys(self.keys.session_seqs):
                await self._trim_session(str(session_id), cut)
        except RedisError as exc:
            raise EventLogError(f"redis event log prune failed: {exc}") from exc
        return deleted

    async def _first_young(self, cutoff_ms: int) -> int | None:
        """The ``seq`` of the oldest global entry appended at or after ``cutoff_ms``.

        Walks from the oldest entry: it reads what will be deleted plus one page.
        """
        start = "-"
        while True:
            entries = await xrange(self._redis, self.keys.global_stream, start, count=_WALK)
            if not entries:
                return None
            for entry_id, fields in entries:
                if int(header_field(fields, 5)) >= cutoff_ms:
                    return entry_number(entry_id)
            start = "(" + entries[-1][0]

    async def _trim_session(self, session_id: str, cut: int) -> None:
        """Drop the session's entries whose ``seq`` is at most ``cut``."""
        stream = self.keys.session_stream(session_id)
        start = "-"
        keep_from: str | None = None
        last_id: str | None = None
        while keep_from is None:
            entries = await xrange(self._redis, stream, start, count=_WALK)
            if not entries:
                break
            for entry_id, fields in entries:
                if int(header_field(fields, 4)) > cut:
                    keep_from = entry_id
                    break
                last_id = entry_id
            start = "(" + entries[-1][0]
        if keep_from is not None:
            await self._redis.xtrim(stream, minid=keep_from, approximate=False)
        elif last_id is not None:
            # Everything goes; the stream key stays empty (its counter lives elsewhere).
            number = entry_number(last_id)
            await self._redis.xtrim(stream, minid=f"{number + 1}-0", approximate=False)

    async def close(self) -> None:
        """Nothing of its own to release: the client belongs to the caller."""
