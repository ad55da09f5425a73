"""ProposedCall for the built-in tools that write, patch, delete or run,
derived from their (already validated) input.

- ``write_file {path, content, mode?}``: the path; the content; lines
  changed against the current file (read through the workspace file API,
  only when it is small enough to diff cheaply);
- ``patch_file {path, old_str, new_str}``: the path; the new text; lines of
  the old/new difference;
- ``apply_patch {patch, path?}``: every file of the diff; its added lines;
  its ``+``/``-`` lines;
- ``delete_file {path}``: the path;
- ``shell``/``run_command {command, cwd?, env?}``: the command, and the paths
  its words and its ``env`` values name (resolved through the workspace,
  symlinks followed).

Any other tool yields a ProposedCall with only its name and class. A path
that escapes the workspace is left as written: the scope stage refuses it.
"""

from __future__ import annotations

import posixpath
import shlex
from collections.abc import Mapping
from typing import Any

from dispatcher.errors import ToolError
from dispatcher.pipeline.guardrails import ProposedCall, command_paths
from dispatcher.tools.files.textdiff import changed_lines, unified_file_diff
from dispatcher.tools.patch.diff_parse import parse_unified_diff
from dispatcher.workspace import WorkspaceFileAPI
from protocol.canonical import SideEffects

# Past this size the current file is not read to count changed lines: the
# count becomes old lines (estimated from the size is not worth it) + new lines.
DIFF_READ_LIMIT = 1024 * 1024
SHELL_TOOLS = frozenset({"shell", "run_command"})


def proposed_call(
    tool_name: str,
    input: Mapping[str, Any],
    side_effects: SideEffects,
    workspace: WorkspaceFileAPI | None = None,
) -> ProposedCall:
    """The ProposedCall of one call (see the module docstring)."""
    base = ProposedCall(tool_name=tool_name, side_effects=side_effects)
    if tool_name == "write_file" and isinstance(input.get("path"), str):
        return _write_file(base, input, workspace)
    if tool_name == "patch_file" and isinstance(input.get("path"), str):
        rel = _paths(input["path"], workspace)
        old, new = str(input.get("old_str", "")), str(input.get("new_str", ""))
        lines = changed_lines(unified_file_diff(rel[0], old, new))
        return _with(base, rel, ((rel[0], new),), lines)
    if tool_name == "delete_file" and isinstance(input.get("path"), str):
        return _with(base, _paths(input["path"], workspace), (), None)
    if tool_name == "apply_patch" and isinstance(input.get("patch"), str):
        return _apply_patch(base, input, workspace)
    if tool_name in SHELL_TOOLS and isinstance(input.get("command"), str):
        cwd = _lexical(str(input.get("cwd") or "."))
        root = workspace.workspace_root if workspace is not None else None
        return ProposedCall(
            tool_name=tool_name,
            side_effects=side_effects,
            command=input["command"],
            cwd=cwd,
            command_paths=_shell_paths(input, cwd, root),
        )
    return base


def _shell_paths(input: Mapping[str, Any], cwd: str, root: str | None) -> tuple[str, ...]:
    """The paths the command's words name, then those its ``env`` values name:
    ``{"command": "cp a $F", "env": {"F": ".env"}}`` names ``.env`` as surely
    as writing it out (the lexer cannot see ``$F``). The values are read as
    the words of a separate no-op command, so nothing in the command (an open
    here-document, a trailing backslash) can swallow them."""
    found = dict.fromkeys(command_paths(str(input["command"]), cwd, root))
    env = input.get("env")
    if isinstance(env, Mapping) and env:
        words = " ".join(shlex.quote(str(v)) for v in env.values())
        found.update(dict.fromkeys(command_paths(f": {words}", cwd, root)))
    return tuple(found)


def _with(
    base: ProposedCall,
    paths: tuple[str, ...],
    added: tuple[tuple[str, str], ...],
    lines: int | None,
) -> ProposedCall:
    return ProposedCall(
        tool_name=base.tool_name,
        side_effects=base.side_effects,
        paths_modified=paths,
        added_text=added,
        lines_changed=lines,
    )


def _write_file(
    base: ProposedCall, input: Mapping[str, Any], workspace: WorkspaceFileAPI | None
) -> ProposedCall:
    rel = _paths(input["path"], workspace)
    content = str(input.get("content", ""))
    before = ""
    if input.get("mode") != "append" and workspace is not None:
        before = _current_text(workspace, input["path"])
    if input.get("mode") == "append":
        lines = content.count("\n") + (0 if content.endswith("\n") or not content else 1)
    else:
        lines = changed_lines(unified_file_diff(rel[0], before, content))
    return _with(base, rel, ((rel[0], content),), lines)


def _current_text(workspace: WorkspaceFileAPI, path: str) -> str:
    try:
        if workspace.stat(path).st_size > DIFF_READ_LIMIT:
            return ""
        return workspace.read_bytes(path).decode("utf-8", errors="replace")
    except (ToolError, OSError):
        return ""  # a new file, or one the tool itself will report on


def _apply_patch(
    base: ProposedCall, input: Mapping[str, Any], workspace: WorkspaceFileAPI | None
) -> ProposedCall:
    default = input.get("path") if isinstance(input.get("path"), str) else None
    try:
        files = parse_unified_diff(input["patch"], default_path=default)
    except ToolError:
        return base  # the tool refuses an unreadable patch itself
    paths: dict[str, None] = {}
    added: list[tuple[str, str]] = []
    lines = 0
    for fp in files:
        name = fp.new_path or fp.old_path or ""
        for p in (fp.old_path, fp.new_path):
            if p is not None:
                for rel in _paths(p, workspace):
                    paths.setdefault(rel, None)
        plus = [ln.text for h in fp.hunks for ln in h.lines if ln.op == "+"]
        lines += len(plus) + sum(1 for h in fp.hunks for ln in h.lines if ln.op == "-")
        if plus:
            added.append((_lexical(name), "\n".join(plus) + "\n"))
    return _with(base, tuple(paths), tuple(added), lines)


def _lexical(path: str) -> str:
    norm = posixpath.normpath(path.replace("\\", "/"))
    return norm.lstrip("/") if not path.startswith("/") else norm


def _paths(path: str, workspace: WorkspaceFileAPI | None) -> tuple[str, ...]:
    """The path as written (normalised) and, through the workspace, the path
    it physically names (a symlink inside the workspace followed)."""
    lexical = _lexical(path)
    found = [] if path.startswith("/") else [lexical]
    if workspace is not None:
        try:
            real = workspace.relative(workspace.resolve(path))
        except (ToolError, OSError):
            real = None
        if real is not None and real not in found:
            found.append(real)
    return tuple(found) or (lexical,)
