"""Confirmation policy: which calls run at once, which wait for a person, and
which never run.

A policy maps one call (tool, declared side-effect class, the tool's optional
rating of this call, the workspace) to a ConfirmMode. RulePolicy resolves it
in a fixed order, each layer overriding the one before:

1. the preset: ``confirm-sensitive`` (none/read auto; write/execute/network
   prompt), ``confirm-all`` (everything prompts) or ``yolo`` (nothing prompts);
2. ``default``: per side-effect class;
3. ``trusted_workspace_overrides``, when the workspace lies in a trusted path;
4. ``ratings``: a tool's per-call rating (the shell rates ``ls`` safe) may
   change a prompt, never a deny;
5. ``per_tool``: the last word for a named tool.

One rule sits above every policy: **auto-approval of execution is a
privilege of the sandbox.** For an ``execute``-class call in a session with
no sandbox (bubblewrap unavailable, or ``workspaces.shell.sandbox: false``)
the mode is at least PROMPT, whatever the preset, rating, trusted workspace
or per-tool entry says, unless the policy runs everything on purpose (the
``yolo`` preset, or AutoAllowPolicy). So a shell command runs without a
confirmation only when (a) it is rated ``safe`` (or the policy's ratings
say so), (b) it runs in the sandbox, and (c) the policy allows.
``sandbox_floor`` holds that rule; the dispatcher applies it in one place,
after ``mode_for``.

**Denied means absent.** A tool whose every call a session's policy denies
(for its declared class, whatever rating a call of it gets, after the
sandbox floor and the profile's ``settle``) is not offered: it is left out
of ``GET /sessions/{id}/tools`` and of the model's tool definitions
(``denies_outright``, applied where the dispatcher lists a session's
tools). A tool that merely asks stays listed. A call of it that arrives
anyway still reaches the policy and ends ``permission_denied`` naming it.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from dispatcher.tool import CallRating
from protocol.canonical import SideEffects


class ConfirmMode(StrEnum):
    """What happens to a call before it runs."""

    AUTO = "auto"
    PROMPT = "prompt"
    PROMPT_ONCE = "prompt_once"  # prompt once per tool; the answer holds for the session
    DENY = "deny"


Preset = Literal["confirm-sensitive", "confirm-all", "yolo"]

_PRESETS: dict[str, dict[SideEffects, ConfirmMode]] = {
    "confirm-sensitive": {
        SideEffects.NONE: ConfirmMode.AUTO,
        SideEffects.READ: ConfirmMode.AUTO,
        SideEffects.WRITE: ConfirmMode.PROMPT,
        SideEffects.EXECUTE: ConfirmMode.PROMPT,
        SideEffects.NETWORK: ConfirmMode.PROMPT,
    },
    "confirm-all": {effect: ConfirmMode.PROMPT for effect in SideEffects},
    "yolo": {effect: ConfirmMode.AUTO for effect in SideEffects},
}
# Only confirm-sensitive lets a rating lower the bar; confirm-all means all.
_PRESET_RATINGS: dict[str, dict[CallRating, ConfirmMode]] = {
    "confirm-sensitive": {CallRating.SAFE: ConfirmMode.AUTO},
    "confirm-all": {},
    "yolo": {},
}


class PolicyConfig(BaseModel):
    """The policy as configured (server YAML ``policy:``, or per session)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    preset: Preset = "confirm-sensitive"
    default: dict[SideEffects, ConfirmMode] = Field(default_factory=dict)
    per_tool: dict[str, ConfirmMode] = Field(default_factory=dict)
    ratings: dict[CallRating, ConfirmMode] | None = None
    trusted_workspaces: list[str] = Field(default_factory=list)
    trusted_workspace_overrides: dict[SideEffects, ConfirmMode] = Field(
        default_factory=lambda: {SideEffects.WRITE: ConfirmMode.AUTO}
    )

    def merged(self, overrides: dict[str, Any] | None) -> PolicyConfig:
        """This config with a session's overrides applied (maps merge key by key)."""
        if not overrides:
            return self
        data = self.model_dump()
        for key, value in overrides.items():
            if isinstance(value, dict) and isinstance(data.get(key), dict):
                data[key] = {**data[key], **value}
            else:
                data[key] = value
        return PolicyConfig.model_validate(data)


@dataclass(frozen=True, slots=True)
class PolicyQuery:
    """The facts a policy decides on."""

    tool_name: str
    side_effects: SideEffects
    rating: CallRating | None
    workspace: str


class ConfirmationPolicy(Protocol):
    """Decides the ConfirmMode of one call. The answer depends on the query
    alone: a session keeps it per (tool, class, rating) for as long as the
    policy is the session's (dispatcher/session.py, PolicyModes); a policy
    that must answer otherwise is set on the session anew."""

    def mode_for(self, query: PolicyQuery) -> ConfirmMode: ...


# How strict each mode is: a session override may move a call only rightwards
# here when its author is not trusted to loosen the server's policy.
STRICTNESS: dict[ConfirmMode, int] = {
    ConfirmMode.AUTO: 0,
    ConfirmMode.PROMPT_ONCE: 1,
    ConfirmMode.PROMPT: 2,
    ConfirmMode.DENY: 3,
}


