"""Durable server state: sessions, turns and conversation messages in SQLite.

It lives in the data dir next to (not inside) the event log: the log is the
stream clients replay, this is the state routes answer from. Calls are made
on the event loop: each is one small indexed statement, and WAL with
``synchronous=NORMAL`` commits without an fsync, so a call costs tens of
microseconds, less than a thread hop would.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import replace
from pathlib import Path
from typing import Any

from eventbus.log import storage_cause
from server.errors import StorageUnavailable
from server.records import (
    MessageRecord,
    SessionRecord,
    TurnCancelReason,
    TurnFailureReason,
    TurnKind,
    TurnRecord,
    TurnStatus,
    now_rfc3339,
)

# The records live in server/records.py; importers of this module find them here too.
__all__ = [
    "MessageRecord",
    "SessionRecord",
    "Store",
    "StoreUnavailable",
    "TurnCancelReason",
    "TurnFailureReason",
    "TurnKind",
    "TurnRecord",
    "TurnStatus",
    "now_rfc3339",
]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY,
    name TEXT,
    workspace TEXT NOT NULL,
    owner TEXT NOT NULL,
    model TEXT,
    policy TEXT NOT NULL,
    created_at TEXT NOT NULL,
    deleted_at TEXT,
    agent TEXT,
    profile TEXT,
    parent_session_id TEXT
);
CREATE TABLE IF NOT EXISTS turns (
    id TEXT PRIMARY KEY,
    session_id TEXT NOT NULL REFERENCES sessions(id),
    number INTEGER NOT NULL,
    kind TEXT NOT NULL,
    status TEXT NOT NULL,
    reason TEXT,
    message TEXT,
    request TEXT NOT NULL,
    results TEXT,
    usage TEXT,
    created_by TEXT NOT NULL,
    created_at TEXT NOT NULL,
    finished_at TEXT
);
CREATE INDEX IF NOT EXISTS turns_by_session ON turns(session_id, number);
CREATE INDEX IF NOT EXISTS turns_by_status ON turns(status);
-- Written and emptied by Store.probe only (kept empty): see there.
CREATE TABLE IF NOT EXISTS health_probe (
    id INTEGER PRIMARY KEY,
    pad BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS messages (
    session_id TEXT NOT NULL REFERENCES sessions(id),
    idx INTEGER NOT NULL,
    turn_id TEXT,
    message TEXT NOT NULL,
    created_at TEXT NOT NULL,
    PRIMARY KEY (session_id, idx)
);
"""


PROBE_BYTES = 64 * 1024


class StoreUnavailable(Exception):
    """The state database cannot be opened or used."""


