"""File tools: read_file, write_file, patch_file, delete_file.

Every byte goes through the session's WorkspaceFileAPI, which reaches files
by descriptor from the workspace root (never re-opening a checked name) and
writes atomically. Write tools also hold a per-file lock
(see file_locks) so concurrent calls on one file apply one after the other.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dispatcher.errors import ToolError, ToolExecutionError, ToolPermissionDenied
from dispatcher.tool import (
    BaseTool,
    ConfirmationPreview,
    ToolContext,
    ToolEffects,
    ToolOutput,
    declared_paths,
)
from dispatcher.tools.common import (
    Options,
    check_cancelled,
    file_size,
    git_guard,
    object_schema,
    path_property,
    refuse_git_internals,
    relative_path,
    require_file,
    run_blocking,
)
from dispatcher.tools.files.locks import locked_paths
from dispatcher.tools.files.textdiff import changed_lines, unified_file_diff
from dispatcher.workspace import WorkspaceFileAPI, WorkspacePathNotFound
from protocol.canonical import SideEffects, ToolDefinition

if TYPE_CHECKING:
    from dispatcher.sandbox import Sandbox

DEFAULT_READ_MAX_CHARS = 2 * 1024 * 1024
# Past this size the current file is not read to count a write's changed
# lines: the count is then the new content's lines alone (a lower bound).
DIFF_READ_LIMIT = 1024 * 1024


def decode_text(data: bytes, path: str) -> str:
    """UTF-8 text of ``data``, or a clear error for binary and non-UTF-8 files."""
    nul = data.find(b"\x00")
    if nul != -1:
        raise ToolExecutionError(
            f"{path!r} looks binary (NUL byte at offset {nul}); only text files can be read"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ToolExecutionError(
            f"{path!r} is not UTF-8 text (invalid byte 0x{data[exc.start]:02x} at offset "
            f"{exc.start}); it may be binary or use another encoding"
        ) from exc


def file_diff(rel: str, before: str, after: str, *, created: bool = False) -> str:
    """Unified diff of one file's change, git style (``/dev/null`` for a new file)."""
    return unified_file_diff(rel, before, after, created=created)


def count_lines(text: str) -> int:
    """Lines of ``text``, a last line without a newline included."""
    if not text:
        return 0
    return text.count("\n") + (0 if text.endswith("\n") else 1)


def _write_lines(
    workspace: WorkspaceFileAPI, path: str, rel: str, content: str, append: bool
) -> int:
    """Lines a write changes: the appended lines, or the diff against the
    current text (a new, unreadable or very large file counts as empty)."""
    if append:
        return count_lines(content)
    return changed_lines(unified_file_diff(rel, _current_text(workspace, path), content))


def _current_text(workspace: WorkspaceFileAPI, path: str) -> str:
    try:
        if workspace.stat(path).st_size > DIFF_READ_LIMIT:
            return ""
        return workspace.read_bytes(path).decode("utf-8", errors="replace")
    except (ToolError, OSError):
        return ""  # a new file, or one the tool itself will report on


def match_lines(text: str, needle: str) -> list[int]:
    """1-based line numbers where each non-overlapping occurrence starts
    (the same occurrences ``str.count`` counts)."""
    lines: list[int] = []
    start = text.find(needle)
    line, scanned = 1, 0
    while start != -1:
        line += text.count("\n", scanned, start)
        scanned = start
        lines.append(line)
        start = text.find(needle, start + len(needle))
    return lines


class ReadFileTool(BaseTool):
    """Reads a UTF-8 text file, optionally a range of lines."""

    definition: ToolDefinition = ToolDefinition(
        name="read_file",
        description=(
            "Read a UTF-8 text file from the workspace. Use offset/limit (1-based lines) "
            "to read part of a large file. Binary and non-UTF-8 files give an error."
        ),
        input_schema=object_schema(
            {
                "path": path_property("File path, relative to the workspace root."),
                "offset": {
                    "type": "integer",
                    "minimum": 1,
                    "description": "First line to return (1-based). Default 1.",
                },
                "limit": {
                    "type": "integer",
                    "minimum": 1,
                    "description": "How many lines to return. Default: to the end.",
                },
            },
            ["path"],
        ),
        side_effects=SideEffects.READ,
    )
    path_fields: tuple[str, ...] = ("path",)

    async def execute(self, input: dict[str, Any], context: ToolContext) -> ToolOutput:
        check_cancelled(context, "read_file")
        options = Options("read_file", context.options)
        max_chars = options.integer(
            "max_chars", DEFAULT_READ_MAX_CHARS, minimum=1, maximum=64 * 1024 * 1024
        )
        path: str = input["path"]
        offset: int = input.get("offset", 1)
        limit: int | None = input.get("limit")
        ws = context.workspace_files
        rel = relative_path(ws, path)  # for the reply only; the read uses the descriptor
        try:
            fd = ws.open_file(path)
        except WorkspacePathNotFound:
            raise ToolExecutionError(f"file {path!r} does not exist") from None
        try:
            size_hint = os.fstat(fd).st_size
        except OSError as exc:
            os.close(fd)
            raise ToolExecutionError(f"{path!r}: {exc.strerror}") from exc

        def load() -> tuple[str, int, int]:
            # One trip to a worker thread for large files: read, count, decode.
            data = ws.read_fd(fd, path)
            # Counting b"\n" in the bytes is a memchr; on the decoded text it is not.
            total = data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)
            return decode_text(data, path), total, len(data)

        text, total, size = await run_blocking(load, size_hint=size_hint)
        return _select_lines(rel, text, total, offset, limit, max_chars, size)


