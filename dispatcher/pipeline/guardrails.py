"""Guardrails: deterministic rules a team configures once (``guardrails:``)
and neither the model nor a user token can switch off.

They run on plain data (a ProposedCall: what a call would touch, run or
write), before pre_tool_use hooks and before any confirmation:

- ``protected_files``: globs (see globs.py); a call that would write, edit,
  patch or delete a matching path is refused, and so is a shell command
  with an argument or redirection target naming one;
- ``blocked_commands``: regexes searched in a shell command's text, beside
  the shell tool's own blocklist;
- ``max_lines_changed`` (lines added + removed by one call) and
  ``max_files_modified`` (distinct paths per turn, held by a TurnCounter);
- ``code_rules``: regexes over the text being written; ``block`` refuses the
  call, ``warn`` lets it run with a warning that travels with the result.

Every pattern is compiled when the configuration loads; a bad one is a
configuration error naming it.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import posixpath
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

import bracex
from pydantic import BaseModel, ConfigDict, Field, field_validator
from wcmatch import glob as wcglob

from dispatcher.pipeline.globs import PathGlobs, check_globs
from dispatcher.tools.shell.lexer import ShellSyntaxInvalid, Word, parse
from protocol.canonical import SideEffects

# Shell words looked at per command: a huge generated command line must not
# make the check slow.
MAX_WORDS = 512
MAX_NESTED_SCRIPTS = 4
# Names one brace or glob word may stand for (bounded work per call).
MAX_EXPANSIONS = 256
# Braces are expanded before globbing (bracex), so the glob step sees none;
# as in bash by default, `*` skips dot files (`.e*` still names `.env`).
GLOB_FLAGS = 0


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
class ProposedCall:
    """What one call would do, as plain data (see proposed.py to derive it
    for the built-in tools). Paths are workspace-relative with ``/``."""

    tool_name: str
    side_effects: SideEffects
    command: str | None = None
    # The command's working directory, workspace-relative.
    cwd: str = "."
    paths_modified: tuple[str, ...] = ()
    # (path, text) of content the call writes: whole files, new text, added lines.
    added_text: tuple[tuple[str, str], ...] = ()
    lines_changed: int | None = None
    # Paths the command's words name, when the caller resolved them (symlinks
    # followed); None: worked out lexically from ``command``.
    command_paths: tuple[str, ...] | None = None


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

    def check(self, call: ProposedCall, turn: TurnCounter | None = None) -> GuardrailVerdict:
        """Every rule, in a fixed order; the first that refuses wins."""
        warnings = self._code_warnings(call)
        blocked = self._first_block(call, turn)
        if blocked is not None:
            return GuardrailVerdict(blocked[0], blocked[1], warnings)
        if turn is not None:
            turn.record(call.paths_modified)
        return GuardrailVerdict(None, "", warnings)

    def _first_block(self, call: ProposedCall, turn: TurnCounter | None) -> tuple[str, str] | None:
        if self._protected:
            hit = self._protected.first_match(call.paths_modified)
            if hit is not None:
                return "protected_files", f"{hit} is a protected file ({call.tool_name} refused)"
            if call.command is not None:
                named = call.command_paths
                if named is None:
                    named = tuple(command_paths(call.command, call.cwd))
                hit = self._protected.first_match(named)
                if hit is not None:
                    return "protected_files", f"the command names the protected file {hit}"
        if call.command is not None:
            for pattern, regex in self._blocked:
                if regex.search(call.command):
                    return (
                        "blocked_commands",
                        f"the command matches the blocked pattern {pattern!r}",
                    )
        limit = self.config.max_lines_changed
        if limit is not None and call.lines_changed is not None and call.lines_changed > limit:
            return (
                "max_lines_changed",
                f"the call changes {call.lines_changed} lines; the limit per call is {limit}",
            )
        limit = self.config.max_files_modified
        if limit is not None and turn is not None and call.paths_modified:
            total = turn.count_with(call.paths_modified)
            if total > limit:
                return (
                    "max_files_modified",
                    f"the turn would modify {total} files; the limit per turn is {limit}",
                )
        for rule, regex, globs in self._rules:
            if rule.severity != "block":
                continue
            path = _rule_hit(regex, globs, call.added_text)
            if path is not None:
                said = rule.message or f"matches {rule.pattern!r}"
                return "code_rules", f"content written to {path} is refused: {said}"
        return None

    def _code_warnings(self, call: ProposedCall) -> tuple[GuardrailWarning, ...]:
        found: list[GuardrailWarning] = []
        for rule, regex, globs in self._rules:
            if rule.severity != "warn":
                continue
            path = _rule_hit(regex, globs, call.added_text)
            if path is not None:
                said = rule.message or f"matches {rule.pattern!r}"
                found.append(GuardrailWarning("code_rules", f"{path}: {said}", path))
        return tuple(found)


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


def command_paths(command: str, cwd: str = ".", workspace_root: str | None = None) -> list[str]:
    """Workspace-relative paths that the argument words and redirection
    targets of ``command`` name (``./a``, ``a/../b`` normalised; absolute
    paths inside ``workspace_root`` made relative; ``--opt=path`` and
    ``VAR=path`` split). With ``workspace_root``, a name that resolves
    through a symbolic link also yields the path it leads to. Words inside
    nested scripts (``sh -c '...'``, ``$(...)``) count too. Words whose value
    cannot be known statically are skipped. An unreadable command yields
    nothing here: the shell tool refuses it anyway."""
    words: list[tuple[str, str]] = []
    root = os.path.realpath(workspace_root) if workspace_root else None
    _collect_words(command, cwd or ".", words, 0, root)
    found: dict[str, None] = {}
    for text, where in words[:MAX_WORDS]:
        for candidate in _expanded(_word_variants(text), where, root):
            rel = _relative(candidate, where, root)
            if rel is None:
                continue
            found.setdefault(rel, None)
            if root is not None:
                real = os.path.realpath(os.path.join(root, rel))
                if real == root or real.startswith(root + os.sep):
                    found.setdefault(os.path.relpath(real, root).replace(os.sep, "/"), None)
    return list(found)


def _collect_words(
    command: str, cwd: str, out: list[tuple[str, str]], depth: int, root: str | None = None
) -> None:
    """(word, the directory it is relative to) of every argument and
    redirection target; a static ``cd dir`` moves the directory for the
    commands after it (an absolute one too, when it lies in ``root``)."""
    if depth > MAX_NESTED_SCRIPTS or len(out) >= MAX_WORDS:
        return
    try:
        script = parse(command, depth)
    except ShellSyntaxInvalid:
        return
    for inner in script.substitutions:
        _collect_words(inner, cwd, out, depth + 1, root)
    for pipeline in script.pipelines:
        for cmd in pipeline.commands:
            args: list[Word] = cmd.words[1:]
            targets = [r.target for r in cmd.redirects if r.target is not None]
            # `F=.env cmd`: an assignment before the program names a path too.
            heads = cmd.words[:1] if cmd.words and "=" in cmd.words[0].text else []
            for word in [*heads, *args, *targets]:
                if word.dynamic:
                    continue
                out.append((word.text, cwd))
                # sh -c 'cat .env', bash -lc "...": read the inner script too.
                if any(c.isspace() for c in word.text):
                    _collect_words(word.text, cwd, out, depth + 1, root)
            head = cmd.words[0] if cmd.words else None
            if head is not None and head.text in ("cd", "pushd") and len(args) == 1:
                moved = _relative(args[0].text, cwd, root)
                if moved is not None and not args[0].dynamic:
                    cwd = moved


def _word_variants(text: str) -> list[str]:
    variants = [text]
    if "=" in text:
        variants.append(text.split("=", 1)[1])
    if ":" in text:
        # `git show HEAD:.env`, `scp a:b`: the part after the colon is a path.
        variants.append(text.split(":", 1)[1])
    return [v for v in variants if v and "\x00" not in v]


def _expanded(variants: list[str], cwd: str, root: str | None) -> list[str]:
    """``variants`` plus what the shell would make of them: braces expanded
    (``.{env,x}``, textual, so a file not yet there counts) and glob words
    (``.e*``, ``secret*/key.pem``) matched against the workspace as it is
    now. Bounded: a word yields at most MAX_EXPANSIONS names."""
    out: list[str] = []
    for text in variants:
        out.append(text)
        if "{" in text:
            with contextlib.suppress(ValueError, RecursionError, bracex.ExpansionLimitException):
                out.extend(bracex.expand(text, limit=MAX_EXPANSIONS))
    if root is None:
        return out
    globbed: list[str] = []
    for text in out:
        if "{" in text or not any(c in text for c in "*?["):
            continue
        rel = _relative(text, cwd, root)
        if rel is None:
            continue
        with contextlib.suppress(OSError, ValueError, RecursionError):
            names = wcglob.iglob(rel, root_dir=root, flags=GLOB_FLAGS, limit=MAX_EXPANSIONS)
            # Absolute, so the caller does not join them to ``cwd`` a second time.
            globbed.extend(root + "/" + n for n in itertools.islice(names, MAX_EXPANSIONS))
    return out + globbed


def _relative(text: str, cwd: str, root: str | None) -> str | None:
    if text.startswith("~"):
        return None
    if text.startswith("/"):
        if root is None:
            return None
        norm = posixpath.normpath(text)
        if norm == root:
            return "."
        if not norm.startswith(root + "/"):
            return None
        return norm[len(root) + 1 :]
    rel = posixpath.normpath(posixpath.join(cwd or ".", text))
    if rel == ".." or rel.startswith("../"):
        return None
    return rel


def as_dict(verdict: GuardrailVerdict) -> dict[str, Any]:
    """A verdict as JSON-ready data (for logs and turn records)."""
    return {
        "blocked_by": verdict.blocked_by_data(),
        "message": verdict.message,
        "warnings": [
            {"rule": w.rule, "message": w.message, "path": w.path} for w in verdict.warnings
        ],
    }
