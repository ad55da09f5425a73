"""apply_patch: apply a unified diff (one or more files, one or more hunks).

All or nothing: every path is confined and every hunk applied in memory
before the first byte is written. The built-in applier runs first; when a
hunk does not match exactly, GNU ``patch`` gets a try on a private copy (see
system_patch). Only when one of them applied *every* hunk are the files
written; if a write then fails, the files already written are restored.
"""

from __future__ import annotations

import contextlib
import os
import stat
from dataclasses import dataclass, field
from typing import Any

from dispatcher.errors import ToolError, ToolExecutionError, ToolPermissionDenied
from dispatcher.sandbox import Sandbox
from dispatcher.tool import (
    BaseTool,
    ConfirmationPreview,
    ToolContext,
    ToolEffects,
    ToolOutput,
    declared_paths,
    lexical_path,
)
from dispatcher.tools.common import (
    check_cancelled,
    git_guard,
    object_schema,
    path_property,
    refuse_git_internals,
    relative_path,
    run_blocking,
)
from dispatcher.tools.files.edit import decode_text
from dispatcher.tools.files.locks import locked_paths
from dispatcher.tools.files.textdiff import unified_file_diff
from dispatcher.tools.patch.diff_apply import HunkFailed, apply_file_patch
from dispatcher.tools.patch.diff_parse import FilePatch, parse_unified_diff
from dispatcher.tools.patch.system_patch import SystemPatchFailed, apply_with_system_patch
from dispatcher.workspace import WorkspaceFileAPI, WorkspacePathNotFound
from protocol.canonical import SideEffects, ToolDefinition


@dataclass(slots=True)
class _Target:
    """One file the patch touches, with its sections in patch order.
    ``lock_key`` is its physical path: a name to lock on, never to open."""

    rel: str
    lock_key: str
    patches: list[FilePatch] = field(default_factory=list)


@dataclass(slots=True)
class _Plan:
    before: dict[str, bytes | None]
    after: dict[str, bytes | None]
    applier: str
    messages: str = ""
    python_failure: str | None = None


@dataclass(slots=True)
class PreparedPatch:
    """Per-call state: the plan the preview made (the patch applied in memory,
    possibly by GNU patch), kept so execute need not apply it again while the
    files are still as the preview read them."""

    plan: _Plan | None = None


class ApplyPatchTool(BaseTool):
    """Applies a unified diff to one or more workspace files, atomically."""

    definition: ToolDefinition = ToolDefinition(
        name="apply_patch",
        description=(
            "Apply a unified diff (as made by `diff -u` or `git diff`) with one or more hunks, "
            "possibly to several files. Either every hunk applies or no file changes. "
            "Use /dev/null as the old path to create a file."
        ),
        input_schema=object_schema(
            {
                "patch": {"type": "string", "description": "The unified diff text."},
                "path": path_property(
                    "Optional target file: required when the diff has no ---/+++ headers; "
                    "when given, the diff may touch only this file."
                ),
            },
            ["patch"],
        ),
        side_effects=SideEffects.WRITE,
    )
    path_fields: tuple[str, ...] = ("path",)

    def prepare(self, input: dict[str, Any], workspace: WorkspaceFileAPI) -> PreparedPatch:
        # Filled by preview, only when a confirmation is asked for.
        return PreparedPatch()

    async def execute(self, input: dict[str, Any], context: ToolContext) -> ToolOutput:
        check_cancelled(context, "apply_patch")
        ws = context.workspace_files
        files = parse_unified_diff(input["patch"], default_path=input.get("path"))
        targets = _targets(ws, files, input.get("path"))
        prepared = context.prepared
        previewed = prepared.plan if isinstance(prepared, PreparedPatch) else None
        async with locked_paths(t.lock_key for t in targets):
            plan = await _plan(ws, targets, context.sandbox, previewed)
            deleting = [rel for rel, data in plan.after.items() if data is None]
            if deleting and not ws.allow_delete:
                raise ToolPermissionDenied(
                    f"the patch deletes {', '.join(deleting)}, but deleting files is disabled "
                    "for this workspace; no file was changed"
                )
            check_cancelled(context, "apply_patch")
            _commit(ws, plan)
        return _report(targets, plan)

    async def effects(
        self,
        input: dict[str, Any],
        workspace: WorkspaceFileAPI,
        *,
        sandbox: Sandbox | None = None,
        prepared: Any = None,
    ) -> ToolEffects:
        """Every file of the diff (the side the tool would patch, and the file
        a link there leads to), its added lines and its ``+``/``-`` count. An
        unreadable patch changes nothing: the tool refuses it."""
        patch: str = input["patch"]
        name = self.definition.name
        return await run_blocking(
            lambda: patch_effects(name, patch, input.get("path"), workspace),
            size_hint=len(patch),
        )

    async def preview(
        self,
        input: dict[str, Any],
        workspace: WorkspaceFileAPI,
        *,
        sandbox: Sandbox | None = None,
        prepared: Any = None,
    ) -> ConfirmationPreview:
        """The diff the call would make. ``sandbox`` (the session's, from the
        dispatcher): GNU patch, should the built-in applier fail, runs there
        as it would for the call itself, never on the host when it is on.
        The plan is kept in ``prepared`` for execute."""
        files = parse_unified_diff(input["patch"], default_path=input.get("path"))
        targets = _targets(workspace, files, input.get("path"))
        plan = await _plan(workspace, targets, sandbox)
        if isinstance(prepared, PreparedPatch):
            prepared.plan = plan
        diffs = [_file_change_diff(t.rel, plan.before[t.rel], plan.after[t.rel]) for t in targets]
        return ConfirmationPreview(
            text="".join(diffs),
            kind="diff",
            projected_modifications=tuple(t.rel for t in targets),
        )


