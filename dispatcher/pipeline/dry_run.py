"""Dry-run: a call that would write or execute is recorded as a planned
action with a human summary instead of running; read calls run as usual so
the model can plan. The turn ends with the plan (``plan`` in the turn record
and in ``turn.completed``); each planned call is a ``tool.planned`` event.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dispatcher.tools.patch.diff_parse import parse_unified_diff
from protocol.canonical import SideEffects

# Classes a dry-run records instead of running.
PLANNED_EFFECTS = frozenset({SideEffects.WRITE, SideEffects.EXECUTE, SideEffects.NETWORK})
SUMMARY_LIMIT = 200


def is_planned(side_effects: SideEffects) -> bool:
    """Whether a dry-run records (rather than runs) a call of this class."""
    return side_effects in PLANNED_EFFECTS


@dataclass(frozen=True, slots=True)
class PlannedAction:
    """One recorded call; ``as_dict()`` is an entry of the turn's ``plan``
    and the data of ``tool.planned``."""

    tool_use_id: str
    tool_name: str
    summary: str
    input: Mapping[str, Any]
    # The policy would ask a person before running it (nobody is asked in a dry-run).
    needs_confirmation: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {
            "tool_use_id": self.tool_use_id,
            "tool_name": self.tool_name,
            "summary": self.summary,
            "input": dict(self.input),
            "needs_confirmation": self.needs_confirmation,
        }


def recorded_message(action: PlannedAction) -> str:
    """What the model is told instead of the call's result."""
    return f"[dry-run] Recorded, not executed: {action.summary}"


def plan_summary(tool_name: str, input: Mapping[str, Any], side_effects: SideEffects) -> str:
    """A one-line human summary of what the call would do."""
    text = _summary(tool_name, input, side_effects)
    return text if len(text) <= SUMMARY_LIMIT else text[: SUMMARY_LIMIT - 1] + "…"


def _summary(tool_name: str, input: Mapping[str, Any], side_effects: SideEffects) -> str:
    path = input.get("path")
    if tool_name == "write_file" and isinstance(path, str):
        lines = _count_lines(str(input.get("content", "")))
        how = "append, " if input.get("mode") == "append" else ""
        return f"write_file {path} ({how}+{lines} lines)"
    if tool_name == "patch_file" and isinstance(path, str):
        removed = _count_lines(str(input.get("old_str", "")))
        added = _count_lines(str(input.get("new_str", "")))
        return f"patch_file {path} (+{added} -{removed} lines)"
    if tool_name == "delete_file" and isinstance(path, str):
        return f"delete_file {path}"
    if tool_name == "apply_patch" and isinstance(input.get("patch"), str):
        return _patch_summary(input)
    if tool_name in ("shell", "run_command") and isinstance(input.get("command"), str):
        cwd = input.get("cwd")
        where = f" (in {cwd})" if isinstance(cwd, str) and cwd not in ("", ".") else ""
        return f"shell: {_one_line(input['command'])}{where}"
    if tool_name == "git_commit" and isinstance(input.get("message"), str):
        return f'git_commit "{_one_line(input["message"])}"'
    if tool_name == "git_branch":
        action = input.get("action", "list")
        name = input.get("name")
        return f"git_branch {action}" + (f" {name}" if isinstance(name, str) else "")
    return _generic(tool_name, input)


def _patch_summary(input: Mapping[str, Any]) -> str:
    default = input.get("path") if isinstance(input.get("path"), str) else None
    try:
        files = parse_unified_diff(input["patch"], default_path=default)
    except Exception:  # any unreadable patch: the tool would refuse it at run time
        return "apply_patch: (unreadable patch)"
    names = [fp.new_path or fp.old_path or "?" for fp in files]
    count = len(names)
    noun = "file" if count == 1 else "files"
    shown = ", ".join(names[:3]) + (", …" if count > 3 else "")
    return f"apply_patch: {count} {noun} ({shown})"


def _generic(tool_name: str, input: Mapping[str, Any]) -> str:
    """``name(key=value, …)`` for MCP tools, plugins and anything else."""
    parts = []
    for key, value in input.items():
        shown = json.dumps(value, ensure_ascii=False, default=str)
        if len(shown) > 40:
            shown = shown[:39] + "…"
        parts.append(f"{key}={shown}")
    return f"{tool_name}({', '.join(parts)})"


def _count_lines(text: str) -> int:
    if not text:
        return 0
    return text.count("\n") + (0 if text.endswith("\n") else 1)


def _one_line(text: str) -> str:
    first = text.strip().splitlines()[0] if text.strip() else ""
    return first + (" …" if "\n" in text.strip() else "")