def _select_lines(
    rel: str, text: str, total: int, offset: int, limit: int | None, max_chars: int, size: int
) -> ToolOutput:
    if offset == 1 and limit is None and len(text) <= max_chars:
        # The common case: the whole file, without splitting it into lines.
        chosen, end, truncated = text, total, False
    else:
        if offset > max(total, 1):
            raise ToolExecutionError(
                f"offset {offset} is past the end of {rel!r}, which has {total} lines"
            )
        lines = text.splitlines(keepends=True)
        stop = total if limit is None else min(total, offset - 1 + limit)
        picked = lines[offset - 1 : stop]
        used, kept = 0, 0
        for line in picked:
            if used + len(line) > max_chars and kept > 0:
                break
            used += len(line)
            kept += 1
        truncated = kept < len(picked)
        chosen = "".join(picked[:kept])
        end = offset - 1 + kept
        if truncated:
            chosen += (
                f"\n[truncated at {max_chars} characters: showing lines {offset}-{end} of "
                f"{total}; continue with offset={end + 1}]"
            )
    metadata: dict[str, Any] = {
        "path": rel,
        "size_bytes": size,
        "total_lines": total,
        "start_line": offset if total else 0,
        "end_line": end,
        "truncated": truncated,
        "next_offset": end + 1 if end < total else None,
    }
    return ToolOutput.text(chosen, metadata=metadata)


class WriteFileTool(BaseTool):
    """Creates, overwrites or appends to a file, atomically."""

    definition: ToolDefinition = ToolDefinition(
        name="write_file",
        description=(
            "Write text to a file in the workspace: overwrite (default) or append. Creates "
            "missing parent folders. The write is atomic. Prefer patch_file for small edits."
        ),
        input_schema=object_schema(
            {
                "path": path_property("File path, relative to the workspace root."),
                "content": {"type": "string", "description": "The text to write."},
                "mode": {
                    "type": "string",
                    "enum": ["overwrite", "append"],
                    "description": "overwrite (default) replaces the file; append adds to it.",
                },
                "create_parents": {
                    "type": "boolean",
                    "description": "Create missing parent folders (default true).",
                },
            },
            ["path", "content"],
        ),
        side_effects=SideEffects.WRITE,
    )
    path_fields: tuple[str, ...] = ("path",)

    async def execute(self, input: dict[str, Any], context: ToolContext) -> ToolOutput:
        check_cancelled(context, "write_file")
        ws = context.workspace_files
        path: str = input["path"]
        content: str = input["content"]
        mode: str = input.get("mode", "overwrite")
        rel = refuse_git_internals(ws, path)
        parents: bool = input.get("create_parents", True)
        guard = git_guard(path)
        encoded = content.encode("utf-8")
        async with locked_paths([str(ws.resolve(path))]):
            if mode == "append":
                result = await run_blocking(
                    lambda: ws.append(path, content, create_parents=parents, guard=guard),
                    size_hint=len(encoded),
                )
            else:
                result = await run_blocking(
                    lambda: ws.write_bytes(path, encoded, create_parents=parents, guard=guard),
                    size_hint=len(encoded),
                )
        created, size_after = result.created, result.size
        verb = "Created" if created else ("Appended to" if mode == "append" else "Overwrote")
        return ToolOutput.text(
            f"{verb} {rel} ({len(encoded)} bytes written, {size_after} bytes now)",
            metadata={
                "path": rel,
                "mode": mode,
                "created": created,
                "bytes_written": len(encoded),
                "size_bytes": size_after,
            },
            files_modified=[rel],
        )

    async def effects(
        self,
        input: dict[str, Any],
        workspace: WorkspaceFileAPI,
        *,
        sandbox: Sandbox | None = None,
        prepared: Any = None,
    ) -> ToolEffects:
        """The path (and the file a link there leads to), the content, and the
        lines changed against the current file (read off the event loop when
        it is large)."""
        path: str = input["path"]
        content: str = input["content"]
        append = input.get("mode") == "append"
        paths = declared_paths(path, workspace)
        size = 0 if append else file_size(workspace, path)
        lines = await run_blocking(
            lambda: _write_lines(workspace, path, paths[0], content, append),
            size_hint=max(size, len(content)),
        )
        how = "append, " if append else ""
        return ToolEffects(
            writes=paths,
            added_text=((paths[0], content),),
            lines_changed=lines,
            summary=f"{self.definition.name} {path} ({how}+{count_lines(content)} lines)",
        )

    async def preview(
        self,
        input: dict[str, Any],
        workspace: WorkspaceFileAPI,
        *,
        sandbox: Sandbox | None = None,
        prepared: Any = None,
    ) -> ConfirmationPreview:
        path: str = input["path"]
        rel = refuse_git_internals(workspace, path)
        content: str = input["content"]
        if not workspace.exists(path):
            diff = file_diff(rel, "", content, created=True)
        else:
            try:
                before = decode_text(workspace.read_bytes(path), path)
            except ToolExecutionError as err:
                verb = "appended to" if input.get("mode") == "append" else "replaced"
                return ConfirmationPreview(
                    text=f"{rel} will be {verb} ({err.message})",
                    kind="text",
                    projected_modifications=(rel,),
                )
            after = before + content if input.get("mode") == "append" else content
            diff = file_diff(rel, before, after) or f"(no change to {rel})"
        return ConfirmationPreview(text=diff, kind="diff", projected_modifications=(rel,))


