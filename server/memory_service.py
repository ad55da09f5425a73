"""Hands the memory store to a session's memory tools.

The memory tools read the ``memory`` section of a session's tool options
(their ``options_section``); its ``memory`` key is a ``MemoryScope``: the
server's one memory store (a ``MemoryService``), the session's workspace (its real path) and
owner (the name of the token that created the session), and how to announce
a ``memory.*`` event on the session's stream (``announcer``; the payloads are
built in dispatcher/memory/events.py, for the tools and for
``DELETE /memory/{id}`` alike). Kept out of the dispatch-session factory
(server/dispatch_factory.py) so the wiring is one line there.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dispatcher.memory import Announce, MemoryScope, MemoryService
from dispatcher.publisher import EventPublisher
from protocol.payloads import Payload

MEMORY_FILE = "memory.sqlite3"
# The tool-options section the memory tools read.
MEMORY_SECTION = "memory"


def memory_section(
    store: MemoryService | None,
    *,
    session_id: str,
    workspace: str,
    owner: str,
    publisher: EventPublisher,
) -> dict[str, Mapping[str, Any]]:
    """The ``memory`` tool-options section of one session ({} without a store)."""
    if store is None:
        return {}

    scope = MemoryScope(store, workspace, owner, session_id, announcer(publisher, session_id))
    return {MEMORY_SECTION: {"memory": scope}}


def announcer(publisher: EventPublisher, session_id: str) -> Announce:
    """Announce memory changes on the stream of ``session_id``."""

    def announce(payload: Payload, turn_id: str | None) -> None:
        publisher.emit(payload, session_id=session_id, turn_id=turn_id)

    return announce
