"""The durable event log: one SQLite file (WAL, synchronous=NORMAL).

Rows hold the encoded envelope plus the columns replay needs. A second table
keeps each session's last ``session_seq`` and ``seq``, updated in the same
transaction as each batch; it survives pruning, so counters continue after a
restart even when every event of a session has been pruned: a reused
``session_seq`` would silently corrupt clients' cursors.

The API is synchronous and thread-safe. The bus never calls it on the event
loop: for a file it runs it in a child process (eventbus.log_server), for
``:memory:`` in a worker thread (see eventbus.log_access for why). File logs
use one connection for writes and another for reads, so a long replay does
not hold up commits (WAL lets them proceed side by side). ``:memory:`` logs
share one connection.

A replay page comes back from SQLite as one row of two aggregates rather
than one row per event: it is cheap to ship across the pipe, and a reading
thread needs the GIL back once per page instead of once per row.

With synchronous=NORMAL in WAL mode a commit survives a crash of the process;
after a power loss the most recent commits may be rolled back, never torn.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any

from eventbus.errors import CursorExpired, EventLogError
from eventbus.record import EventRecord

SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS events (
    seq          INTEGER PRIMARY KEY,
    session_id   TEXT    NOT NULL,
    session_seq  INTEGER NOT NULL,
    type         TEXT    NOT NULL,
    turn_id      TEXT,
    ts           TEXT    NOT NULL,
    json         TEXT    NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS events_by_session ON events (session_id, session_seq);
CREATE TABLE IF NOT EXISTS session_counters (
    session_id        TEXT    PRIMARY KEY,
    last_session_seq  INTEGER NOT NULL,
    last_seq          INTEGER NOT NULL
) WITHOUT ROWID;
"""

_INSERT = (
    "INSERT INTO events (seq, session_seq, session_id, type, turn_id, ts, json) "
    "VALUES (?, ?, ?, ?, ?, ?, ?)"
)
# One upsert per session per batch (a per-row trigger cost more than the insert).
_UPDATE_COUNTERS = """
INSERT INTO session_counters (session_id, last_session_seq, last_seq)
SELECT session_id, MAX(session_seq), MAX(seq) FROM events
WHERE seq BETWEEN ? AND ? GROUP BY session_id
ON CONFLICT (session_id) DO UPDATE SET
    last_session_seq = excluded.last_session_seq, last_seq = excluded.last_seq
"""
# The envelope's leading fields, in the fixed order eventbus.encoding writes
# them; the log process reads its columns from the text with this.
_ENVELOPE_HEAD = re.compile(
    r'\{"seq":(\d+),"session_seq":(\d+),"id":"[^"\\]*","type":"([^"\\]*)",'
    r'"session_id":("(?:[^"\\]|\\.)*"),"turn_id":(null|"(?:[^"\\]|\\.)*"),"ts":"([^"\\]*)",'
)

Row = tuple[int, int, str, str, str | None, str, str]


# One row per page: the metadata as a JSON array and the texts joined by a
# record separator (0x1E), which ASCII-only JSON text can never contain. Both
# aggregates run over the rows in the same pass, so they pair up; the order
# is re-established in Python because aggregate order is not guaranteed.
_PAGE = """
SELECT {oldest}, {last},
       json_group_array(json_array(seq, session_seq, session_id, type, turn_id, ts)),
       group_concat(json, char(30))
FROM (SELECT seq, session_seq, session_id, type, turn_id, ts, json FROM events
      WHERE {where} ORDER BY {order} LIMIT :limit)
"""
_PAGE_ALL = _PAGE.format(
    oldest="(SELECT MIN(seq) FROM events)",
    last="(SELECT MAX(last_seq) FROM session_counters)",
    where="seq > :after",
    order="seq",
)
_PAGE_SESSION = _PAGE.format(
    oldest="(SELECT MIN(session_seq) FROM events WHERE session_id = :sid)",
    last="(SELECT last_session_seq FROM session_counters WHERE session_id = :sid)",
    where="session_id = :sid AND session_seq > :after",
    order="session_seq",
)
_RECORD_SEPARATOR = "\x1e"