def patch_effects(
    tool_name: str, patch: str, only: str | None, ws: WorkspaceFileAPI | None
) -> ToolEffects:
    """The effects of applying ``patch`` (see ApplyPatchTool.effects)."""
    try:
        files = parse_unified_diff(patch, default_path=only)
    except ToolError:
        return ToolEffects(summary=f"{tool_name}: (unreadable patch)")
    writes: dict[str, None] = {}
    deletes: dict[str, None] = {}
    added: list[tuple[str, str]] = []
    lines = 0
    for fp in files:
        name = fp.new_path or fp.old_path or ""
        into = deletes if fp.new_path is None else writes
        for path in _patched_names(fp):
            into.update(dict.fromkeys(declared_paths(path, ws)))
        plus = [ln.text for h in fp.hunks for ln in h.lines if ln.op == "+"]
        lines += len(plus) + sum(1 for h in fp.hunks for ln in h.lines if ln.op == "-")
        if plus:
            added.append((lexical_path(name), "\n".join(plus) + "\n"))
    names = [fp.new_path or fp.old_path or "?" for fp in files]
    noun = "file" if len(names) == 1 else "files"
    shown = ", ".join(names[:3]) + (", …" if len(names) > 3 else "")
    return ToolEffects(
        writes=tuple(writes),
        deletes=tuple(d for d in deletes if d not in writes),
        added_text=tuple(added),
        lines_changed=lines,
        summary=f"{tool_name}: {len(names)} {noun} ({shown})",
    )


def _patched_names(fp: FilePatch) -> list[str]:
    """The names a section may patch: both of a ``diff -u file.orig file``
    section, since which one the tool patches depends on which exists when it
    runs (``_choose_path``), not when the effects are declared."""
    return list(dict.fromkeys(p for p in (fp.old_path, fp.new_path) if p is not None))


def _targets(ws: WorkspaceFileAPI, files: list[FilePatch], only: str | None) -> list[_Target]:
    """Confine every path and group sections by file (in first-seen order)."""
    only_rel = relative_path(ws, only) if only is not None else None
    by_rel: dict[str, _Target] = {}
    for fp in files:
        name = _choose_path(ws, fp)
        rel = refuse_git_internals(ws, name)
        if rel == ".":
            raise ToolExecutionError(f"the patch names {name!r}, which is the workspace root")
        if only_rel is not None and rel != only_rel:
            raise ToolExecutionError(
                f"the patch touches {rel!r}, but the path argument limits it to {only_rel!r}"
            )
        target = by_rel.get(rel)
        if target is None:
            target = by_rel[rel] = _Target(rel, str(ws.resolve(rel)))
        # From here on both sides name the confined relative path.
        target.patches.append(
            FilePatch(
                None if fp.old_path is None else rel,
                None if fp.new_path is None else rel,
                fp.hunks,
            )
        )
    return list(by_rel.values())


def _choose_path(ws: WorkspaceFileAPI, fp: FilePatch) -> str:
    if fp.old_path is None or fp.new_path is None:
        name = fp.new_path if fp.old_path is None else fp.old_path
        assert name is not None
        return name
    if fp.old_path == fp.new_path:
        return fp.new_path
    # `diff -u file.orig file` style: patch the side that exists, preferring the new name.
    for candidate in (fp.new_path, fp.old_path):
        try:
            if stat.S_ISREG(ws.stat(candidate).st_mode):
                return candidate
        except ToolExecutionError:
            continue  # missing (or under a file): try the other name
    raise ToolExecutionError(f"neither {fp.old_path!r} nor {fp.new_path!r} exists")


async def _plan(
    ws: WorkspaceFileAPI,
    targets: list[_Target],
    sandbox: Sandbox | None = None,
    previewed: _Plan | None = None,
) -> _Plan:
    """Every target's bytes before and after. ``previewed``: the plan the
    preview made, reused when the files still hold exactly what it read."""
    size = _total_size(ws, targets)
    before = await run_blocking(lambda: _read_originals(ws, targets), size_hint=size)
    if previewed is not None and previewed.before == before:
        return previewed
    try:
        after = await run_blocking(lambda: _apply_in_python(targets, before), size_hint=size)
        return _Plan(before, after, "builtin")
    except (HunkFailed, ToolExecutionError) as exc:
        python_failure = exc.message if isinstance(exc, ToolError) else str(exc)
    sections = [fp for t in targets for fp in t.patches]
    try:
        after, messages = await apply_with_system_patch(sections, before, sandbox=sandbox)
    except SystemPatchFailed as exc:
        raise ToolExecutionError(
            f"the patch does not apply: {python_failure}. The system patch program could not "
            f"apply it either: {exc}. No file was changed."
        ) from exc
    for t in targets:
        if t.patches[-1].status == "deleted" and after[t.rel]:
            raise ToolExecutionError(
                f"the patch deletes {t.rel!r} but content would remain; no file was changed"
            )
        if t.patches[-1].status == "deleted":
            after[t.rel] = None
    return _Plan(before, after, "system_patch", messages, python_failure)


