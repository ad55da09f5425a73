"""The memory store: what agents keep between sessions, in SQLite with FTS5.

One database file in the server's data dir (never in a workspace). Every
memory belongs to one workspace (its real path) and one owner (the name of
the token whose session wrote it); tools see only their session's pair, a
user token's HTTP calls only its own owner's memories (server/routes/memory.py).
Callers outside this package use it through ``dispatcher.memory`` (the
``MemoryService`` interface); the server opens and closes the one store.

Search is SQLite FTS5 with the ``porter unicode61`` tokenizer, ranked by
bm25 (content weighs more than tags). Consolidation merges memories whose
normalised text is equal, or whose word sets are nearly the same (Jaccard
similarity at least ``NEAR_DUPLICATE``): the oldest is kept, its tags become
the union, the longer text wins, the others are deleted.

Thread-safe: one connection, one lock; callers run it off the event loop
(every call is a few small statements, well under a millisecond).
"""

from __future__ import annotations

import json
import re
import secrets
import sqlite3
import threading
import unicodedata
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from dispatcher.memory.service import Memory, MemoryNotFound, MemoryService, Merge
from protocol.payloads import Payload

NEAR_DUPLICATE = 0.8
MAX_CONTENT_CHARS = 20_000
MAX_TAGS = 20
_WORD = re.compile(r"\w+", re.UNICODE)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS memories (
    id TEXT PRIMARY KEY,
    workspace TEXT NOT NULL,
    owner TEXT NOT NULL,
    content TEXT NOT NULL,
    tags TEXT NOT NULL DEFAULT '[]',
    session_id TEXT,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS memories_scope ON memories (workspace, owner, created_at);
CREATE VIRTUAL TABLE IF NOT EXISTS memories_fts USING fts5(
    id UNINDEXED, content, tags, tokenize = 'porter unicode61'
);
"""


def normalize(text: str) -> str:
    """Text compared for identity: case-folded, NFKC, words only, single spaces."""
    return " ".join(_WORD.findall(unicodedata.normalize("NFKC", text).casefold()))


def jaccard(a: str, b: str) -> float:
    """Word-set Jaccard similarity of two texts (1.0 for two empty texts)."""
    sa, sb = set(normalize(a).split()), set(normalize(b).split())
    if not sa and not sb:
        return 1.0
    return len(sa & sb) / len(sa | sb)


def fts_query(text: str) -> str | None:
    """A safe FTS5 query for free text: each word quoted (no operator or
    column syntax reaches FTS5), any word may match; None if no word."""
    words = _WORD.findall(text)
    if not words:
        return None
    return " OR ".join('"' + w.replace('"', '""') + '"' for w in words[:64])


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


class MemoryStore:
    """The memories of every workspace and owner, in one SQLite file."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        self._lock = threading.Lock()

    @classmethod
    def open(cls, path: str | Path) -> MemoryStore:
        """Open (creating if needed) the store at ``path`` (``:memory:`` for tests)."""
        conn = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA busy_timeout=5000")
        conn.executescript(_SCHEMA)
        return cls(conn)

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._conn
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    @staticmethod
    def _row(row: tuple[Any, ...]) -> Memory:
        return Memory(
            id=row[0],
            workspace=row[1],
            owner=row[2],
            content=row[3],
            tags=tuple(json.loads(row[4])),
            session_id=row[5],
            created_at=row[6],
            updated_at=row[7],
        )

    _COLUMNS = "id, workspace, owner, content, tags, session_id, created_at, updated_at"

    # -- writes -----------------------------------------------------------

    def add(
        self,
        workspace: str,
        owner: str,
        content: str,
        tags: list[str] | tuple[str, ...] = (),
        *,
        session_id: str | None = None,
    ) -> Memory:
        """Keep a new memory; returns it (with its new id)."""
        content = _check_content(content)
        clean_tags = _check_tags(tags)
        now = _now()
        memory = Memory(
            id="mem_" + secrets.token_hex(8),
            workspace=workspace,
            owner=owner,
            content=content,
            tags=clean_tags,
            session_id=session_id,
            created_at=now,
            updated_at=now,
        )
        with self._tx() as db:
            self._insert(db, memory)
        return memory

    def _insert(self, db: sqlite3.Connection, m: Memory) -> None:
        db.execute(
            f"INSERT INTO memories ({self._COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                m.id,
                m.workspace,
                m.owner,
                m.content,
                json.dumps(list(m.tags)),
                m.session_id,
                m.created_at,
                m.updated_at,
            ),
        )
        db.execute(
            "INSERT INTO memories_fts (id, content, tags) VALUES (?, ?, ?)",
            (m.id, m.content, " ".join(m.tags)),
        )

    def _update(
        self, db: sqlite3.Connection, m: Memory, content: str, tags: tuple[str, ...]
    ) -> Memory:
        new = Memory(m.id, m.workspace, m.owner, content, tags, m.session_id, m.created_at, _now())
        db.execute(
            "UPDATE memories SET content = ?, tags = ?, updated_at = ? WHERE id = ?",
            (new.content, json.dumps(list(new.tags)), new.updated_at, new.id),
        )
        db.execute(
            "UPDATE memories_fts SET content = ?, tags = ? WHERE id = ?",
            (new.content, " ".join(new.tags), new.id),
        )
        return new

    def _delete(self, db: sqlite3.Connection, memory_id: str) -> None:
        db.execute("DELETE FROM memories WHERE id = ?", (memory_id,))
        db.execute("DELETE FROM memories_fts WHERE id = ?", (memory_id,))

    def replace(
        self,
        memory_id: str,
        content: str,
        *,
        workspace: str,
        owner: str,
        tags: list[str] | None = None,
    ) -> tuple[Memory, Memory]:
        """Replace a memory's content (and tags, if given): (old, new).
        MemoryNotFound unless it belongs to ``workspace`` and ``owner``."""
        content = _check_content(content)
        with self._tx() as db:
            old = self._get(db, memory_id, workspace=workspace, owner=owner)
            new_tags = old.tags if tags is None else _check_tags(tags)
            return old, self._update(db, old, content, new_tags)

    def delete(
        self, memory_id: str, *, workspace: str | None = None, owner: str | None = None
    ) -> Memory:
        """Delete a memory in the given scope (None: any); returns what was deleted."""
        with self._tx() as db:
            memory = self._get(db, memory_id, workspace=workspace, owner=owner)
            self._delete(db, memory_id)
            return memory

    def consolidate(self, workspace: str, owner: str) -> list[Merge]:
        """Merge duplicates and near-duplicates of one scope (see the module
        docstring); returns the merges made, oldest kept memory first."""
        with self._tx() as db:
            memories = self._list(db, workspace, owner)
            merges: list[Merge] = []
            gone: set[str] = set()
            norms = {m.id: normalize(m.content) for m in memories}
            for i, keep in enumerate(memories):
                if keep.id in gone:
                    continue
                absorbed: list[Memory] = []
                reason = "identical"
                for other in memories[i + 1 :]:
                    if other.id in gone:
                        continue
                    if norms[other.id] == norms[keep.id]:
                        absorbed.append(other)
                    elif jaccard(keep.content, other.content) >= NEAR_DUPLICATE:
                        absorbed.append(other)
                        reason = "near_duplicate"
                if not absorbed:
                    continue
                content = max([keep, *absorbed], key=lambda m: len(m.content)).content
                tags = tuple(dict.fromkeys(t for m in (keep, *absorbed) for t in m.tags))
                kept = self._update(db, keep, content, tags[:MAX_TAGS])
                for other in absorbed:
                    self._delete(db, other.id)
                    gone.add(other.id)
                merges.append(Merge(kept, tuple(absorbed), reason))
            return merges

    # -- reads ------------------------------------------------------------

    def _get(
        self,
        db: sqlite3.Connection,
        memory_id: str,
        *,
        workspace: str | None = None,
        owner: str | None = None,
    ) -> Memory:
        row = db.execute(
            f"SELECT {self._COLUMNS} FROM memories WHERE id = ?", (memory_id,)
        ).fetchone()
        if row is None:
            raise MemoryNotFound(memory_id)
        memory = self._row(row)
        if (workspace is not None and memory.workspace != workspace) or (
            owner is not None and memory.owner != owner
        ):
            raise MemoryNotFound(memory_id)  # another scope's memory does not exist here
        return memory

    def get(
        self, memory_id: str, *, workspace: str | None = None, owner: str | None = None
    ) -> Memory:
        with self._lock:
            return self._get(self._conn, memory_id, workspace=workspace, owner=owner)

    def _list(
        self, db: sqlite3.Connection, workspace: str | None, owner: str | None, limit: int = -1
    ) -> list[Memory]:
        where, args = _scope_sql(workspace, owner)
        rows = db.execute(
            f"SELECT {self._COLUMNS} FROM memories {where} ORDER BY created_at, id LIMIT ?",
            (*args, limit),
        ).fetchall()
        return [self._row(r) for r in rows]

    def memories(
        self, *, workspace: str | None = None, owner: str | None = None, limit: int = -1
    ) -> list[Memory]:
        """Memories of a scope (None: any workspace / any owner), oldest first."""
        with self._lock:
            return self._list(self._conn, workspace, owner, limit)

    def search(
        self, query: str, *, workspace: str, owner: str, limit: int = 10
    ) -> list[tuple[Memory, float]]:
        """The best matches of ``query`` in one scope, best first, with their
        bm25 score (lower is better, as SQLite reports it)."""
        match = fts_query(query)
        if match is None:
            return []
        cols = ", ".join(f"m.{c.strip()}" for c in self._COLUMNS.split(","))
        with self._lock:
            rows = self._conn.execute(
                f"SELECT {cols}, bm25(memories_fts, 0.0, 1.0, 0.5) AS score "
                "FROM memories_fts JOIN memories m ON m.id = memories_fts.id "
                "WHERE memories_fts MATCH ? AND m.workspace = ? AND m.owner = ? "
                "ORDER BY score LIMIT ?",
                (match, workspace, owner, limit),
            ).fetchall()
        return [(self._row(r[:8]), float(r[8])) for r in rows]