class Store:
    """Sessions, turns and messages; see the module docstring.

    A write that fails because of the storage (disk full, I/O error,
    read-only) raises StorageUnavailable (an HTTP 503 naming the cause) and
    sets ``fault`` until a later write succeeds (``probe`` tries one); the
    failed statement wrote nothing.
    """

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        self.fault: str | None = None

    @contextmanager
    def _writing(self) -> Iterator[None]:
        try:
            yield
        except sqlite3.Error as exc:
            cause = storage_cause(exc)
            if cause is None:
                raise
            if self._conn.in_transaction:
                # Some errors leave the statement's implicit transaction open.
                with suppress(sqlite3.Error):
                    self._conn.execute("ROLLBACK")
            self.fault = f"state database: {cause}"
            raise StorageUnavailable(
                f"the server cannot write its state database: {cause}; it resumes by "
                "itself once the storage is writable again",
                cause=self.fault,
            ) from exc
        self.fault = None

    def probe(self) -> str | None:
        """After a fault: try a write; the fault that remains, or None.

        The write must need new space, or a full disk would pass it (SQLite
        reuses pages it already has): 64 KiB are inserted and deleted in one
        committed transaction, so the pages are allocated and written.
        """
        if self.fault is None:
            return None
        try:
            with self._writing():
                self._conn.execute("BEGIN IMMEDIATE")
                self._conn.execute(
                    "INSERT INTO health_probe (pad) VALUES (zeroblob(?))", (PROBE_BYTES,)
                )
                self._conn.execute("DELETE FROM health_probe")
                self._conn.execute("COMMIT")
        except StorageUnavailable:
            pass
        return self.fault

    @classmethod
    def open(cls, path: str | Path) -> Store:
        try:
            conn = sqlite3.connect(
                str(path), isolation_level=None, check_same_thread=False, timeout=5.0
            )
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA foreign_keys=ON")
            conn.executescript(_SCHEMA)
            # A state database from before turns kept their failure message.
            columns = {row[1] for row in conn.execute("PRAGMA table_info(turns)")}
            if "message" not in columns:
                conn.execute("ALTER TABLE turns ADD COLUMN message TEXT")
            _add_session_columns(conn)
            _add_turn_columns(conn)
        except sqlite3.Error as exc:
            raise StoreUnavailable(f"cannot open the state database {path}: {exc}") from exc
        return cls(conn)

    def close(self) -> None:
        self._conn.close()

    # -- sessions ---------------------------------------------------------

    def add_session(self, record: SessionRecord) -> None:
        with self._writing():
            self._add_session(record)

    def _add_session(self, record: SessionRecord) -> None:
        self._conn.execute(
            "INSERT INTO sessions (id, name, workspace, owner, model, policy, created_at,"
            " agent, profile, parent_session_id, dry_run)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                record.id,
                record.name,
                record.workspace,
                record.owner,
                record.model,
                json.dumps(record.policy_overrides),
                record.created_at,
                record.agent,
                record.profile,
                record.parent_session_id,
                int(record.dry_run),
            ),
        )

    def get_session(self, session_id: str) -> SessionRecord | None:
        row = self._conn.execute(
            f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE id = ? AND deleted_at IS NULL",
            (session_id,),
        ).fetchone()
        return _session(row) if row else None

    def owner_of(self, session_id: str) -> str | None:
        """Who created a session, deleted or not (event visibility needs it)."""
        row = self._conn.execute(
            "SELECT owner FROM sessions WHERE id = ?", (session_id,)
        ).fetchone()
        return str(row[0]) if row else None

    def session_ids_of(self, owner: str) -> list[str]:
        """Ids of every session ``owner`` created, deleted or not (what its
        all-sessions event stream may replay)."""
        rows = self._conn.execute("SELECT id FROM sessions WHERE owner = ?", (owner,)).fetchall()
        return [str(r[0]) for r in rows]

    def list_sessions(self, *, owner: str | None = None) -> list[SessionRecord]:
        sql = f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE deleted_at IS NULL"
        args: tuple[str, ...] = ()
        if owner is not None:
            sql += " AND owner = ?"
            args = (owner,)
        rows = self._conn.execute(sql + " ORDER BY created_at, id", args).fetchall()
        return [_session(r) for r in rows]

    def children_of(self, session_id: str) -> list[str]:
        """Ids of the live worker sessions ``session_id`` dispatched, oldest first."""
        rows = self._conn.execute(
            "SELECT id FROM sessions WHERE parent_session_id = ? AND deleted_at IS NULL"
            " ORDER BY created_at, id",
            (session_id,),
        ).fetchall()
        return [str(r[0]) for r in rows]

    def add_session_tokens(self, session_id: str, tokens: int) -> int:
        """Add ``tokens`` to a session's running total (``limits.max_tokens``)
        and return the new total; one statement, so concurrent adds never
        lose one. 0 for a session that is gone."""
        with self._writing():
            row = self._conn.execute(
                "UPDATE sessions SET tokens_used = COALESCE(tokens_used, 0) + ?"
                " WHERE id = ? RETURNING tokens_used",
                (max(0, tokens), session_id),
            ).fetchone()
        return int(row[0]) if row else 0

    def delete_session(self, session_id: str) -> bool:
        # Kept as a tombstone: the event log still holds the session's events, and
        # deciding who may replay them needs the owner.
        with self._writing():
            cur = self._conn.execute(
                "UPDATE sessions SET deleted_at = ? WHERE id = ? AND deleted_at IS NULL",
                (now_rfc3339(), session_id),
            )
        return cur.rowcount > 0

    # -- turns ------------------------------------------------------------

    def next_turn_number(self, session_id: str) -> int:
        row = self._conn.execute(
            "SELECT COALESCE(MAX(number), 0) FROM turns WHERE session_id = ?", (session_id,)
        ).fetchone()
        return int(row[0]) + 1

    def add_turn(self, record: TurnRecord) -> None:
        with self._writing():
            self._add_turn(record)

    def _add_turn(self, record: TurnRecord) -> None:
        self._conn.execute(
            "INSERT INTO turns (id, session_id, number, kind, status, reason, request, results,"
            " usage, created_by, created_at, finished_at, dry_run)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                record.id,
                record.session_id,
                record.number,
                record.kind,
                record.status,
                record.reason,
                json.dumps(record.request),
                _dump_opt(record.results),
                _dump_opt(record.usage),
                record.created_by,
                record.created_at,
                record.finished_at,
                int(record.dry_run),
            ),
        )

    def finish_turn(
        self,
        turn_id: str,
        *,
        status: TurnStatus,
        reason: str | None = None,
        results: list[dict[str, Any]] | None = None,
        usage: dict[str, Any] | None = None,
        message: str | None = None,
    ) -> TurnRecord | None:
        """Record how a running turn ended; None if it was not running (already ended)."""
        with self._writing():
            cur = self._conn.execute(
                "UPDATE turns SET status = ?, reason = ?, message = ?,"
                " results = COALESCE(?, results), usage = COALESCE(?, usage), finished_at = ?"
                " WHERE id = ? AND status = 'running'",
                (
                    status,
                    reason,
                    message,
                    self._dump_results(turn_id, results),
                    _dump_opt(usage),
                    now_rfc3339(),
                    turn_id,
                ),
            )
        if cur.rowcount == 0:
            return None
        return self.get_turn(turn_id)

    def set_turn_outcome(
        self,
        turn_id: str,
        *,
        results: list[dict[str, Any]] | None,
        usage: dict[str, Any] | None,
        plan: list[dict[str, Any]] | None = None,
        quality_gates: list[dict[str, Any]] | None = None,
    ) -> None:
        """Store a running turn's results, usage, dry-run plan and quality
        gates' outcome before its end is logged, so a recovery that finds the
        end in the log (and the turn still running here) keeps them; the
        status changes only with ``finish_turn``."""
        if results is None and usage is None and plan is None and quality_gates is None:
            return
        with self._writing():
            self._conn.execute(
                "UPDATE turns SET results = COALESCE(?, results), usage = COALESCE(?, usage),"
                " plan = COALESCE(?, plan), quality_gates = COALESCE(?, quality_gates)"
                " WHERE id = ? AND status = 'running'",
                (
                    self._dump_results(turn_id, results),
                    _dump_opt(usage),
                    _dump_opt(plan),
                    _dump_opt(quality_gates),
                    turn_id,
                ),
            )

    def _dump_results(self, turn_id: str, results: list[dict[str, Any]] | None) -> str | None:
        """A turn's results as stored: each one the turn's conversation already
        holds (the tool messages it appended) is stored as a reference to that
        block, ``{"ref": [message index, block index], "tool_use_id": ...}``, so
        a large tool output is kept once, in the conversation, not again here.
        A result not found there (none should be) is stored inline, as turn
        records from before references were; ``_resolve_results`` reads both.
        Results are matched in order, on their whole content, so a tool_use id
        used twice in the turn still finds its own block."""
        if results is None:
            return None
        row = self._conn.execute("SELECT session_id FROM turns WHERE id = ?", (turn_id,)).fetchone()
        blocks: list[tuple[int, int, dict[str, Any]]] = []
        if row is not None:
            for record in self.turn_messages(str(row[0]), turn_id):
                if record.message.get("role") != "tool":
                    continue
                content = record.message.get("content")
                for position, block in enumerate(content if isinstance(content, list) else []):
                    if isinstance(block, dict) and block.get("type") == "tool_result":
                        blocks.append((record.index, position, block))
        stored: list[dict[str, Any]] = []
        start = 0
        for result in results:
            for at in range(start, len(blocks)):
                index, position, block = blocks[at]
                if block == result:
                    stored.append(
                        {"ref": [index, position], "tool_use_id": result.get("tool_use_id")}
                    )
                    start = at + 1
                    break
            else:
                stored.append(result)
        return json.dumps(stored)

    def _resolve_results(self, turns: list[TurnRecord]) -> list[TurnRecord]:
        """``turns`` with each result reference replaced by the tool_result block
        it points to (one read of the referenced messages for all of them)."""
        wanted: dict[str, set[int]] = {}
        for turn in turns:
            for entry in turn.results or ():
                if "ref" in entry:
                    wanted.setdefault(turn.session_id, set()).add(int(entry["ref"][0]))
        if not wanted:
            return turns
        found: dict[tuple[str, int], dict[str, Any]] = {}
        for session_id, indexes in wanted.items():
            ordered = sorted(indexes)
            for chunk in range(0, len(ordered), 500):  # SQLite's bound-parameter limit
                part = ordered[chunk : chunk + 500]
                rows = self._conn.execute(
                    "SELECT idx, message FROM messages WHERE session_id = ? AND idx IN"
                    f" ({', '.join('?' * len(part))})",
                    (session_id, *part),
                ).fetchall()
                for idx, text in rows:
                    found[(session_id, int(idx))] = json.loads(text)
        resolved: list[TurnRecord] = []
        for turn in turns:
            if not any("ref" in entry for entry in turn.results or ()):
                resolved.append(turn)
                continue
            results = [
                _referenced(entry, found.get((turn.session_id, int(entry["ref"][0]))))
                if "ref" in entry
                else entry
                for entry in turn.results or ()
            ]
            resolved.append(replace(turn, results=results))
        return resolved

    def get_turn(self, turn_id: str, *, session_id: str | None = None) -> TurnRecord | None:
        row = self._conn.execute(
            f"SELECT {_TURN_COLUMNS} FROM turns WHERE id = ?",
            (turn_id,),
        ).fetchone()
        if row is None:
            return None
        turn = _turn(row)
        if session_id is not None and turn.session_id != session_id:
            return None
        return self._resolve_results([turn])[0]

    def list_turns(self, session_id: str) -> list[TurnRecord]:
        rows = self._conn.execute(
            f"SELECT {_TURN_COLUMNS} FROM turns WHERE session_id = ? ORDER BY number",
            (session_id,),
        ).fetchall()
        return self._resolve_results([_turn(r) for r in rows])

    def running_turns(self) -> list[TurnRecord]:
        rows = self._conn.execute(
            f"SELECT {_TURN_COLUMNS} FROM turns WHERE status = 'running' ORDER BY created_at",
        ).fetchall()
        return self._resolve_results([_turn(r) for r in rows])

    # -- messages ---------------------------------------------------------

    def append_message(
        self, session_id: str, message: dict[str, Any], *, turn_id: str | None
    ) -> MessageRecord:
        created_at = now_rfc3339()
        # One statement picks the next index, so two appends can never share one.
        with self._writing():
            row = self._conn.execute(
                "INSERT INTO messages (session_id, idx, turn_id, message, created_at)"
                " SELECT ?, COALESCE(MAX(idx), -1) + 1, ?, ?, ? FROM messages"
                " WHERE session_id = ? RETURNING idx",
                (session_id, turn_id, json.dumps(message), created_at, session_id),
            ).fetchone()
        return MessageRecord(int(row[0]), turn_id, message, created_at)

    def turn_messages(self, session_id: str, turn_id: str) -> list[MessageRecord]:
        """The messages one turn added, in order."""
        rows = self._conn.execute(
            "SELECT idx, turn_id, message, created_at FROM messages"
            " WHERE session_id = ? AND turn_id = ? ORDER BY idx",
            (session_id, turn_id),
        ).fetchall()
        return [MessageRecord(int(r[0]), r[1], json.loads(r[2]), r[3]) for r in rows]

    def messages(self, session_id: str) -> list[MessageRecord]:
        rows = self._conn.execute(
            "SELECT idx, turn_id, message, created_at FROM messages WHERE session_id = ?"
            " ORDER BY idx",
            (session_id,),
        ).fetchall()
        return [MessageRecord(int(r[0]), r[1], json.loads(r[2]), r[3]) for r in rows]

    def messages_after(self, session_id: str, index: int) -> list[MessageRecord]:
        """The session's messages with an index above ``index`` (-1: all), in order.

        One range read of the primary key: what a turn needs to extend a
        conversation it already holds, at a cost that does not grow with it.
        """
        rows = self._conn.execute(
            "SELECT idx, turn_id, message, created_at FROM messages"
            " WHERE session_id = ? AND idx > ? ORDER BY idx",
            (session_id, index),
        ).fetchall()
        return [MessageRecord(int(r[0]), r[1], json.loads(r[2]), r[3]) for r in rows]