def _total_size(ws: WorkspaceFileAPI, targets: list[_Target]) -> int:
    total = 0
    for t in targets:
        with contextlib.suppress(ToolError):
            total += ws.stat(t.rel).st_size
    return total


def _read_originals(ws: WorkspaceFileAPI, targets: list[_Target]) -> dict[str, bytes | None]:
    """Current bytes of every target (None: absent), after checking each
    exists or not as the patch expects."""
    before: dict[str, bytes | None] = {}
    for t in targets:
        first = t.patches[0]
        # Opened once, by descriptor: what is checked is what is read.
        try:
            fd: int | None = ws.open_file(t.rel)
        except WorkspacePathNotFound:
            fd = None
        if fd is not None and first.status == "created":
            os.close(fd)
            raise ToolExecutionError(f"the patch creates {t.rel!r}, but it already exists")
        if fd is None and first.status != "created":
            raise ToolExecutionError(f"the patch changes {t.rel!r}, but it does not exist")
        before[t.rel] = None if fd is None else ws.read_fd(fd, t.rel)
    return before


def _apply_in_python(
    targets: list[_Target], before: dict[str, bytes | None]
) -> dict[str, bytes | None]:
    after: dict[str, bytes | None] = {}
    for t in targets:
        data = before[t.rel]
        text: str | None = None if data is None else decode_text(data, t.rel)
        for fp in t.patches:
            text = apply_file_patch(t.rel, text, fp).text
        after[t.rel] = None if text is None else text.encode("utf-8")
    return after


def _commit(ws: WorkspaceFileAPI, plan: _Plan) -> None:
    """Write every change; on the first failure put back what was written."""
    done: list[str] = []
    made_dirs: list[str] = []
    try:
        for rel in sorted(plan.after):
            new = plan.after[rel]
            if new == plan.before[rel]:
                continue
            if new is None:
                ws.delete(rel, guard=git_guard(rel))
            else:
                made_dirs.extend(ws.write_bytes(rel, new, guard=git_guard(rel)).made_dirs)
            done.append(rel)
    except (ToolError, OSError) as exc:
        for rel in reversed(done):
            old = plan.before[rel]
            with contextlib.suppress(ToolError, OSError):
                if old is None:
                    ws.unlink(rel)
                else:
                    ws.write_bytes(rel, old)
        for directory in reversed(made_dirs):
            with contextlib.suppress(ToolError, OSError):
                ws.rmdir(directory)
        reason = exc.message if isinstance(exc, ToolError) else str(exc)
        raise ToolExecutionError(
            f"writing the patched files failed ({reason}); every file was restored"
        ) from exc


def _file_change_diff(rel: str, before: bytes | None, after: bytes | None) -> str:
    old = "" if before is None else before.decode("utf-8", errors="replace")
    new = "" if after is None else after.decode("utf-8", errors="replace")
    return unified_file_diff(rel, old, new, created=before is None, deleted=after is None)


def _report(targets: list[_Target], plan: _Plan) -> ToolOutput:
    summaries: list[dict[str, Any]] = []
    lines: list[str] = []
    for t in targets:
        added = sum(1 for fp in t.patches for h in fp.hunks for ln in h.lines if ln.op == "+")
        removed = sum(1 for fp in t.patches for h in fp.hunks for ln in h.lines if ln.op == "-")
        if plan.after[t.rel] is None:
            status = "deleted"
        elif plan.before[t.rel] is None:
            status = "created"
        else:
            status = "modified"
        hunks = sum(len(fp.hunks) for fp in t.patches)
        summaries.append(
            {"path": t.rel, "status": status, "hunks": hunks, "added": added, "removed": removed}
        )
        lines.append(f"{status[0].upper()} {t.rel} (+{added} -{removed}, {hunks} hunks)")
    applier = "the built-in applier" if plan.applier == "builtin" else "the system patch program"
    text = f"Applied the patch with {applier}:\n" + "\n".join(lines)
    if plan.messages:
        text += f"\npatch said:\n{plan.messages}"
    corrected = any(h.counts_corrected for t in targets for fp in t.patches for h in fp.hunks)
    return ToolOutput.text(
        text,
        metadata={
            "files": summaries,
            "applier": plan.applier,
            "builtin_failure": plan.python_failure,
            "patch_messages": plan.messages or None,
            "hunk_counts_corrected": corrected,
        },
        files_modified=[t.rel for t in targets],
    )
