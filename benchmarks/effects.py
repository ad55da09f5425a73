"""Cost of deriving a call's effects (issue 25, item 1), beside the old path.

Before, the dispatcher's guardrail stage guessed what a call would touch
from the tool's name (``proposed_call`` in dispatcher/pipeline/proposed.py,
kept below as it was at 93d93ab, with the ``command_paths`` it used) and
always ran it in a worker thread (``asyncio.to_thread``). Now each tool
declares its effects (``BaseTool.effects``), awaited in the loop, with the
file reads (a write's diff) and glob expansion sent to a thread by the tool
itself only when they are large.

For write_file (a 200-line file rewritten with one line changed),
apply_patch (a 3-file diff) and shell (``cd sub && grep -rn TODO . >
out.txt``, its analysis already prepared as the dispatcher now shares it),
four variants interleaved in rounds (so a change in the machine's load hits
them alike), each the median of its calls in microseconds:

- old: ``await asyncio.to_thread(proposed_call, ...)``, as the stage ran;
- old-inline: ``proposed_call`` called directly (the derivation alone);
- new: ``await tool.effects(...)``, as the stage runs now;
- new+check: the same plus ``Guardrails.check`` (protected files, both
  limits): the whole stage but its bookkeeping.

Printed with each variant's ratio to ``old``. Run:
``.venv/bin/python -m benchmarks.effects [rounds]``.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import posixpath
import shlex
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import bracex
from wcmatch import glob as wcglob

from dispatcher.errors import ToolError
from dispatcher.pipeline.guardrails import GuardrailConfig, Guardrails, TurnCounter
from dispatcher.tool import BaseTool
from dispatcher.tools import ApplyPatchTool, ShellTool, WriteFileTool
from dispatcher.tools.files.textdiff import changed_lines, unified_file_diff
from dispatcher.tools.patch.diff_parse import parse_unified_diff
from dispatcher.tools.shell.script import parse
from dispatcher.tools.shell.tokens import ShellSyntaxInvalid, Word
from dispatcher.workspace import WorkspaceFileAPI
from protocol.canonical import SideEffects

PER_ROUND = 200
LINES = 200


# -- the old path, as it was (dispatcher/pipeline/proposed.py and guardrails.py) --------


@dataclass(frozen=True, slots=True)
class ProposedCall:
    tool_name: str
    side_effects: SideEffects
    command: str | None = None
    cwd: str = "."
    paths_modified: tuple[str, ...] = ()
    added_text: tuple[tuple[str, str], ...] = ()
    lines_changed: int | None = None
    command_paths: tuple[str, ...] | None = None


DIFF_READ_LIMIT = 1024 * 1024
MAX_WORDS = 512
MAX_NESTED_SCRIPTS = 4
MAX_EXPANSIONS = 256


def proposed_call(
    tool_name: str,
    input: Mapping[str, Any],
    side_effects: SideEffects,
    workspace: WorkspaceFileAPI | None = None,
) -> ProposedCall:
    base = ProposedCall(tool_name=tool_name, side_effects=side_effects)
    if tool_name == "write_file" and isinstance(input.get("path"), str):
        return _write_file(base, input, workspace)
    if tool_name == "apply_patch" and isinstance(input.get("patch"), str):
        return _apply_patch(base, input, workspace)
    if tool_name in ("shell", "run_command") and isinstance(input.get("command"), str):
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
    lines = changed_lines(unified_file_diff(rel[0], before, content))
    return _with(base, rel, ((rel[0], content),), lines)


def _current_text(workspace: WorkspaceFileAPI, path: str) -> str:
    try:
        if workspace.stat(path).st_size > DIFF_READ_LIMIT:
            return ""
        return workspace.read_bytes(path).decode("utf-8", errors="replace")
    except (ToolError, OSError):
        return ""


def _apply_patch(
    base: ProposedCall, input: Mapping[str, Any], workspace: WorkspaceFileAPI | None
) -> ProposedCall:
    default = input.get("path") if isinstance(input.get("path"), str) else None
    try:
        files = parse_unified_diff(input["patch"], default_path=default)
    except ToolError:
        return base
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


def command_paths(command: str, cwd: str = ".", workspace_root: str | None = None) -> list[str]:
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
            heads = cmd.words[:1] if cmd.words and "=" in cmd.words[0].text else []
            for word in [*heads, *args, *targets]:
                if word.dynamic:
                    continue
                out.append((word.text, cwd))
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
        variants.append(text.split(":", 1)[1])
    return [v for v in variants if v and "\x00" not in v]


def _expanded(variants: list[str], cwd: str, root: str | None) -> list[str]:
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
            names = wcglob.iglob(rel, root_dir=root, flags=0, limit=MAX_EXPANSIONS)
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


# -- the cases --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Case:
    tool: BaseTool
    input: dict[str, Any]
    prepared: Any = None


def _workspace(root: Path) -> WorkspaceFileAPI:
    (root / "sub").mkdir()
    text = "".join(f"line {i}\n" for i in range(LINES))
    for name in ("a.txt", "b.txt", "c.txt"):
        (root / name).write_text(text)
    (root / "sub" / "notes.txt").write_text("TODO\n")
    return WorkspaceFileAPI(str(root))


def _cases(ws: WorkspaceFileAPI) -> dict[str, Case]:
    text = "".join(f"line {i}\n" for i in range(LINES))
    patch = "".join(
        f"--- a/{n}\n+++ b/{n}\n@@ -10,3 +10,3 @@\n line 9\n-line 10\n+ten\n line 11\n"
        for n in ("a.txt", "b.txt", "c.txt")
    )
    shell = ShellTool()
    command = {"command": "cd sub && grep -rn TODO . > out.txt", "cwd": "."}
    return {
        "write_file": Case(
            WriteFileTool(), {"path": "a.txt", "content": text.replace("line 50\n", "fifty\n")}
        ),
        "apply_patch": Case(ApplyPatchTool(), {"patch": patch}),
        "shell": Case(shell, command, shell.prepare(command, ws)),
    }


def _variants(
    case: Case, ws: WorkspaceFileAPI, rails: Guardrails
) -> dict[str, Callable[[], Awaitable[object]]]:
    name, effects = case.tool.definition.name, case.tool.definition.side_effects

    async def old() -> object:
        return await asyncio.to_thread(proposed_call, name, case.input, effects, ws)

    async def old_inline() -> object:
        return proposed_call(name, case.input, effects, ws)

    async def new() -> object:
        return await case.tool.effects(case.input, ws, prepared=case.prepared)

    async def new_check() -> object:
        declared = await case.tool.effects(case.input, ws, prepared=case.prepared)
        return rails.check(declared, TurnCounter(), tool_name=name)

    return {"old": old, "old-inline": old_inline, "new": new, "new+check": new_check}


async def _measure(ws: WorkspaceFileAPI, rounds: int) -> dict[str, dict[str, list[float]]]:
    rails = Guardrails(
        GuardrailConfig(
            protected_files=[".env", "secrets/**"], max_lines_changed=500, max_files_modified=50
        )
    )
    cases = _cases(ws)
    times: dict[str, dict[str, list[float]]] = {n: {} for n in cases}
    for _ in range(rounds):
        for case_name, case in cases.items():
            for variant, run in _variants(case, ws, rails).items():
                samples = times[case_name].setdefault(variant, [])
                for _ in range(PER_ROUND):
                    started = time.perf_counter()
                    await run()
                    samples.append((time.perf_counter() - started) * 1e6)
    return times


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    with tempfile.TemporaryDirectory() as scratch:
        times = asyncio.run(_measure(_workspace(Path(scratch).resolve()), rounds))
    print(f"effect derivation per call, median us ({rounds} rounds x {PER_ROUND} calls)")
    print(f"{'tool':<12} {'variant':<11} {'median':>9} {'ratio':>7}")
    for case_name, variants in times.items():
        base = statistics.median(variants["old"])
        for variant, samples in variants.items():
            median = statistics.median(samples)
            print(f"{case_name:<12} {variant:<11} {median:9.1f} {median / base:7.2f}")


if __name__ == "__main__":
    main()