def loosened_calls(
    base: ConfirmationPolicy,
    candidate: ConfirmationPolicy,
    *,
    tool_names: list[str],
    workspace: str,
) -> list[str]:
    """Every (tool, class, rating) for which ``candidate`` is less strict than
    ``base``, as readable lines; empty when ``candidate`` only tightens.

    The space is finite (the registered tools plus one unknown name, five
    classes, four ratings), so checking it whole is exact, not a heuristic.
    """
    found: list[str] = []
    ratings: list[CallRating | None] = [None, *CallRating]
    for tool in [*tool_names, "<any other tool>"]:
        for effect in SideEffects:
            for rating in ratings:
                query = PolicyQuery(tool, effect, rating, workspace)
                was, now = base.mode_for(query), candidate.mode_for(query)
                if STRICTNESS[now] < STRICTNESS[was]:
                    rated = f", rated {rating.value}" if rating else ""
                    found.append(f"{tool} ({effect.value}{rated}): {was.value} -> {now.value}")
    if getattr(candidate, "runs_everything", False) and not getattr(base, "runs_everything", False):
        # The yolo preset also lifts the sandbox floor (sandbox_floor), which no
        # per-call mode above shows: yolo with every mode spelled out as the
        # base's would otherwise pass as "equal".
        found.append("execute calls outside a sandbox: prompt -> auto (the yolo preset)")
    return found


class AutoAllowPolicy:
    """Runs everything without asking; for scripts and trusted automation."""

    runs_everything = True

    def mode_for(self, query: PolicyQuery) -> ConfirmMode:
        return ConfirmMode.AUTO


def sandbox_floor(
    mode: ConfirmMode,
    side_effects: SideEffects,
    *,
    sandboxed: bool,
    policy: ConfirmationPolicy,
) -> ConfirmMode:
    """``mode`` raised to PROMPT for an execute-class call outside a sandbox,
    unless ``policy`` runs everything on purpose (yolo). Never lowers a mode."""
    if sandboxed or side_effects is not SideEffects.EXECUTE:
        return mode
    if getattr(policy, "runs_everything", False):
        return mode
    return mode if STRICTNESS[mode] >= STRICTNESS[ConfirmMode.PROMPT] else ConfirmMode.PROMPT


class Settles(Protocol):
    """What decides a call's final mode after the policy (a profile's ``settle``)."""

    def settle(self, mode: ConfirmMode) -> ConfirmMode: ...


# Every rating a call can carry: None (an unrated call) first, the common case.
_ALL_RATINGS: tuple[CallRating | None, ...] = (None, *CallRating)


def denies_outright(
    policy: ConfirmationPolicy,
    query: PolicyQuery,
    *,
    sandboxed: bool,
    profile: Settles | None = None,
) -> bool:
    """Whether ``policy`` denies every call of ``query``'s tool (its class and
    workspace; the query's own rating is ignored): DENY for an unrated call
    and for each rating, after the sandbox floor and ``profile.settle``, the
    order the dispatcher decides a call in. Such a tool is not offered (see
    the module docstring). Costs one ``mode_for`` for a tool that is not
    denied unrated (nearly all), five for one that is."""
    for rating in _ALL_RATINGS:
        asked = query if rating is query.rating else dataclasses.replace(query, rating=rating)
        mode = sandbox_floor(
            policy.mode_for(asked), query.side_effects, sandboxed=sandboxed, policy=policy
        )
        if profile is not None:
            mode = profile.settle(mode)
        if mode is not ConfirmMode.DENY:
            return False
    return True


class RulePolicy:
    """The layered policy described in the module docstring."""

    def __init__(self, config: PolicyConfig | None = None) -> None:
        self.config = config or PolicyConfig()
        cfg = self.config
        self._by_class = {**_PRESETS[cfg.preset], **cfg.default}
        self._ratings = _PRESET_RATINGS[cfg.preset] if cfg.ratings is None else cfg.ratings
        self._trusted = tuple(
            os.path.realpath(os.path.expanduser(p)).rstrip(os.sep) for p in cfg.trusted_workspaces
        )

    @property
    def runs_everything(self) -> bool:
        """The explicit "run everything" choice: the yolo preset."""
        return self.config.preset == "yolo"

    def is_trusted(self, workspace: str) -> bool:
        real = os.path.realpath(workspace)
        return any(real == t or real.startswith(t + os.sep) for t in self._trusted)

    def mode_for(self, query: PolicyQuery) -> ConfirmMode:
        mode = self._by_class[query.side_effects]
        if self._trusted and self.is_trusted(query.workspace):
            mode = self.config.trusted_workspace_overrides.get(query.side_effects, mode)
        if query.rating is not None and mode in (ConfirmMode.PROMPT, ConfirmMode.PROMPT_ONCE):
            mode = self._ratings.get(query.rating, mode)
        return self.config.per_tool.get(query.tool_name, mode)
