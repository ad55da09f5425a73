"""The one publisher of ``memory.*`` events.

A memory changes through the memory tools (dispatcher/tools/knowledge/memory.py)
and through ``DELETE /memory/{id}`` (server/routes/memory.py); both announce
the change here, so the payloads (and the preview's length) cannot drift
apart. Each announcement goes to the stream of one session (the one whose
tool changed the memory, or the one that wrote it) through an ``Announce``
callable: the session's ``emit`` with its session id bound (see
server/memory_service.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dispatcher.memory.service import Memory, Merge
from protocol.catalog import EventType
from protocol.payloads import (
    MemoryAdded,
    MemoryChanged,
    MemoryConsolidated,
    MemoryDeleted,
    MemoryReplaced,
    Payload,
)

# A payload and the turn it belongs to (None outside a turn), onto one
# session's stream.
Announce = Callable[[Payload, "str | None"], None]

PREVIEW_CHARS = 200


def preview(text: str) -> str:
    """The start of a memory's content, as events show it."""
    return text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 3] + "..."


def announce_change(
    announce: Announce,
    change: EventType,
    memory: Memory,
    turn_id: str | None,
    *,
    previous: Memory | None = None,
    deleted_by: str | None = None,
) -> None:
    """``memory.added``, ``memory.replaced`` (``previous``: the memory before)
    or ``memory.deleted`` (``deleted_by``: ``tool`` or a token's name)."""
    keys: dict[str, Any] = {
        "memory_id": memory.id,
        "workspace": memory.workspace,
        "owner": memory.owner,
        "tags": list(memory.tags),
        "preview": preview(memory.content),
    }
    payload: MemoryChanged
    if change is EventType.MEMORY_ADDED:
        payload = MemoryAdded(**keys)
    elif change is EventType.MEMORY_REPLACED:
        assert previous is not None, "a replacement names the memory it replaced"
        payload = MemoryReplaced(**keys, previous_preview=preview(previous.content))
    elif change is EventType.MEMORY_DELETED:
        payload = MemoryDeleted(**keys, deleted_by=deleted_by)
    else:
        raise ValueError(f"{change} is not a change of one memory")
    announce(payload, turn_id)


def announce_consolidated(
    announce: Announce,
    workspace: str,
    owner: str,
    merges: list[Merge],
    turn_id: str | None,
) -> None:
    """``memory.consolidated``: per merge the kept id, the merged ids and why."""
    announce(
        MemoryConsolidated(
            workspace=workspace,
            owner=owner,
            merges=[
                {
                    "kept_id": m.kept.id,
                    "merged_ids": [o.id for o in m.merged],
                    "reason": m.reason,
                }
                for m in merges
            ],
            removed=sum(len(m.merged) for m in merges),
        ),
        turn_id,
    )