MEMORY = ":memory:"
MAX_REPLAY_LIMIT = 10_000


def unpack_page(meta_json: str, texts: str | None) -> list[EventRecord]:
    """Records from a packed replay page (see ``EventLog.replay_page``)."""
    meta: list[list[Any]] = json.loads(meta_json)
    if not meta:
        return []
    parts = texts.split(_RECORD_SEPARATOR) if texts else []
    if len(parts) != len(meta):
        raise EventLogError("event log page is inconsistent (a text holds a 0x1E byte)")
    records = [
        EventRecord(seq, session_seq, session_id, type_, turn_id, ts, text)
        for (seq, session_seq, session_id, type_, turn_id, ts), text in zip(
            meta, parts, strict=True
        )
    ]
    # Aggregate order is unspecified; on rows that are already sorted this is O(n).
    records.sort(key=_by_seq)
    return records


def _by_seq(record: EventRecord) -> int:
    return record.seq


def _json_string(literal: str) -> str:
    # Ids without escapes (the usual case) need no JSON parsing.
    text: str = json.loads(literal) if "\\" in literal else literal[1:-1]
    return text


def _row_from_text(text: str) -> Row:
    match = _ENVELOPE_HEAD.match(text)
    if match is None:
        raise EventLogError(f"not an event envelope from eventbus.encoding: {text[:120]!r}")
    seq, session_seq, type_, session_id, turn_id, ts = match.groups()
    turn = None if turn_id == "null" else _json_string(turn_id)
    return (int(seq), int(session_seq), _json_string(session_id), type_, turn, ts, text)


def _check_limit(limit: int) -> None:
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_REPLAY_LIMIT:
        raise ValueError(f"limit must be an integer from 1 to {MAX_REPLAY_LIMIT}, got {limit!r}")


def _check_cursor(name: str, value: int | None) -> None:
    if value is None:
        return
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{name} must be a non-negative integer or None, got {value!r}")