def _scope_sql(workspace: str | None, owner: str | None) -> tuple[str, tuple[str, ...]]:
    clauses, args = [], []
    if workspace is not None:
        clauses.append("workspace = ?")
        args.append(workspace)
    if owner is not None:
        clauses.append("owner = ?")
        args.append(owner)
    return ("WHERE " + " AND ".join(clauses) if clauses else ""), tuple(args)


def _check_content(content: str) -> str:
    content = content.strip()
    if not content:
        raise ValueError("content must not be empty")
    if len(content) > MAX_CONTENT_CHARS:
        raise ValueError(f"content is longer than {MAX_CONTENT_CHARS} characters")
    return content


def _check_tags(tags: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    clean = tuple(dict.fromkeys(t.strip() for t in tags if t.strip()))
    if len(clean) > MAX_TAGS:
        raise ValueError(f"at most {MAX_TAGS} tags")
    return clean


# (payload, turn id): announces a change on the session's stream; the
# payloads are built in dispatcher/memory/events.py.
Publish = Callable[[Payload, "str | None"], None]


def _no_publish(payload: Payload, turn_id: str | None) -> None:
    return None


@dataclass(frozen=True, slots=True)
class MemoryScope:
    """What a session's memory tools work on: the store, the session's
    workspace and owner, and how to announce a change (an event on the
    session's stream). Handed to the tools as the ``memory`` tool option."""

    store: MemoryService
    workspace: str
    owner: str
    session_id: str
    publish: Publish = _no_publish
