"""Guardrails: deterministic rules a team configures once (``guardrails:``)
and neither the model nor a user token can switch off.

They run on plain data, the call's declared effects (``ToolEffects``: what
its tool says it would write, delete, run and add), before pre_tool_use
hooks and before any confirmation. Nothing here knows a tool by its name:

- ``protected_files``: globs (see globs.py); a call that would write or
  delete a matching path is refused, and so is one whose commands name one
  (an argument, a redirection target, an ``env`` value);
- ``blocked_commands``: regexes searched in each command the call runs,
  beside the shell tool's own blocklist;
- ``max_lines_changed`` (lines added + removed by one call) and
  ``max_files_modified`` (distinct paths per turn, held by a TurnCounter);
- ``code_rules``: regexes over the text being written; ``block`` refuses the
  call, ``warn`` lets it run with a warning that travels with the result.

A call whose effects are unknown (a plugin or MCP tool that writes or runs
something) cannot be checked against any of these: while any per-call rule
is configured, the verdict says a person must be asked (``ask``), every
time, whatever the policy, a session grant or a trusted workspace would
otherwise let run unasked. It is not counted for ``max_files_modified``
until it reports what it modified.

Every pattern is compiled when the configuration loads; a bad one is a
configuration error naming it.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from dispatcher.pipeline.globs import PathGlobs, check_globs
from dispatcher.tool import ToolEffects


def _compile_regex(pattern: str, what: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"{what} {pattern!r} is not a valid regular expression: {exc}") from None


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CodeRule(_Model):
    """A regex over content being written; ``block`` refuses, ``warn`` warns."""

    pattern: str = Field(min_length=1)
    message: str = ""
    severity: Literal["block", "warn"] = "block"
    # Only content written to paths matching these globs (default: every path).
    file_patterns: list[str] = Field(default_factory=list)

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, value: str) -> str:
        _compile_regex(value, "code rule pattern")
        return value

    _globs = field_validator("file_patterns")(check_globs)


class QualityGate(_Model):
    """A command run when the agent finishes a turn (in the sandbox)."""

    name: str = Field(min_length=1, max_length=64)
    command: str = Field(min_length=1)
    required: bool = True
    timeout: float = Field(default=300.0, gt=0, le=3600)
    # The admin vouches for what this gate runs: it runs without asking. By
    # default a gate asks as a shell command of its session would (it runs
    # workspace code the model may have written; dispatcher/pipeline/gates.py).
    auto: bool = False


class GuardrailConfig(_Model):
    """The ``guardrails:`` section."""

    protected_files: list[str] = Field(default_factory=list)
    blocked_commands: list[str] = Field(default_factory=list)
    max_lines_changed: int | None = Field(default=None, ge=1)
    max_files_modified: int | None = Field(default=None, ge=1)
    code_rules: list[CodeRule] = Field(default_factory=list)
    quality_gates: list[QualityGate] = Field(default_factory=list)

    _protected = field_validator("protected_files")(check_globs)

    @field_validator("blocked_commands")
    @classmethod
    def _regexes(cls, value: list[str]) -> list[str]:
        for pattern in value:
            _compile_regex(pattern, "blocked command")
        return value

    @property
    def checks_calls(self) -> bool:
        """Whether any rule looks at tool calls (quality gates alone run only
        at the end of a turn): without one, a session gets no Guardrails and
        its calls skip the stage."""
        return bool(
            self.protected_files
            or self.blocked_commands
            or self.max_lines_changed is not None
            or self.max_files_modified is not None
            or self.code_rules
        )

    @field_validator("quality_gates")
    @classmethod
    def _unique_gates(cls, value: list[QualityGate]) -> list[QualityGate]:
        names = [g.name for g in value]
        if len(set(names)) != len(names):
            raise ValueError("quality gate names must be unique")
        return value


@dataclass(frozen=True, slots=True)
class GuardrailWarning:
    """A ``warn`` code rule that matched; reported as ``guardrail.warning``."""

    rule: str
    message: str
    path: str | None = None

    def event_data(self, tool_use_id: str | None) -> dict[str, Any]:
        """``guardrail.warning.data``."""
        return {"rule": self.rule, "message": self.message, "tool_use_id": tool_use_id}


@dataclass(frozen=True, slots=True)
class GuardrailVerdict:
    """The outcome of one check: ``blocked_by`` names the rule that refused
    the call (None: allowed), ``warnings`` travel with the result."""

    blocked_by: str | None = None
    message: str = ""
    warnings: tuple[GuardrailWarning, ...] = ()
    # Why a person must confirm the call whatever the policy says (its
    # effects are unknown to the configured rules); None: the policy decides.
    ask: str | None = None

    @property
    def allowed(self) -> bool:
        return self.blocked_by is None

    def blocked_by_data(self) -> dict[str, str] | None:
        """``tool.failed.data.blocked_by`` for a refused call."""
        if self.blocked_by is None:
            return None
        return {"kind": "guardrail", "name": self.blocked_by}


@dataclass(slots=True)
class TurnCounter:
    """Distinct paths modified during one turn (one per turn, held by the
    call state machine). Paths a check lets through are counted at once, so
    calls checked concurrently cannot together slip past the limit."""

    paths: set[str] = field(default_factory=set)

    def record(self, paths: Iterable[str]) -> None:
        """Add paths a call actually modified (e.g. a shell's files_modified)."""
        self.paths.update(_norm(p) for p in paths)

    def count_with(self, paths: Iterable[str]) -> int:
        return len(self.paths | {_norm(p) for p in paths})


class Guardrails:
    """A GuardrailConfig compiled once; ``check`` is cheap and has no I/O."""

    def __init__(self, config: GuardrailConfig | None = None) -> None:
        self.config = config or GuardrailConfig()
        cfg = self.config
        # False when only quality gates are configured: the dispatcher then
        # skips the per-call stage (the server still reads the gates here).
        self.checks_calls = cfg.checks_calls
        self._protected = PathGlobs(cfg.protected_files)
        self._blocked = [(p, re.compile(p)) for p in cfg.blocked_commands]
        self._rules = [
            (rule, re.compile(rule.pattern), PathGlobs(rule.file_patterns))
            for rule in cfg.code_rules
        ]

    @property
    def quality_gates(self) -> list[QualityGate]:
        return list(self.config.quality_gates)

    def is_protected(self, rel_path: str) -> bool:
        return self._protected.matches(rel_path)

    def check(
        self, effects: ToolEffects, turn: TurnCounter | None = None, *, tool_name: str = "the call"
    ) -> GuardrailVerdict:
        """Every rule, in a fixed order; the first that refuses wins.
        ``tool_name`` only words the message."""
        warnings = self._code_warnings(effects)
        blocked = self._first_block(effects, turn, tool_name)
        if blocked is not None:
            return GuardrailVerdict(blocked[0], blocked[1], warnings)
        if effects.unknown and self.checks_calls:
            return GuardrailVerdict(None, "", warnings, ask=self._unknown_reason(tool_name))
        if turn is not None:
            turn.record(effects.modified)
        return GuardrailVerdict(None, "", warnings)

    def _unknown_reason(self, tool_name: str) -> str:
        rules = [
            name
            for name, on in (
                ("protected_files", bool(self.config.protected_files)),
                ("blocked_commands", bool(self.config.blocked_commands)),
                ("max_lines_changed", self.config.max_lines_changed is not None),
                ("max_files_modified", self.config.max_files_modified is not None),
                ("code_rules", bool(self.config.code_rules)),
            )
            if on
        ]
        return (
            f"effects unknown: {tool_name} may write any file, so the guardrails "
            f"({', '.join(rules)}) cannot check it; a person decides"
        )

    def _first_block(
        self, effects: ToolEffects, turn: TurnCounter | None, tool_name: str
    ) -> tuple[str, str] | None:
        return (
            self._protected_hit(effects, tool_name)
            or self._blocked_command(effects)
            or self._size_limits(effects, turn)
            or self._blocking_rule(effects)
        )

    def _protected_hit(self, effects: ToolEffects, tool_name: str) -> tuple[str, str] | None:
        if not self._protected:
            return None
        hit = self._protected.first_match(effects.modified)
        if hit is not None:
            return "protected_files", f"{hit} is a protected file ({tool_name} refused)"
        hit = self._protected.first_match(effects.command_paths)
        if hit is not None:
            return "protected_files", f"the command names the protected file {hit}"
        return None

    def _blocked_command(self, effects: ToolEffects) -> tuple[str, str] | None:
        for command in effects.commands:
            for pattern, regex in self._blocked:
                if regex.search(command):
                    return (
                        "blocked_commands",
                        f"the command matches the blocked pattern {pattern!r}",
                    )
        return None

    def _size_limits(
        self, effects: ToolEffects, turn: TurnCounter | None
    ) -> tuple[str, str] | None:
        limit = self.config.max_lines_changed
        lines = effects.lines_changed
        if limit is not None and lines is not None and lines > limit:
            return (
                "max_lines_changed",
                f"the call changes {lines} lines; the limit per call is {limit}",
            )
        limit = self.config.max_files_modified
        modified = effects.modified
        if limit is not None and turn is not None and modified:
            total = turn.count_with(modified)
            if total > limit:
                return (
                    "max_files_modified",
                    f"the turn would modify {total} files; the limit per turn is {limit}",
                )
        return None

    def _blocking_rule(self, effects: ToolEffects) -> tuple[str, str] | None:
        for path, said in self._rule_hits(effects, "block"):
            return "code_rules", f"content written to {path} is refused: {said}"
        return None

    def _code_warnings(self, effects: ToolEffects) -> tuple[GuardrailWarning, ...]:
        return tuple(
            GuardrailWarning("code_rules", f"{path}: {said}", path)
            for path, said in self._rule_hits(effects, "warn")
        )

    def _rule_hits(self, effects: ToolEffects, severity: str) -> Iterator[tuple[str, str]]:
        """(path, what the rule says) for each code rule of ``severity`` that
        the written text matches, in the rules' order."""
        for rule, regex, globs in self._rules:
            if rule.severity != severity:
                continue
            path = _rule_hit(regex, globs, effects.added_text)
            if path is not None:
                yield path, rule.message or f"matches {rule.pattern!r}"


def _rule_hit(
    regex: re.Pattern[str], globs: PathGlobs, added: tuple[tuple[str, str], ...]
) -> str | None:
    for path, text in added:
        if globs and not globs.matches(path):
            continue
        if regex.search(text):
            return path
    return None


def _norm(path: str) -> str:
    return posixpath.normpath(path.replace("\\", "/")).lstrip("/")


def as_dict(verdict: GuardrailVerdict) -> dict[str, Any]:
    """A verdict as JSON-ready data (for logs and turn records)."""
    return {
        "blocked_by": verdict.blocked_by_data(),
        "message": verdict.message,
        "ask": verdict.ask,
        "warnings": [
            {"rule": w.rule, "message": w.message, "path": w.path} for w in verdict.warnings
        ],
    }
