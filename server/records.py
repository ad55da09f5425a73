"""The records of server state (sessions, turns, conversation messages)
and the vocabularies they carry (turn status, failure and cancel reasons).

Kept apart from the SQLite store (server/store.py), which reads and writes
them: routes, the turn supervisor and the agent loop hold records without
needing the database code.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Literal

TurnKind = Literal["tool_uses", "message"]


class TurnStatus(StrEnum):
    """How a turn stands, as stored and as ``GET .../turns/{id}`` reports it.
    The values are a client contract (specs/server-api.md)."""

    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


class TurnFailureReason(StrEnum):
    """Why a turn failed: the ``reason`` of a failed turn and of its
    ``turn.failed`` event. The values are a client contract (specs/server-api.md)."""

    INTERNAL_ERROR = "internal_error"
    STORAGE_UNAVAILABLE = "storage_unavailable"
    SERVER_SHUTDOWN = "server_shutdown"
    SERVER_RESTART = "server_restart"
    INTERRUPTED = "interrupted"
    MODEL_ERROR = "model_error"
    STEP_LIMIT = "step_limit"
    SESSION_MISSING = "session_missing"
    # Scale-out: the replica running the turn died; a survivor ended it.
    REPLICA_LOST = "replica_lost"
    # The session's token budget (limits.max_tokens) is used up.
    BUDGET_EXHAUSTED = "budget_exhausted"
    # A pre_llm_call hook blocked the model call (exit 2).
    BLOCKED_BY_HOOK = "blocked_by_hook"


class TurnCancelReason(StrEnum):
    """Why a turn was cancelled: the ``reason`` of a cancelled turn and of its
    ``turn.cancelled`` event (the space in ``session deleted`` is historical
    and kept: clients match on it)."""

    CANCELLED = "cancelled"
    SESSION_DELETED = "session deleted"


def now_rfc3339() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


@dataclass(frozen=True, slots=True)
class SessionRecord:
    """A session as stored."""

    id: str
    workspace: str
    owner: str
    name: str | None = None
    model: str | None = None
    policy_overrides: dict[str, Any] = field(default_factory=dict)
    created_at: str = field(default_factory=now_rfc3339)
    # The agent and permission profile it runs as (None: a session stored
    # before sessions had them; it runs as before: no agent, profile full).
    agent: str | None = None
    profile: str | None = None
    # Set on a sub-agent's worker session: the session that dispatched it.
    parent_session_id: str | None = None
    # Every turn of the session is a dry-run (specs/pipeline.md).
    dry_run: bool = False
    # Input + output tokens its model calls used so far (limits.max_tokens).
    tokens_used: int = 0


@dataclass(frozen=True, slots=True)
class TurnRecord:
    """A turn as stored. ``results`` holds tool_result blocks as JSON objects."""

    id: str
    session_id: str
    number: int
    kind: TurnKind
    status: TurnStatus
    request: dict[str, Any]
    created_by: str
    reason: str | None = None
    # A failed turn's message, as its turn.failed event said it.
    message: str | None = None
    results: list[dict[str, Any]] | None = None
    usage: dict[str, Any] | None = None
    created_at: str = field(default_factory=now_rfc3339)
    finished_at: str | None = None
    # A dry-run turn: write/execute calls were recorded in ``plan``, not run.
    dry_run: bool = False
    # A dry-run turn's planned actions: [{tool_use_id, tool_name, summary, input}].
    plan: list[dict[str, Any]] | None = None
    # The quality gates' outcome at the turn's end: [{name, passed, exit_code, required}].
    quality_gates: list[dict[str, Any]] | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "session_id": self.session_id,
            "number": self.number,
            "kind": self.kind,
            "status": self.status,
            "reason": self.reason,
            "message": self.message,
            "request": self.request,
            "results": self.results,
            "usage": self.usage,
            "created_by": self.created_by,
            "created_at": self.created_at,
            "finished_at": self.finished_at,
            "dry_run": self.dry_run,
            "plan": self.plan,
            "quality_gates": self.quality_gates,
        }


@dataclass(frozen=True, slots=True)
class MessageRecord:
    """One conversation message (canonical JSON) and the turn that added it."""

    index: int
    turn_id: str | None
    message: dict[str, Any]
    created_at: str

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "turn_id": self.turn_id,
            "created_at": self.created_at,
            **self.message,
        }