def _referenced(entry: dict[str, Any], message: dict[str, Any] | None) -> dict[str, Any]:
    """The tool_result block a stored reference points to; an error result if
    the message is gone (it never should be: messages are not deleted)."""
    index, position = entry["ref"]
    content = message.get("content") if message is not None else None
    if isinstance(content, list) and 0 <= position < len(content):
        block = content[position]
        if isinstance(block, dict) and block.get("type") == "tool_result":
            return block
    return {
        "type": "tool_result",
        "tool_use_id": entry.get("tool_use_id") or "",
        "content": [{"type": "text", "text": f"(result missing: message {index} is gone)"}],
        "is_error": True,
    }


def _dump_opt(value: Any) -> str | None:
    return None if value is None else json.dumps(value)


def _load_opt(text: str | None) -> Any:
    return None if text is None else json.loads(text)


_SESSION_COLUMNS = (
    "id, name, workspace, owner, model, policy, created_at, agent, profile, parent_session_id,"
    " dry_run, tokens_used"
)
_TURN_COLUMNS = (
    "id, session_id, number, kind, status, reason, request, results, usage,"
    " created_by, created_at, finished_at, message, dry_run, plan, quality_gates"
)
# Columns sessions gained after the first release: (name, SQL type).
_LATER_SESSION_COLUMNS = (("agent", "TEXT"), ("profile", "TEXT"), ("parent_session_id", "TEXT"))
# The execution pipeline's (issue 13); NULL in existing rows reads as 0 / false.
_PIPELINE_SESSION_COLUMNS = (("dry_run", "INTEGER"), ("tokens_used", "INTEGER"))
_LATER_TURN_COLUMNS = (("dry_run", "INTEGER"), ("plan", "TEXT"), ("quality_gates", "TEXT"))


