"""Typed views of the server's HTTP resources.

Models keep unknown keys (``extra="allow"``): the server may add fields
without breaking the SDK. Each requires only what a client needs to act.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from clients.sdk.events import Preview

Decision = Literal["allow", "deny"]
Scope = Literal["once", "session"]
TURN_DONE_STATUSES = frozenset({"completed", "failed", "cancelled"})


class Resource(BaseModel):
    """Base of the HTTP resource models."""

    model_config = ConfigDict(extra="allow", frozen=True, populate_by_name=True)


class Session(Resource):
    """A session: a workspace, a conversation and a tool dispatcher."""

    id: str
    workspace: str
    name: str | None = None
    created_at: str | None = None
    status: str | None = None
    current_turn_id: str | None = None
    # The model asked for (None: the server's default) and the one a turn uses now.
    model: str | None = None
    resolved_model: str | None = None
    # What it runs as (specs/agents.md); None from servers older than agents.
    agent: str | None = None
    profile: str | None = None
    # A sub-agent's worker session names the session that dispatched it.
    parent_session_id: str | None = None
    # The worker sessions it dispatched, oldest first (GET /sessions/{id}).
    children: list[str] = Field(default_factory=list)
    # Every turn records write/execute calls in its plan instead of running them.
    dry_run: bool = False
    tokens_used: int | None = None


class ToolInfo(Resource):
    """A tool definition the session's model may call."""

    name: str
    description: str = ""
    input_schema: dict[str, Any] = Field(default_factory=dict)
    side_effects: str
    # The effective call timeout in seconds (config overrides included).
    timeout_s: float | None = None
    # The schema of the structured output in tool.completed.data.structured.
    output_schema: dict[str, Any] | None = None


class PlannedAction(Resource):
    """A write/execute call a dry-run turn recorded instead of running it."""

    tool_use_id: str
    tool_name: str
    summary: str = ""
    input: dict[str, Any] = Field(default_factory=dict)


class ConversationMessage(Resource):
    """One canonical message of a session's conversation (blocks as JSON)."""

    role: str
    content: list[dict[str, Any]]


class Turn(Resource):
    """A turn's state: ``status`` is running, completed, failed or cancelled."""

    id: str
    session_id: str | None = None
    status: str
    results: list[dict[str, Any]] | None = None
    reason: str | None = None
    # A failed turn's message ("model call 1 failed: anthropic: auth ..."), from
    # the turn record or, for servers that do not store it, its turn.failed event.
    message: str | None = None
    # The rest of the turn.failed event's data (error_kind, provider, ...), when seen.
    failure_details: dict[str, Any] | None = None
    dry_run: bool = False
    # A dry-run turn's planned actions, in order (None: not a dry-run).
    plan: list[PlannedAction] | None = None

    @property
    def done(self) -> bool:
        """True once the turn reached a final status."""
        return self.status in TURN_DONE_STATUSES

    @property
    def failed(self) -> bool:
        return self.status == "failed"

    def raise_for_status(self) -> Turn:
        """Raise :class:`TurnEndedFailed` (reason and message) if the turn failed."""
        if self.failed:
            from clients.sdk.errors import TurnEndedFailed

            raise TurnEndedFailed(
                self.id, self.reason, self.message, turn=self, details=self.failure_details
            )
        return self


class PendingConfirmation(Resource):
    """A confirmation request still waiting for an answer."""

    request_id: str
    turn_id: str
    tool_use_id: str
    tool_name: str
    side_effects: str
    input_summary: str = ""
    projected_modifications: list[str] = Field(default_factory=list)
    preview: Preview | None = None
    expires_at: str | None = None
    rating: str | None = None
    # What "allow for session" would grant ("allow 'npm test' for this session ...").
    scope_text: str = ""


class Resolution(Resource):
    """The winning answer to a confirmation request."""

    request_id: str
    decision: Literal["allow", "deny", "timeout", "cancelled"]
    scope: str = "once"
    resolved_by: str
    message: str | None = None
    # The configured name of the token that answered (resolved_by is the client's choice).
    resolved_by_token: str | None = None


class AttachedClient(Resource):
    """A client currently attached to a session's event stream (presence)."""

    client_id: str
    client_name: str