class EventLog:
    """Append-only, prunable event log in SQLite. Open with ``EventLog.open(path)``.

    One bus writes to a log at a time: ``append_many`` rejects a batch whose
    first ``seq`` is not beyond the last one written.
    """

    def __init__(
        self,
        path: str,
        write_conn: sqlite3.Connection,
        read_conn: sqlite3.Connection,
        last_seq: int,
    ) -> None:
        self._path = path
        self._write = write_conn
        self._read = read_conn
        # Re-entrant: append_many holds it across its checks and the statement.
        self._write_lock = threading.RLock()
        # A :memory: log has one connection, so reads must take the write lock.
        self._read_lock: threading.RLock | threading.Lock = (
            self._write_lock if read_conn is write_conn else threading.Lock()
        )
        self._last_seq = last_seq
        self._closed = False

    # -- opening -----------------------------------------------------------------------

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> EventLog:
        """Open (creating if needed) the log at ``path``, or ``":memory:"`` for tests.

        Missing parent directories are created. Raises EventLogError naming the
        path if it is not a usable SQLite database of this schema.
        """
        spec = os.fspath(path)
        if not isinstance(spec, str) or not spec:
            raise EventLogError(f"event log path must be a non-empty path, got {path!r}")
        try:
            if spec == MEMORY:
                conn = cls._connect(MEMORY)
                cls._prepare(conn, MEMORY)
                return cls(MEMORY, conn, conn, cls._query_last_seq(conn))
            Path(spec).parent.mkdir(parents=True, exist_ok=True)
            write_conn = cls._connect(spec)
            try:
                cls._prepare(write_conn, spec)
                read_conn = cls._connect(spec)
            except BaseException:
                write_conn.close()
                raise
            return cls(spec, write_conn, read_conn, cls._query_last_seq(write_conn))
        except (sqlite3.Error, OSError) as exc:
            raise EventLogError(f"cannot open event log {spec!r}: {exc}") from exc

    @staticmethod
    def _connect(spec: str) -> sqlite3.Connection:
        # isolation_level=None: no implicit transactions; each statement commits.
        # check_same_thread=False: calls come from worker threads; locks serialize them.
        conn = sqlite3.connect(spec, isolation_level=None, check_same_thread=False, timeout=5.0)
        conn.execute("PRAGMA busy_timeout = 5000")
        return conn

    @staticmethod
    def _prepare(conn: sqlite3.Connection, spec: str) -> None:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version not in (0, SCHEMA_VERSION):
            raise EventLogError(
                f"event log {spec!r} has schema version {version}; this build reads "
                f"version {SCHEMA_VERSION}"
            )
        try:
            conn.execute("SELECT json_group_array(json_array(1))").fetchone()
        except sqlite3.OperationalError as exc:
            raise EventLogError(
                f"this SQLite ({sqlite3.sqlite_version}) lacks the JSON functions the event "
                "log needs"
            ) from exc
        if spec != MEMORY:
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise EventLogError(f"event log {spec!r} could not switch to WAL (got {mode!r})")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.executescript(_SCHEMA)
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    @staticmethod
    def _query_last_seq(conn: sqlite3.Connection) -> int:
        row = conn.execute(
            "SELECT MAX(COALESCE((SELECT MAX(seq) FROM events), 0),"
            " COALESCE((SELECT MAX(last_seq) FROM session_counters), 0))"
        ).fetchone()
        return int(row[0])

    @property
    def path(self) -> str:
        """The database file, or ``":memory:"``."""
        return self._path

    @property
    def closed(self) -> bool:
        return self._closed

    # -- connection helpers ------------------------------------------------------------

    @contextmanager
    def _reading(self) -> Iterator[sqlite3.Connection]:
        """The read connection; each statement on it reads one consistent snapshot."""
        with self._read_lock:
            self._check_open()
            try:
                yield self._read
            except sqlite3.Error as exc:
                raise EventLogError(f"event log {self._path!r} read failed: {exc}") from exc

    def _check_open(self) -> None:
        if self._closed:
            raise EventLogError(f"event log {self._path!r} is closed")

    # -- writing -----------------------------------------------------------------------

    def append_many(self, records: Sequence[EventRecord]) -> None:
        """Write ``records`` (in seq order) in one transaction: a group commit.

        Raises EventLogError if the batch does not continue after the last
        ``seq`` written (a second writer, or a replayed batch); nothing is
        written then.
        """
        self._insert(
            [(r.seq, r.session_seq, r.session_id, r.type, r.turn_id, r.ts, r.text) for r in records]
        )

    def append_encoded(self, texts: Sequence[str]) -> None:
        """Like ``append_many`` for envelope texts alone (what the log process
        receives): the columns are read from each text's leading fields."""
        self._insert([_row_from_text(text) for text in texts])

    def _insert(self, rows: list[Row]) -> None:
        if not rows:
            return
        first, last = rows[0][0], rows[-1][0]
        with self._write_lock:
            self._check_open()
            if first <= self._last_seq:
                raise EventLogError(
                    f"event log {self._path!r}: batch starts at seq {first} but seq "
                    f"{self._last_seq} is already written (is a second bus writing to it?)"
                )
            conn = self._write
            try:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    conn.executemany(_INSERT, rows)
                    conn.execute(_UPDATE_COUNTERS, (first, last))
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
                conn.execute("COMMIT")
            except sqlite3.Error as exc:
                raise EventLogError(f"event log {self._path!r} write failed: {exc}") from exc
            self._last_seq = last

    def prune(self, *, keep_last: int) -> int:
        """Delete all but the newest ``keep_last`` events; returns how many were deleted.

        Counters are kept, so ``seq`` and ``session_seq`` continue after pruning;
        replaying from a pruned cursor raises CursorExpired.
        """
        if not isinstance(keep_last, int) or isinstance(keep_last, bool) or keep_last < 0:
            raise ValueError(f"keep_last must be a non-negative integer, got {keep_last!r}")
        with self._write_lock:
            self._check_open()
            try:
                # MAX(seq) from the table, not a cached value: another process may write.
                cur = self._write.execute(
                    "DELETE FROM events WHERE seq <= (SELECT MAX(seq) FROM events) - ?",
                    (keep_last,),
                )
            except sqlite3.Error as exc:
                raise EventLogError(f"event log {self._path!r} prune failed: {exc}") from exc
            return cur.rowcount

    # -- reading -----------------------------------------------------------------------

    def replay(self, *, after_seq: int | None = None, limit: int) -> list[EventRecord]:
        """Up to ``limit`` events of all sessions with ``seq > after_seq``, in order.

        ``after_seq=None`` starts at the oldest event retained. Raises
        CursorExpired if events right after ``after_seq`` were pruned.
        """
        return unpack_page(*self.replay_page(None, after_seq, limit))

    def replay_session(
        self, session_id: str, *, after_session_seq: int | None = None, limit: int
    ) -> list[EventRecord]:
        """Up to ``limit`` events of one session with ``session_seq > after_session_seq``.

        ``after_session_seq=None`` starts at the oldest retained event of the
        session. Raises CursorExpired if events right after the cursor were pruned.
        """
        if not isinstance(session_id, str) or not session_id:
            raise ValueError(f"session_id must be a non-empty string, got {session_id!r}")
        return unpack_page(*self.replay_page(session_id, after_session_seq, limit))

    def replay_page(
        self, session_id: str | None, after: int | None, limit: int
    ) -> tuple[str, str | None]:
        """One replay page, packed: ``(metadata JSON array, texts joined by 0x1E)``.

        The log process sends this pair as is; ``eventbus.log.unpack_page``
        turns it into records. ``session_id=None`` pages through all sessions
        by ``seq``, otherwise through one session by ``session_seq``.
        """
        _check_cursor("after", after)
        _check_limit(limit)
        params = {"sid": session_id, "after": after or 0, "limit": limit}
        with self._reading() as conn:
            row = conn.execute(_PAGE_ALL if session_id is None else _PAGE_SESSION, params)
            oldest, last, meta, texts = row.fetchone()
        if after is not None:
            # With events held, the one before the oldest is the oldest usable cursor;
            # with none held, only "after the last event ever written" is gapless.
            oldest_cursor = oldest - 1 if oldest is not None else (last or 0)
            if after < oldest_cursor:
                raise CursorExpired(
                    cursor=after, oldest_cursor=oldest_cursor, session_id=session_id
                )
        return meta, texts

    def last_seq(self) -> int:
        """The highest ``seq`` ever written (0 for a new log), pruned or not."""
        with self._reading() as conn:
            return self._query_last_seq(conn)

    def last_session_seq(self, session_id: str) -> int:
        """The highest ``session_seq`` ever written for the session (0 if none)."""
        with self._reading() as conn:
            row = conn.execute(
                "SELECT last_session_seq FROM session_counters WHERE session_id = ?",
                (session_id,),
            ).fetchone()
        return int(row[0]) if row else 0

    def session_counters(self) -> dict[str, int]:
        """Every session's last ``session_seq``, so a restarted bus continues the counts."""
        with self._reading() as conn:
            (packed,) = conn.execute(
                "SELECT json_group_object(session_id, last_session_seq) FROM session_counters"
            ).fetchone()
        counters: dict[str, int] = json.loads(packed)
        return counters

    def oldest_retained_seq(self) -> int | None:
        """The ``seq`` of the oldest event still held, or None if none is."""
        with self._reading() as conn:
            value = conn.execute("SELECT MIN(seq) FROM events").fetchone()[0]
        return None if value is None else int(value)

    def oldest_retained_session_seq(self, session_id: str) -> int | None:
        """The ``session_seq`` of the session's oldest event still held, or None."""
        with self._reading() as conn:
            value = conn.execute(
                "SELECT MIN(session_seq) FROM events WHERE session_id = ?", (session_id,)
            ).fetchone()[0]
        return None if value is None else int(value)

    def count(self) -> int:
        """How many events the log holds now."""
        with self._reading() as conn:
            return int(conn.execute("SELECT COUNT(*) FROM events").fetchone()[0])

    # -- closing -----------------------------------------------------------------------

    def close(self) -> None:
        """Close the connections; later calls raise EventLogError. Idempotent."""
        with self._write_lock:
            if self._closed:
                return
            self._closed = True
            if self._read is not self._write:
                with self._read_lock:
                    self._read.close()
            self._write.close()

    def __enter__(self) -> EventLog:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
