"""Hands the memory store to a session's memory tools.

The memory tools read the ``memory`` section of a session's tool options
(their ``options_section``); its ``memory`` key is a ``MemoryScope``: the
server's one ``MemoryStore``, the session's workspace (its real path) and
owner (the name of the token that created the session), and a publisher of
``memory.*`` events on the session's stream. Kept out of the dispatch-session
factory (server/dispatch_factory.py) so the wiring is one line there.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dispatcher.publisher import EventPublisher
from dispatcher.tools.knowledge.store import MemoryScope, MemoryStore

MEMORY_FILE = "memory.sqlite3"
# The tool-options section the memory tools read.
MEMORY_SECTION = "memory"


def memory_section(
    store: MemoryStore | None,
    *,
    session_id: str,
    workspace: str,
    owner: str,
    publisher: EventPublisher,
) -> dict[str, Mapping[str, Any]]:
    """The ``memory`` tool-options section of one session ({} without a store)."""
    if store is None:
        return {}

    def publish(type: str, data: Mapping[str, Any], turn_id: str | None) -> None:
        publisher.publish(type, data, session_id=session_id, turn_id=turn_id)

    scope = MemoryScope(store, workspace, owner, session_id, publish)
    return {MEMORY_SECTION: {"memory": scope}}
