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

A file log checkpoints in a thread of its own (``Checkpointer``), not in the
commit that happens to fill the WAL: SQLite's automatic checkpoint runs inside
that commit and fsyncs twice, which made one commit in ~70 take 4-30 ms
instead of 0.05 ms (see specs/event-bus-and-trace-catalog.md, "Commit path").
"""

from __future__ import annotations

import heapq
import itertools
import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from types import TracebackType

from eventbus import log_sql as sql
from eventbus.errors import CursorExpired, EventLogError
from eventbus.errors import LogBehind as LogBehind
from eventbus.errors import OutOfSequence as OutOfSequence
from eventbus.errors import StorageFault as StorageFault
from eventbus.errors import storage_cause as storage_cause
from eventbus.log_checkpoint import CHECKPOINT_BYTES as CHECKPOINT_BYTES
from eventbus.log_checkpoint import Checkpointer
from eventbus.log_pages import cut_page
from eventbus.log_pages import unpack_page as unpack_page
from eventbus.log_pages import unpack_rows as unpack_rows
from eventbus.log_sql import Row as Row
from eventbus.record import EventRecord

MEMORY = ":memory:"
_NO_BYTE_CAP = 1 << 62
# Bytes a row costs beyond its text and session id (integers, type, ts, index
# entries); an estimate for size-based pruning, corrected by the next prune.
_ROW_OVERHEAD = 96
MAX_REPLAY_LIMIT = 10_000


def _rfc3339(epoch: float) -> str:
    """An instant in the format of eventbus.encoding.UtcClock (so strings compare)."""
    second = int(epoch)
    micros = min(int((epoch - second) * 1_000_000), 999_999)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second)) + f".{micros:06d}Z"


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

    One bus writes to a log at a time, without holes: ``append_many`` rejects
    a batch whose first ``seq`` is at or below the last one written (a second
    writer, or a replayed batch) and, with OutOfSequence, one that starts
    beyond the next (an earlier batch is missing).
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
        # (first, last) of a batch whose write failed: its retry may find it written.
        self._uncertain: tuple[int, int] | None = None
        self._closed = False
        self._checkpointer: Checkpointer | None = None

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
                # Checkpoints run beside the commits (Checkpointer), not in them.
                write_conn.execute("PRAGMA wal_autocheckpoint = 0")
                read_conn = cls._connect(spec)
            except BaseException:
                write_conn.close()
                raise
            try:
                checkpoint_conn = cls._connect(spec)
            except BaseException:
                read_conn.close()
                write_conn.close()
                raise
            log = cls(spec, write_conn, read_conn, cls._query_last_seq(write_conn))
            log._checkpointer = Checkpointer(checkpoint_conn)
            return log
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
        if version not in (0, sql.SCHEMA_VERSION, *sql.UPGRADES_FROM):
            raise EventLogError(
                f"event log {spec!r} has schema version {version}; this build reads "
                f"version {sql.SCHEMA_VERSION}"
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
        # One transaction: a crash midway leaves the old version, done again
        # at the next open.
        upgrade = sql.UPGRADES_FROM.get(version, "")
        conn.executescript(
            f"BEGIN IMMEDIATE; {upgrade} {sql.SCHEMA} "
            f"PRAGMA user_version = {sql.SCHEMA_VERSION}; COMMIT;"
        )

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
    def written_through(self) -> int:
        """The last ``seq`` this writer committed (or found), without a query."""
        return self._last_seq

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

    def append_packed(self, meta_json: str, texts: str) -> None:
        """Like ``append_many`` for a packed append (what the log process
        receives, see ``unpack_rows``): the columns come with the texts."""
        self._insert(unpack_rows(meta_json, texts))

    def append_rows(self, rows: list[Row]) -> None:
        """Like ``append_many`` for rows already unpacked (see ``unpack_rows``):
        the log process commits several appends' rows together this way."""
        self._insert(rows)

    def _insert(self, rows: list[Row]) -> None:
        if not rows:
            return
        first, last = rows[0][0], rows[-1][0]
        with self._write_lock:
            self._check_open()
            if first != self._last_seq + 1:
                if self._uncertain == (first, last) and last <= self._last_seq:
                    # A retry of a batch whose commit reported an error but landed
                    # (batches sent behind it may have been committed since).
                    self._uncertain = None
                    return
                if first > self._last_seq:
                    raise OutOfSequence(
                        f"event log {self._path!r}: batch starts at seq {first} but the "
                        f"log ends at seq {self._last_seq} (an earlier batch is missing)"
                    )
                raise EventLogError(
                    f"event log {self._path!r}: batch starts at seq {first} but seq "
                    f"{self._last_seq} is already written (is a second bus writing to it?)"
                )
            conn = self._write
            try:
                conn.execute("BEGIN IMMEDIATE")
                conn.executemany(sql.INSERT, rows)
                conn.execute(sql.UPDATE_COUNTERS, (first, last))
                conn.execute("COMMIT")
            except sqlite3.Error as exc:
                self._after_failed_write(first, last)
                cause = storage_cause(exc)
                if cause is not None:
                    raise StorageFault(
                        f"event log {self._path!r} write failed: {cause}", cause=cause
                    ) from exc
                raise EventLogError(f"event log {self._path!r} write failed: {exc}") from exc
            except BaseException:
                self._after_failed_write(first, last)
                raise
            self._last_seq = last
            if self._uncertain == (first, last):
                self._uncertain = None  # its retry: it did not land the first time
            if self._checkpointer is not None:
                self._checkpointer.committed(sum(len(row[6]) for row in rows))

    def _after_failed_write(self, first: int, last: int) -> None:
        """Leave the write connection usable after a failed batch.

        A failed statement or COMMIT may leave the transaction open (SQLite
        rolls back by itself only for some errors), and a ROLLBACK on a
        transaction SQLite already ended raises: both are handled here, so a
        full disk does not turn into "cannot start a transaction within a
        transaction" on every later write. If even the COMMIT's outcome is
        unknown, the last seq is read back: a retry of the same batch is then
        recognised as already written.
        """
        conn = self._write
        if conn.in_transaction:
            with suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
        with suppress(sqlite3.Error):
            self._last_seq = self._query_last_seq(conn)
        self._uncertain = (first, last)

    def prune(
        self,
        *,
        keep_last: int | None = None,
        max_bytes: int | None = None,
        max_age_s: float | None = None,
        now: float | None = None,
    ) -> int:
        """Apply a retention policy; returns how many events were deleted.

        Each limit given deletes the oldest events past it: ``keep_last`` keeps
        the newest N events, ``max_age_s`` deletes events older than that many
        seconds (before ``now``, default the current time), ``max_bytes``
        deletes oldest events until the database's pages in use (rows and
        indexes) fit in that many bytes. Counters are kept, so ``seq`` and
        ``session_seq`` continue after pruning; replaying from a pruned cursor
        raises CursorExpired.
        """
        _check_cursor("keep_last", keep_last)
        if max_bytes is not None and (
            not isinstance(max_bytes, int) or isinstance(max_bytes, bool) or max_bytes < 0
        ):
            raise ValueError(f"max_bytes must be a non-negative integer or None, got {max_bytes!r}")
        if max_age_s is not None and (
            not isinstance(max_age_s, int | float)
            or isinstance(max_age_s, bool)
            or not max_age_s >= 0
        ):
            raise ValueError(f"max_age_s must be a non-negative number or None, got {max_age_s!r}")
        if keep_last is None and max_bytes is None and max_age_s is None:
            raise ValueError("prune needs keep_last, max_bytes or max_age_s")
        with self._write_lock:
            self._check_open()
            conn = self._write
            deleted = 0
            try:
                if keep_last is not None:
                    # MAX(seq) from the table, not a cached value: another process may write.
                    deleted += conn.execute(
                        "DELETE FROM events WHERE seq <= (SELECT MAX(seq) FROM events) - ?",
                        (keep_last,),
                    ).rowcount
                if max_age_s is not None:
                    cutoff = _rfc3339((time.time() if now is None else now) - max_age_s)
                    # Timestamps grow with seq: walking from the oldest row to the first
                    # young one reads only the rows it deletes (ts is not indexed).
                    row = conn.execute(
                        "SELECT seq FROM events WHERE ts >= ? ORDER BY seq LIMIT 1", (cutoff,)
                    ).fetchone()
                    if row is None:
                        deleted += conn.execute("DELETE FROM events").rowcount
                    else:
                        deleted += conn.execute(
                            "DELETE FROM events WHERE seq < ?", (row[0],)
                        ).rowcount
                if max_bytes is not None:
                    deleted += self._prune_to_size(conn, max_bytes)
            except sqlite3.Error as exc:
                raise EventLogError(f"event log {self._path!r} prune failed: {exc}") from exc
            return deleted

    @staticmethod
    def _prune_to_size(conn: sqlite3.Connection, max_bytes: int) -> int:
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        free = conn.execute("PRAGMA freelist_count").fetchone()[0]
        excess = (pages - free) * page_size - max_bytes
        if excess <= 0:
            return 0
        # Walk from the oldest event, adding up what each row costs (its text plus
        # a rough share of row and index overhead), until the excess is covered:
        # only the rows to delete are read. Freed pages are reused by later
        # writes, so the file stops growing near max_bytes.
        upto: int | None = None
        freed = 0
        rows = conn.execute(
            "SELECT seq, length(json) + 2 * length(session_id) + ? FROM events ORDER BY seq",
            (_ROW_OVERHEAD,),
        )
        try:
            for seq, size in rows:
                upto = seq
                freed += size
                if freed >= excess:
                    break
        finally:
            rows.close()
        if upto is None:
            return 0
        return conn.execute("DELETE FROM events WHERE seq <= ?", (upto,)).rowcount

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
        self,
        session_id: str | None,
        after: int | None,
        limit: int,
        *,
        sessions: Sequence[str] | None = None,
        max_bytes: int | None = None,
    ) -> tuple[str, str | None]:
        """One replay page, packed: ``(metadata JSON array, texts joined by 0x1E)``.

        The log process sends this pair as is; ``eventbus.log.unpack_page``
        turns it into records. ``session_id=None`` pages through all sessions
        by ``seq``, otherwise through one session by ``session_seq``.
        ``sessions`` (with ``session_id=None``) keeps only those sessions'
        events and reads only their rows: the page costs what it returns.
        ``max_bytes`` bounds the page's texts too: rows are taken while those
        before add up to less (so at least one is, however large); a page cut
        that way holds ``max_bytes`` or more.
        """
        _check_cursor("after", after)
        _check_limit(limit)
        if sessions is not None:
            if session_id is not None:
                raise ValueError("sessions filters all-sessions pages only (session_id=None)")
            if isinstance(sessions, str) or not all(isinstance(s, str) and s for s in sessions):
                raise ValueError(f"sessions must be a list of session ids, got {sessions!r}")
        if max_bytes is not None and (
            not isinstance(max_bytes, int) or isinstance(max_bytes, bool) or max_bytes < 1
        ):
            raise ValueError(f"max_bytes must be a positive integer or None, got {max_bytes!r}")
        byte_cap = _NO_BYTE_CAP if max_bytes is None else max_bytes
        params = {"sid": session_id, "after": after or 0, "limit": limit}
        with self._reading() as conn:
            if sessions is None:
                row = conn.execute(sql.PAGE_ALL if session_id is None else sql.PAGE_SESSION, params)
                oldest, last, meta, texts = row.fetchone()
                # len() counts characters (bytes for ASCII text). Usually nothing to cut,
                # and then the byte bound costs nothing (a window function in the
                # query made every page about 3x slower).
                if texts is not None and len(texts) > byte_cap:
                    meta, texts = cut_page(meta, texts, byte_cap)
            else:
                oldest, last, meta, texts = self._visible_page(
                    conn, sessions, after or 0, limit, byte_cap
                )
        if after is not None:
            # With events held, the one before the oldest is the oldest usable cursor;
            # with none held, only "after the last event ever written" is gapless.
            oldest_cursor = oldest - 1 if oldest is not None else (last or 0)
            if after < oldest_cursor:
                raise CursorExpired(
                    cursor=after, oldest_cursor=oldest_cursor, session_id=session_id
                )
        return meta, texts

    def _visible_page(
        self,
        conn: sqlite3.Connection,
        sessions: Sequence[str],
        after: int,
        limit: int,
        max_bytes: int,
    ) -> tuple[int | None, int | None, str, str | None]:
        """A page of the given sessions' events merged in ``seq`` order.

        One cursor per session walks the (session_id, seq) index from the
        cursor on; a k-way merge takes ``limit`` rows, so at most
        ``limit + len(sessions)`` rows are stepped over, whatever the log holds
        for other sessions. One read transaction keeps the statements on one
        snapshot.
        """
        conn.execute("BEGIN")
        cursors: list[sqlite3.Cursor] = []
        try:
            oldest, last = conn.execute(sql.BOUNDS_ALL).fetchone()
            for sid in dict.fromkeys(sessions):  # each once, in the caller's order
                cursors.append(conn.execute(sql.SESSION_BY_SEQ, (sid, after)))
            rows: list[Row] = []
            size = 0
            for row in itertools.islice(heapq.merge(*cursors), limit):
                if size >= max_bytes:
                    break
                rows.append(row)
                size += len(row[6])
        finally:
            for cursor in cursors:
                cursor.close()
            conn.execute("COMMIT")
        meta = json.dumps([list(r[:6]) for r in rows], separators=(",", ":"))
        texts = sql.RECORD_SEPARATOR.join(r[6] for r in rows) if rows else None
        return oldest, last, meta, texts

    def turn_ends(self, turn_ids: Sequence[str]) -> dict[str, str]:
        """The terminal event (``turn.completed|failed|cancelled``) of each of
        ``turn_ids`` the log holds, as envelope text by turn id (the first one
        if, against the rules, there are several). Crash recovery uses it to
        tell a turn that ended before the crash from one that did not."""
        ids = list(dict.fromkeys(turn_ids))
        if not all(isinstance(t, str) and t for t in ids):
            raise ValueError(f"turn_ids must be non-empty strings, got {turn_ids!r}")
        ends: dict[str, str] = {}
        with self._reading() as conn:
            for turn_id, text in conn.execute(sql.TURN_ENDS, (json.dumps(ids),)):
                ends.setdefault(turn_id, text)
        return ends

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
            if self._checkpointer is not None:
                self._checkpointer.close()
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
