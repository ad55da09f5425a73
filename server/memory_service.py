"""Hands the memory store to a session's memory tools.

Each session's memory tools get a ``MemoryScope`` as their ``memory`` tool
option: the server's one ``MemoryStore``, the session's workspace (its real
path) and owner (the name of the token that created the session), and a
publisher of ``memory.*`` events on the session's stream. Kept out of
sessions.py so the wiring is one line there.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dispatcher.publisher import EventPublisher
from dispatcher.tools.knowledge.memory import MEMORY_TOOL_NAMES
from dispatcher.tools.knowledge.store import MemoryScope, MemoryStore

MEMORY_FILE = "memory.sqlite3"


def memory_tool_options(
    store: MemoryStore | None,
    *,
    session_id: str,
    workspace: str,
    owner: str,
    publisher: EventPublisher,
) -> dict[str, Mapping[str, Any]]:
    """``tool_options`` entries for the memory tools ({} without a store)."""
    if store is None:
        return {}

    def publish(type: str, data: Mapping[str, Any], turn_id: str | None) -> None:
        publisher.publish(type, data, session_id=session_id, turn_id=turn_id)

    scope = MemoryScope(store, workspace, owner, session_id, publish)
    return {name: {"memory": scope} for name in MEMORY_TOOL_NAMES}
