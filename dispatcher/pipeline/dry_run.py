"""Dry-run: a call that would write or execute is recorded as a planned
action with a human summary instead of running; read calls run as usual so
the model can plan. The turn ends with the plan (``plan`` in the turn record
and in ``turn.completed``); each planned call is a ``tool.planned`` event.
The summary is the one the call's tool declares with its effects
(``ToolEffects.summary``): nothing here knows a tool by its name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dispatcher.tool import ToolEffects, one_line
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


def plan_summary(effects: ToolEffects) -> str:
    """A one-line human summary of what the call would do: the one its tool
    declared with its effects (``ToolEffects.summary``), cut to a line."""
    return one_line(effects.summary, SUMMARY_LIMIT)
