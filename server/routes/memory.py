"""Memory routes: see and remove what agents kept (dispatcher.memory).

``GET /memory?workspace=`` lists memories oldest first; ``DELETE
/memory/{id}`` removes one and announces it (``memory.deleted`` on the stream
of the session that wrote it). A user token sees and deletes only its own
memories (those its sessions wrote); an admin token sees every user's, and
may narrow the list with ``owner=``. Another user's memory is a 404, as a
session of another user is.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from fastapi import APIRouter, Query, Response

from dispatcher.memory import Memory, MemoryNotFound, MemoryService, announce_change
from protocol.catalog import EventType
from server.errors import NotFound, StorageUnavailable
from server.memory_service import announcer
from server.routes.deps import BusDep, MemoryDep, PrincipalDep, StoreDep

router = APIRouter(tags=["memory"])


def _open(store: MemoryService | None) -> MemoryService:
    if store is None:
        raise StorageUnavailable("the memory store is not open")
    return store


@router.get("/memory")
async def list_memories(
    memory: MemoryDep,
    principal: PrincipalDep,
    workspace: str | None = Query(None, description="A workspace path (its real path is used)."),
    owner: str | None = Query(None, description="Admin only: one user's memories."),
    limit: int = Query(500, ge=1, le=5000),
) -> dict[str, Any]:
    """The memories this token may see, oldest first."""
    store = _open(memory)
    scope_owner = owner if principal.is_admin else principal.token_name

    def read() -> list[Memory]:
        root = os.path.realpath(os.path.expanduser(workspace)) if workspace else None
        return store.memories(workspace=root, owner=scope_owner, limit=limit)

    memories = await asyncio.to_thread(read)
    return {"memories": [m.to_json() for m in memories], "count": len(memories)}


@router.delete("/memory/{memory_id}", status_code=204)
async def delete_memory(
    memory_id: str,
    memory_store: MemoryDep,
    sessions_store: StoreDep,
    bus: BusDep,
    principal: PrincipalDep,
) -> Response:
    """Forget one memory (a user token: only its own)."""
    store = _open(memory_store)
    owner = None if principal.is_admin else principal.token_name
    try:
        memory = await asyncio.to_thread(store.delete, memory_id, owner=owner)
    except MemoryNotFound:
        raise NotFound(f"memory {memory_id!r} not found") from None
    # Announced on the stream of the session that wrote it, while that exists.
    if memory.session_id and sessions_store.get_session(memory.session_id) is not None:
        announce_change(
            announcer(bus, memory.session_id),
            EventType.MEMORY_DELETED,
            memory,
            None,
            deleted_by=principal.token_name,
        )
    return Response(status_code=204)