class PatchFileTool(BaseTool):
    """Replaces one exact, unique piece of text in a file (str_replace style)."""

    definition: ToolDefinition = ToolDefinition(
        name="patch_file",
        description=(
            "Replace an exact piece of text in a file. old_str must occur exactly once "
            "(include surrounding lines to make it unique). Returns the unified diff."
        ),
        input_schema=object_schema(
            {
                "path": path_property("File path, relative to the workspace root."),
                "old_str": {"type": "string", "description": "Exact text to replace."},
                "new_str": {"type": "string", "description": "Replacement text."},
            },
            ["path", "old_str", "new_str"],
        ),
        side_effects=SideEffects.WRITE,
    )
    path_fields: tuple[str, ...] = ("path",)

    async def execute(self, input: dict[str, Any], context: ToolContext) -> ToolOutput:
        check_cancelled(context, "patch_file")
        ws = context.workspace_files
        path: str = input["path"]
        rel = refuse_git_internals(ws, path)
        guard = git_guard(path)
        prepared = context.prepared
        previewed = prepared if isinstance(prepared, PreparedEdit) else None
        async with locked_paths([str(ws.resolve(path))]):
            size = require_file(ws, path).st_size
            edit = await run_blocking(
                lambda: _replace_once(ws, path, rel, input["old_str"], input["new_str"], previewed),
                size_hint=size,
            )
            # Read and write are two walks: a link swapped between them can
            # only redirect the write to another file inside the workspace.
            await run_blocking(lambda: ws.write(path, edit.after, guard=guard), size_hint=size)
        diff = edit.diff(rel)
        return ToolOutput.text(
            diff,
            metadata={
                "path": rel,
                "line": edit.line,
                "lines_removed": input["old_str"].count("\n") + 1,
                "lines_added": input["new_str"].count("\n") + 1,
                "diff": diff,
            },
            files_modified=[rel],
        )

    def prepare(self, input: dict[str, Any], workspace: WorkspaceFileAPI) -> PreparedEdit:
        # Filled by preview, only when a confirmation is asked for.
        return PreparedEdit()

    async def effects(
        self,
        input: dict[str, Any],
        workspace: WorkspaceFileAPI,
        *,
        sandbox: Sandbox | None = None,
        prepared: Any = None,
    ) -> ToolEffects:
        """The path, the new text, and the lines of the old/new difference
        (from the input alone: the file is not read)."""
        path: str = input["path"]
        paths = declared_paths(path, workspace)
        old, new = input["old_str"], input["new_str"]
        removed, added = count_lines(old), count_lines(new)
        return ToolEffects(
            writes=paths,
            added_text=((paths[0], new),),
            lines_changed=changed_lines(unified_file_diff(paths[0], old, new)),
            summary=f"{self.definition.name} {path} (+{added} -{removed} lines)",
        )

    async def preview(
        self,
        input: dict[str, Any],
        workspace: WorkspaceFileAPI,
        *,
        sandbox: Sandbox | None = None,
        prepared: Any = None,
    ) -> ConfirmationPreview:
        """The diff of the edit; kept in ``prepared`` for execute."""
        path: str = input["path"]
        rel = refuse_git_internals(workspace, path)
        require_file(workspace, path)
        edit = _replace_once(workspace, path, rel, input["old_str"], input["new_str"])
        text = edit.diff(rel)
        if isinstance(prepared, PreparedEdit):
            prepared.adopt(edit)  # with its diff, computed just now
        return ConfirmationPreview(text=text, kind="diff", projected_modifications=(rel,))


