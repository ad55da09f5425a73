"""The memory service's interface: what the memory tools and the server's
memory routes use of the store (``MemoryService``), and the records it
hands out.

The store itself (SQLite with FTS5, dispatcher/memory/store.py) is opened
and closed by the server; everything else sees only this interface, so a
tool family or a route never reaches into the store's tables or locks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol


class MemoryNotFound(LookupError):
    """No memory with that id in the caller's scope."""


@dataclass(frozen=True, slots=True)
class Memory:
    """One kept memory."""

    id: str
    workspace: str
    owner: str
    content: str
    tags: tuple[str, ...]
    session_id: str | None
    created_at: str
    updated_at: str

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "workspace": self.workspace,
            "owner": self.owner,
            "content": self.content,
            "tags": list(self.tags),
            "session_id": self.session_id,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
        }


@dataclass(frozen=True, slots=True)
class Merge:
    """One consolidation: ``kept`` absorbed ``merged`` (now deleted)."""

    kept: Memory
    merged: tuple[Memory, ...]
    reason: str  # "identical" | "near_duplicate"


class MemoryService(Protocol):
    """What agents keep between sessions, per workspace and owner. Every call
    is synchronous and short; callers run it off the event loop."""

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
        ...

    def replace(
        self,
        memory_id: str,
        content: str,
        *,
        workspace: str,
        owner: str,
        tags: list[str] | None = None,
    ) -> tuple[Memory, Memory]:
        """Replace a memory's content (and tags, if given): (old, new)."""
        ...

    def delete(
        self, memory_id: str, *, workspace: str | None = None, owner: str | None = None
    ) -> Memory:
        """Delete a memory in the given scope (None: any); returns what was deleted."""
        ...

    def consolidate(self, workspace: str, owner: str) -> list[Merge]:
        """Merge the scope's identical and near-duplicate memories."""
        ...

    def memories(
        self, *, workspace: str | None = None, owner: str | None = None, limit: int = -1
    ) -> list[Memory]:
        """Memories of a scope (None: any workspace / any owner), oldest first."""
        ...

    def search(
        self, query: str, *, workspace: str, owner: str, limit: int = 10
    ) -> list[tuple[Memory, float]]:
        """The best matches of ``query`` in one scope, best first, with a score."""
        ...
