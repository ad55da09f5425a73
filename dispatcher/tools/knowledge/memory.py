"""memory_add, memory_replace, memory_search, memory_consolidate, memory_delete.

What an agent keeps between sessions of one workspace (dispatcher.memory).
The session hands the tools a ``MemoryScope`` as their ``memory`` tool option:
the store, the session's workspace and owner (the token that created the
session), and how to publish a ``memory.*`` event on the session's stream.

Side effects ``none``, on purpose: these tools change only the memory store
in the server's data dir, never the workspace, a process or the network, so
the default policy runs them without a prompt (as it runs reads). Every change
is still visible: an event per write, and ``GET /memory`` / ``DELETE
/memory/{id}`` let a person see and remove what was kept.

Each tool answers the model in a line or a list and clients with the same
facts as ``ToolOutput.data``, shaped by its ``definition.output_schema``.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, ClassVar

from dispatcher.errors import ToolExecutionError, ToolValidationFailed
from dispatcher.memory import (
    Memory,
    MemoryNotFound,
    MemoryScope,
    announce_change,
    announce_consolidated,
)
from dispatcher.tool import BaseTool, ToolContext, ToolEffects, ToolOutput, summarize_input
from dispatcher.tools.common import check_cancelled, object_schema
from dispatcher.tools.shapes import COUNT, NUMBER, STRING, array, record
from protocol.canonical import SideEffects, ToolDefinition
from protocol.catalog import EventType

if TYPE_CHECKING:
    from dispatcher.sandbox import Sandbox
    from dispatcher.workspace import WorkspaceFileAPI

_ID = {"type": "string", "minLength": 1, "description": "The memory's id (mem_...)."}
# _public(memory)
_MEMORY_PROPERTIES: dict[str, dict[str, Any]] = {
    "id": STRING,
    "content": STRING,
    "tags": array(STRING),
    "created_at": STRING,
    "updated_at": STRING,
}
_MEMORY_SCHEMA = record(_MEMORY_PROPERTIES)
ADD_OUTPUT = record({"id": STRING, "memory": _MEMORY_SCHEMA})
REPLACE_OUTPUT = record(
    {"memory": _MEMORY_SCHEMA, "previous": {"type": "string", "description": "The old content."}}
)
SEARCH_OUTPUT = record(
    {
        "results": array(
            record({**_MEMORY_PROPERTIES, "score": NUMBER}), "Best match first (higher score)."
        )
    }
)
CONSOLIDATE_OUTPUT = record(
    {
        "merges": array(
            record({"kept": _MEMORY_SCHEMA, "merged_ids": array(STRING), "reason": STRING})
        ),
        "removed": COUNT,
    }
)
DELETE_OUTPUT = record({"id": STRING})


def _scope(context: ToolContext) -> MemoryScope:
    scope = context.options.get("memory")
    if not isinstance(scope, MemoryScope):
        raise ToolExecutionError("memory is not available in this session (no memory store)")
    return scope


def _public(m: Memory) -> dict[str, Any]:
    return {
        "id": m.id,
        "content": m.content,
        "tags": list(m.tags),
        "created_at": m.created_at,
        "updated_at": m.updated_at,
    }


class _MemoryTool(BaseTool):
    """What every memory tool shares: the ``memory`` options section (the
    session's MemoryScope, see _scope)."""

    options_section: ClassVar[str | None] = "memory"

    async def effects(
        self,
        input: dict[str, Any],
        workspace: WorkspaceFileAPI,
        *,
        sandbox: Sandbox | None = None,
        prepared: Any = None,
    ) -> ToolEffects:
        """The memory store lives in the server's data dir: no workspace file,
        no process."""
        return ToolEffects(summary=summarize_input(self.definition.name, input))


class MemoryAddTool(_MemoryTool):
    """Keeps a new memory for this workspace (and this token's user)."""

    definition: ToolDefinition = ToolDefinition(
        name="memory_add",
        description=(
            "Remember a fact, decision or convention about this workspace for later sessions "
            "(only you, in this workspace, will find it). Returns the memory's id."
        ),
        input_schema=object_schema(
            {
                "content": {"type": "string", "minLength": 1, "maxLength": 20000},
                "tags": {
                    "type": "array",
                    "items": {"type": "string", "minLength": 1, "maxLength": 64},
                    "maxItems": 20,
                },
            },
            ["content"],
        ),
        side_effects=SideEffects.NONE,
        output_schema=ADD_OUTPUT,
    )

    async def execute(self, input: dict[str, Any], context: ToolContext) -> ToolOutput:
        check_cancelled(context, "memory_add")
        scope = _scope(context)
        try:
            memory = await asyncio.to_thread(
                lambda: scope.store.add(
                    scope.workspace,
                    scope.owner,
                    input["content"],
                    input.get("tags", []),
                    session_id=scope.session_id,
                )
            )
        except ValueError as exc:
            raise ToolValidationFailed(str(exc)) from None
        announce_change(scope.publish, EventType.MEMORY_ADDED, memory, context.turn_id)
        return ToolOutput.text(
            f"remembered as {memory.id}", data={"id": memory.id, "memory": _public(memory)}
        )


class MemoryReplaceTool(_MemoryTool):
    """Replaces the content of one of this workspace's memories."""

    definition: ToolDefinition = ToolDefinition(
        name="memory_replace",
        description="Replace the content (and optionally the tags) of a memory, by id.",
        input_schema=object_schema(
            {
                "id": _ID,
                "content": {"type": "string", "minLength": 1, "maxLength": 20000},
                "tags": {
                    "type": "array",
                    "items": {"type": "string", "minLength": 1, "maxLength": 64},
                    "maxItems": 20,
                },
            },
            ["id", "content"],
        ),
        side_effects=SideEffects.NONE,
        output_schema=REPLACE_OUTPUT,
    )

    async def execute(self, input: dict[str, Any], context: ToolContext) -> ToolOutput:
        check_cancelled(context, "memory_replace")
        scope = _scope(context)
        try:
            old, new = await asyncio.to_thread(
                lambda: scope.store.replace(
                    input["id"],
                    input["content"],
                    workspace=scope.workspace,
                    owner=scope.owner,
                    tags=input.get("tags"),
                )
            )
        except MemoryNotFound:
            raise ToolExecutionError(f"no memory {input['id']!r} in this workspace") from None
        except ValueError as exc:
            raise ToolValidationFailed(str(exc)) from None
        announce_change(
            scope.publish, EventType.MEMORY_REPLACED, new, context.turn_id, previous=old
        )
        return ToolOutput.text(
            f"replaced {new.id}", data={"memory": _public(new), "previous": old.content}
        )


class MemorySearchTool(_MemoryTool):
    """Full-text search of this workspace's memories, best match first."""

    definition: ToolDefinition = ToolDefinition(
        name="memory_search",
        description=(
            "Search what was remembered about this workspace (full-text, ranked by relevance; "
            "any word may match, more matching words rank higher)."
        ),
        input_schema=object_schema(
            {
                "query": {"type": "string", "minLength": 1, "maxLength": 2000},
                "limit": {"type": "integer", "minimum": 1, "maximum": 100},
            },
            ["query"],
        ),
        # Reads only the memory store, not the workspace: nothing to confirm.
        side_effects=SideEffects.NONE,
        output_schema=SEARCH_OUTPUT,
    )

    async def execute(self, input: dict[str, Any], context: ToolContext) -> ToolOutput:
        check_cancelled(context, "memory_search")
        scope = _scope(context)
        found = await asyncio.to_thread(
            lambda: scope.store.search(
                input["query"],
                workspace=scope.workspace,
                owner=scope.owner,
                limit=input.get("limit", 10),
            )
        )
        # bm25 as SQLite reports it is "lower is better"; negated, higher is better.
        results = [{**_public(m), "score": round(-score, 6)} for m, score in found]
        text = (
            "\n".join(f"{r['id']} [{', '.join(r['tags'])}] {r['content']}" for r in results)
            or "(no memory matches)"
        )
        return ToolOutput.text(text, data={"results": results})


class MemoryConsolidateTool(_MemoryTool):
    """Merges this workspace's duplicate and near-duplicate memories."""

    definition: ToolDefinition = ToolDefinition(
        name="memory_consolidate",
        description=(
            "Merge duplicate and near-duplicate memories of this workspace (same text up to "
            "case and punctuation, or nearly the same words). Returns what was merged."
        ),
        input_schema=object_schema({}, []),
        side_effects=SideEffects.NONE,
        output_schema=CONSOLIDATE_OUTPUT,
    )

    async def execute(self, input: dict[str, Any], context: ToolContext) -> ToolOutput:
        check_cancelled(context, "memory_consolidate")
        scope = _scope(context)
        merges = await asyncio.to_thread(
            lambda: scope.store.consolidate(scope.workspace, scope.owner)
        )
        out: list[dict[str, Any]] = [
            {
                "kept": _public(m.kept),
                "merged_ids": [o.id for o in m.merged],
                "reason": m.reason,
            }
            for m in merges
        ]
        removed = sum(len(m["merged_ids"]) for m in out)
        if merges:
            announce_consolidated(
                scope.publish, scope.workspace, scope.owner, merges, context.turn_id
            )
        text = (
            "\n".join(
                f"kept {m['kept']['id']}, merged {', '.join(m['merged_ids'])} ({m['reason']})"
                for m in out
            )
            or "(nothing to merge)"
        )
        return ToolOutput.text(text, data={"merges": out, "removed": removed})


class MemoryDeleteTool(_MemoryTool):
    """Forgets one of this workspace's memories."""

    definition: ToolDefinition = ToolDefinition(
        name="memory_delete",
        description="Delete a memory of this workspace, by id.",
        input_schema=object_schema({"id": _ID}, ["id"]),
        side_effects=SideEffects.NONE,
        output_schema=DELETE_OUTPUT,
    )

    async def execute(self, input: dict[str, Any], context: ToolContext) -> ToolOutput:
        check_cancelled(context, "memory_delete")
        scope = _scope(context)
        try:
            memory = await asyncio.to_thread(
                lambda: scope.store.delete(
                    input["id"], workspace=scope.workspace, owner=scope.owner
                )
            )
        except MemoryNotFound:
            raise ToolExecutionError(f"no memory {input['id']!r} in this workspace") from None
        announce_change(
            scope.publish, EventType.MEMORY_DELETED, memory, context.turn_id, deleted_by="tool"
        )
        return ToolOutput.text(f"deleted {memory.id}", data={"id": memory.id})


MEMORY_TOOLS = (
    MemoryAddTool,
    MemoryReplaceTool,
    MemorySearchTool,
    MemoryConsolidateTool,
    MemoryDeleteTool,
)
MEMORY_TOOL_NAMES = tuple(t.definition.name for t in MEMORY_TOOLS)