@dataclass(slots=True)
class PreparedEdit:
    """One patch_file call's edit as its preview computed it (before, after,
    line, diff), so execute reuses it while the file still holds ``before``."""

    before: str | None = None
    after: str = ""
    line: int = 0
    _diff: str | None = None

    def adopt(self, other: PreparedEdit) -> None:
        self.before, self.after, self.line = other.before, other.after, other.line
        self._diff = other._diff

    def diff(self, rel: str) -> str:
        """The unified diff, computed on first use only."""
        if self._diff is None:
            self._diff = file_diff(rel, self.before or "", self.after)
        return self._diff


def _replace_once(
    ws: WorkspaceFileAPI,
    path: str,
    rel: str,
    old: str,
    new: str,
    previewed: PreparedEdit | None = None,
) -> PreparedEdit:
    """The edit (before, after, line of the change) or the not-found /
    not-unique error. ``previewed``: the preview's edit, reused when the file
    still holds exactly the text it was computed from."""
    if not old:
        raise ToolExecutionError("old_str must not be empty")
    if old == new:
        raise ToolExecutionError("old_str and new_str are identical; there is nothing to change")
    text = decode_text(ws.read_bytes(path), path)
    if previewed is not None and previewed.before == text:
        return previewed
    lines = match_lines(text, old)
    if not lines:
        raise ToolExecutionError(f"old_str not found in {rel!r}")
    if len(lines) > 1:
        raise ToolExecutionError(
            f"old_str is not unique in {rel!r}: {len(lines)} matches, at lines "
            + ", ".join(str(n) for n in lines)
            + "; include more surrounding text"
        )
    return PreparedEdit(text, text.replace(old, new, 1), lines[0])


class DeleteFileTool(BaseTool):
    """Deletes one file; only registered, and only allowed, when the
    workspace permits deletion."""

    definition: ToolDefinition = ToolDefinition(
        name="delete_file",
        description="Delete one file from the workspace (folders cannot be deleted).",
        input_schema=object_schema(
            {"path": path_property("File path, relative to the workspace root.")}, ["path"]
        ),
        side_effects=SideEffects.WRITE,
    )
    path_fields: tuple[str, ...] = ("path",)

    async def execute(self, input: dict[str, Any], context: ToolContext) -> ToolOutput:
        check_cancelled(context, "delete_file")
        ws = context.workspace_files
        path: str = input["path"]
        if not ws.allow_delete:
            raise ToolPermissionDenied("deleting files is disabled for this workspace")
        rel = refuse_git_internals(ws, path)
        async with locked_paths([str(ws.resolve(path))]):
            size = require_file(ws, path).st_size
            ws.delete(path, guard=git_guard(path))
        return ToolOutput.text(
            f"Deleted {rel} ({size} bytes)",
            metadata={"path": rel, "size_bytes": size},
            files_modified=[rel],
        )

    async def effects(
        self,
        input: dict[str, Any],
        workspace: WorkspaceFileAPI,
        *,
        sandbox: Sandbox | None = None,
        prepared: Any = None,
    ) -> ToolEffects:
        path: str = input["path"]
        return ToolEffects(
            deletes=declared_paths(path, workspace), summary=f"{self.definition.name} {path}"
        )

    async def preview(
        self,
        input: dict[str, Any],
        workspace: WorkspaceFileAPI,
        *,
        sandbox: Sandbox | None = None,
        prepared: Any = None,
    ) -> ConfirmationPreview:
        path: str = input["path"]
        rel = refuse_git_internals(workspace, path)
        require_file(workspace, path)
        try:
            before = decode_text(workspace.read_bytes(path), path)
        except ToolExecutionError:
            return ConfirmationPreview(
                text=f"{rel} (binary) will be deleted", projected_modifications=(rel,)
            )
        diff = unified_file_diff(rel, before, "", deleted=True)
        return ConfirmationPreview(
            text=diff or f"{rel} (empty) will be deleted",
            kind="diff",
            projected_modifications=(rel,),
        )
