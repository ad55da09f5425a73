"""Memory: what agents keep between sessions of a workspace, as a service.

The memory tools (dispatcher/tools/knowledge/memory.py), the agents' prompt
and the server's memory routes use memory through this package only: the
``MemoryService`` interface and its records, the ``MemoryScope`` a session's
tools receive, the one publisher of ``memory.*`` events, and the safe FTS5
query text both memory search and ``retrieve_doc`` rank with. The SQLite store
behind it (``MemoryStore``) is opened and closed by the server.
"""

from dispatcher.memory.events import Announce, announce_change, announce_consolidated
from dispatcher.memory.service import Memory, MemoryNotFound, MemoryService, Merge
from dispatcher.memory.store import MemoryScope, MemoryStore, fts_query

__all__ = [
    "Announce",
    "Memory",
    "MemoryNotFound",
    "MemoryScope",
    "MemoryService",
    "MemoryStore",
    "Merge",
    "announce_change",
    "announce_consolidated",
    "fts_query",
]
