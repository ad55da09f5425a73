"""One valid payload per catalog event type, shaped as publishers send them."""

from __future__ import annotations

from typing import Any

from protocol.catalog import EventType

SAMPLES: dict[EventType, dict[str, Any]] = {
    EventType.SESSION_CREATED: {"workspace": "/srv/work/demo"},
    EventType.SESSION_DELETED: {"reason": "deleted by client"},
    EventType.CLIENT_ATTACHED: {"client_id": "cli_1", "client_name": "tui"},
    EventType.CLIENT_DETACHED: {"client_id": "cli_1", "client_name": "tui", "reason": "closed"},
    EventType.TURN_STARTED: {"source": "message"},
    EventType.TURN_COMPLETED: {"usage": {"input_tokens": 12, "output_tokens": 34}},
    EventType.TURN_FAILED: {"reason": "provider unavailable"},
    EventType.TURN_CANCELLED: {"reason": "cancelled by client"},
    EventType.MESSAGE_DELTA: {"text": "Let me lo", "index": 0},
    EventType.MESSAGE_COMPLETED: {
        "message": {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Reading it."},
                {"type": "tool_use", "id": "tu_1", "name": "read_file", "input": {"path": "a"}},
            ],
        }
    },
    EventType.MODEL_RETRY: {
        "attempt": 1,
        "error_kind": "rate_limit",
        "delay_s": 0.5,
        "provider": "anthropic",
        "status_code": 429,
        "step": 1,
    },
    EventType.TOOL_CALLED: {
        "tool_use_id": "tu_1",
        "tool_name": "read_file",
        "side_effects": "read",
        "input": {"path": "README.md"},
        "rating": None,
    },
    EventType.TOOL_INPUT_INVALID: {
        "tool_use_id": "tu_2",
        "tool_name": "read_file",
        "errors": [{"path": "/path", "message": "is a required property"}],
    },
    EventType.TOOL_CONFIRMATION_REQUESTED: {
        "request_id": "req_1",
        "tool_use_id": "tu_3",
        "tool_name": "write_file",
        "side_effects": "write",
        "rating": "dev",
        "input_summary": "write 12 bytes to src/auth.ts",
        "projected_modifications": ["src/auth.ts"],
        "preview": {"kind": "diff", "text": "--- a/src/auth.ts\n+++ b/src/auth.ts\n"},
        "expires_at": "2026-05-08T10:05:00.000000Z",
    },
    EventType.TOOL_CONFIRMATION_RESOLVED: {
        "request_id": "req_1",
        "tool_use_id": "tu_3",
        "decision": "deny",
        "scope": "once",
        "resolved_by": "tui",
        "message": "not that file",
    },
    EventType.TOOL_OUTPUT_DELTA: {
        "tool_use_id": "tu_4",
        "stream": "stdout",
        "text": "added 3 packages\n",
    },
    EventType.TOOL_COMPLETED: {
        "tool_use_id": "tu_1",
        "tool_name": "read_file",
        "duration_ms": 1.25,
        "content": [{"type": "text", "text": "# toolrelay"}],
        "files_modified": None,
        "command_executed": None,
        "metadata": {"bytes": 11},
    },
    EventType.TOOL_FAILED: {
        "tool_use_id": "tu_4",
        "tool_name": "shell",
        "error_class": "cancelled",
        "message": "the call was cancelled",
        "duration_ms": 812.0,
        "partial_output": "added 3 pack",
    },
    EventType.TOOLS_CHANGED: {"added": ["mcp_files_read"], "removed": [], "source": "mcp:files"},
    EventType.MEMORY_ADDED: {
        "memory_id": "mem_1",
        "workspace": "/srv/work/demo",
        "owner": "alice",
        "tags": ["lint"],
        "preview": "Run ruff check .",
    },
    EventType.MEMORY_REPLACED: {
        "memory_id": "mem_1",
        "workspace": "/srv/work/demo",
        "owner": "alice",
        "tags": [],
        "preview": "Run make lint",
        "previous_preview": "Run ruff check .",
    },
    EventType.MEMORY_DELETED: {
        "memory_id": "mem_1",
        "workspace": "/srv/work/demo",
        "owner": "alice",
        "tags": [],
        "preview": "Run make lint",
        "deleted_by": "alice",
    },
    EventType.MEMORY_CONSOLIDATED: {
        "workspace": "/srv/work/demo",
        "owner": "alice",
        "removed": 1,
        "merges": [{"kept_id": "mem_1", "merged_ids": ["mem_2"], "reason": "identical"}],
    },
    EventType.HOOK_COMPLETED: {
        "hook": "python-lint",
        "event": "post_tool_use",
        "decision": "error",
        "exit_code": 1,
        "duration_ms": 41.5,
        "tool_use_id": "tu_1",
    },
    EventType.TOOL_PLANNED: {
        "tool_use_id": "tu_1",
        "tool_name": "write_file",
        "summary": "write_file notes/a.txt (+12 lines)",
        "input": {"path": "notes/a.txt", "content": "..."},
    },
    EventType.GUARDRAIL_WARNING: {
        "rule": "code_rules",
        "message": "src/a.py: no print",
        "tool_use_id": "tu_1",
    },
    EventType.QUALITY_GATE_COMPLETED: {
        "name": "tests",
        "passed": False,
        "exit_code": 1,
        "output": "1 failed",
        "required": True,
    },
}