def _add_session_columns(conn: sqlite3.Connection) -> None:
    """Bring a sessions table from an older data dir up to date: the columns
    it lacks are added (NULL in existing rows: such a session runs as before,
    with no agent and the ``full`` profile), nothing else changes."""
    have = {row[1] for row in conn.execute("PRAGMA table_info(sessions)")}
    for name, kind in (*_LATER_SESSION_COLUMNS, *_PIPELINE_SESSION_COLUMNS):
        if name not in have:
            conn.execute(f"ALTER TABLE sessions ADD COLUMN {name} {kind}")
    conn.execute("CREATE INDEX IF NOT EXISTS sessions_by_parent ON sessions(parent_session_id)")


def _add_turn_columns(conn: sqlite3.Connection) -> None:
    """The turn columns of the execution pipeline, added to an older data
    dir's turns table (NULL in existing rows: not a dry-run, no plan)."""
    have = {row[1] for row in conn.execute("PRAGMA table_info(turns)")}
    for name, kind in _LATER_TURN_COLUMNS:
        if name not in have:
            conn.execute(f"ALTER TABLE turns ADD COLUMN {name} {kind}")


def _session(row: tuple[Any, ...]) -> SessionRecord:
    return SessionRecord(
        id=row[0],
        name=row[1],
        workspace=row[2],
        owner=row[3],
        model=row[4],
        policy_overrides=json.loads(row[5]),
        created_at=row[6],
        agent=row[7],
        profile=row[8],
        parent_session_id=row[9],
        dry_run=bool(row[10]),
        tokens_used=int(row[11] or 0),
    )


def _turn(row: tuple[Any, ...]) -> TurnRecord:
    return TurnRecord(
        id=row[0],
        session_id=row[1],
        number=int(row[2]),
        kind=row[3],
        status=TurnStatus(row[4]),
        reason=row[5],
        request=json.loads(row[6]),
        results=_load_opt(row[7]),
        usage=_load_opt(row[8]),
        created_by=row[9],
        created_at=row[10],
        finished_at=row[11],
        message=row[12],
        dry_run=bool(row[13]),
        plan=_load_opt(row[14]),
        quality_gates=_load_opt(row[15]),
    )
