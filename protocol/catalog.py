"""Every event type the server emits. Payload models per type live beside it
(protocol.payloads); this module is the closed list of names."""

from __future__ import annotations

from enum import StrEnum


class EventType(StrEnum):
    SESSION_CREATED = "session.created"
    SESSION_DELETED = "session.deleted"
    CLIENT_ATTACHED = "client.attached"
    CLIENT_DETACHED = "client.detached"
    TURN_STARTED = "turn.started"
    TURN_COMPLETED = "turn.completed"
    TURN_FAILED = "turn.failed"
    TURN_CANCELLED = "turn.cancelled"
    MESSAGE_DELTA = "message.delta"
    MESSAGE_COMPLETED = "message.completed"
    MODEL_RETRY = "model.retry"
    TOOL_CALLED = "tool.called"
    TOOL_INPUT_INVALID = "tool.input_invalid"
    TOOL_CONFIRMATION_REQUESTED = "tool.confirmation_requested"
    TOOL_CONFIRMATION_RESOLVED = "tool.confirmation_resolved"
    TOOL_OUTPUT_DELTA = "tool.output_delta"
    TOOL_COMPLETED = "tool.completed"
    TOOL_FAILED = "tool.failed"
    TOOLS_CHANGED = "tools.changed"
    MEMORY_ADDED = "memory.added"
    MEMORY_REPLACED = "memory.replaced"
    MEMORY_DELETED = "memory.deleted"
    MEMORY_CONSOLIDATED = "memory.consolidated"
    # The execution pipeline (specs/pipeline.md).
    HOOK_COMPLETED = "hook.completed"
    TOOL_PLANNED = "tool.planned"
    GUARDRAIL_WARNING = "guardrail.warning"
    QUALITY_GATE_COMPLETED = "quality_gate.completed"
