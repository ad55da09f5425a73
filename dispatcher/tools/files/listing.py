"""list_dir and find_files: what is in the workspace, by folder or by name.

Both read only names and metadata, through the descriptor walk (walk.py):
no file content is opened, and no folder is entered by name.

The model gets one path per line; clients get the same listing as
``ToolOutput.data`` (``LIST_DIR_OUTPUT``, ``FIND_FILES_OUTPUT``), and
``metadata`` keeps the operational facts (count, truncated)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from dispatcher.tool import BaseTool, ToolContext, ToolOutput
from dispatcher.tools.common import check_cancelled, object_schema, path_property
from dispatcher.tools.search.globbing import name_or_path_match
from dispatcher.tools.search.walk import Entry, Walk
from dispatcher.tools.shapes import BOOLEAN, COUNT, PATH, STRING, array, record
from dispatcher.workspace import WorkspaceFileAPI
from protocol.canonical import SideEffects, ToolDefinition

LIST_DIR_OUTPUT = record(
    {
        "path": PATH,
        "entries": array(
            record(
                {
                    "path": PATH,
                    "name": STRING,
                    "type": {"type": "string", "enum": ["file", "dir", "symlink"]},
                    "size": {
                        "type": "integer",
                        "minimum": 0,
                        "description": "Bytes; files and links to files only.",
                    },
                },
                optional=["size"],
            )
        ),
        "count": COUNT,
        "truncated": BOOLEAN,
    }
)
FIND_FILES_OUTPUT = record({"files": array(PATH), "count": COUNT, "truncated": BOOLEAN})


def _relative_to(start_rel: str, rel: str) -> str:
    return rel if start_rel == "." else rel[len(start_rel) + 1 :]


def _kind(entry: Entry) -> str:
    if entry.is_symlink:
        return "symlink"
    return "dir" if entry.is_dir else "file"


def _entry_json(entry: Entry) -> dict[str, Any]:
    out: dict[str, Any] = {
        "path": entry.rel,
        "name": entry.rel.rpartition("/")[2],
        "type": _kind(entry),
    }
    # The walk reports -1 for folders and links to folders: no size to give.
    if entry.size >= 0:
        out["size"] = entry.size
    return out


class ListDirTool(BaseTool):
    """Lists a folder, optionally recursively and filtered by a glob."""

    definition: ToolDefinition = ToolDefinition(
        name="list_dir",
        description=(
            "List a workspace folder. Paths come back relative to the workspace root; folders "
            "end in '/'. `pattern` is a glob ('*.py' matches names, 'src/**/*.ts' matches paths "
            "below the folder). .git is skipped and .gitignore is honoured unless "
            "respect_gitignore is false."
        ),
        input_schema=object_schema(
            {
                "path": path_property("Folder to list (default: the workspace root)."),
                "pattern": {"type": "string", "description": "Optional glob filter."},
                "recursive": {
                    "type": "boolean",
                    "description": "List sub-folders too (default false; implied by a "
                    "pattern containing '/').",
                },
                "respect_gitignore": {
                    "type": "boolean",
                    "description": "Leave out ignored paths (default true).",
                },
                "max_entries": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": 10000,
                    "description": "Most entries to return (default 1000).",
                },
            },
            [],
        ),
        side_effects=SideEffects.READ,
        output_schema=LIST_DIR_OUTPUT,
    )
    path_fields: tuple[str, ...] = ("path",)

    async def execute(self, input: dict[str, Any], context: ToolContext) -> ToolOutput:
        check_cancelled(context, "list_dir")
        path: str = input.get("path", ".")
        pattern: str | None = input.get("pattern")
        recursive = bool(input.get("recursive", False)) or (pattern is not None and "/" in pattern)
        limit: int = input.get("max_entries", 1000)
        ws = context.workspace_files

        def run() -> tuple[str, list[Entry], bool]:
            found: list[Entry] = []
            with Walk(
                ws,
                path,
                recursive=recursive,
                respect_gitignore=input.get("respect_gitignore", True),
                # One fstatat per file, already open folder: cheap beside the listing.
                sizes=True,
                cancelled=context.cancel_event.is_set,
            ) as walk:
                start_rel = walk.start_rel
                for entry in walk:
                    if pattern is not None and not name_or_path_match(
                        pattern, _relative_to(start_rel, entry.rel)
                    ):
                        continue
                    if len(found) == limit:
                        return start_rel, found, True
                    found.append(entry)
            return start_rel, found, False

        start_rel, entries, truncated = await asyncio.to_thread(run)
        check_cancelled(context, "list_dir")
        lines = [e.rel + ("/" if e.is_dir else "") for e in entries]
        text = "\n".join(lines) if lines else f"(no entries in {start_rel})"
        if truncated:
            text += f"\n[truncated: only the first {limit} entries are shown]"
        return ToolOutput.text(
            text,
            metadata={"count": len(entries), "truncated": truncated},
            data={
                "path": start_rel,
                "entries": [_entry_json(e) for e in entries],
                "count": len(entries),
                "truncated": truncated,
            },
        )


class FindFilesTool(BaseTool):
    """Finds files whose name (or relative path) matches a glob."""

    definition: ToolDefinition = ToolDefinition(
        name="find_files",
        description=(
            "Find files by name glob, e.g. '*.yaml', 'test_*.py', 'README*' (or a path glob "
            "with '/', e.g. 'src/**/*.ts'). Searches sub-folders unless recursive is false. "
            "Honours .gitignore by default."
        ),
        input_schema=object_schema(
            {
                "pattern": {"type": "string", "description": "Glob for the file name."},
                "path": path_property("Folder to search (default: the workspace root)."),
                "recursive": {"type": "boolean", "description": "Default true."},
                "respect_gitignore": {"type": "boolean", "description": "Default true."},
                "max_results": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": 5000,
                    "description": "Most paths to return (default 200).",
                },
            },
            ["pattern"],
        ),
        side_effects=SideEffects.READ,
        output_schema=FIND_FILES_OUTPUT,
    )
    path_fields: tuple[str, ...] = ("path",)

    async def execute(self, input: dict[str, Any], context: ToolContext) -> ToolOutput:
        check_cancelled(context, "find_files")
        pattern: str = input["pattern"]
        path: str = input.get("path", ".")
        limit: int = input.get("max_results", 200)
        ws = context.workspace_files

        def run() -> tuple[list[str], bool]:
            return find_matching_files(
                ws,
                path,
                pattern,
                recursive=input.get("recursive", True),
                respect_gitignore=input.get("respect_gitignore", True),
                limit=limit,
                cancelled=context.cancel_event.is_set,
            )

        found, truncated = await asyncio.to_thread(run)
        check_cancelled(context, "find_files")
        text = "\n".join(found) if found else f"(no files match {pattern!r})"
        if truncated:
            text += f"\n[truncated: only the first {limit} matches are shown]"
        return ToolOutput.text(
            text,
            metadata={"count": len(found), "truncated": truncated},
            data={"files": found, "count": len(found), "truncated": truncated},
        )


def find_matching_files(
    ws: WorkspaceFileAPI,
    path: str,
    pattern: str,
    *,
    recursive: bool,
    respect_gitignore: bool,
    limit: int,
    cancelled: Callable[[], bool],
) -> tuple[list[str], bool]:
    """Workspace-relative paths of files (not folders) below ``path`` matching
    ``pattern``; the flag says whether more matched than ``limit``."""
    found: list[str] = []
    with Walk(
        ws, path, recursive=recursive, respect_gitignore=respect_gitignore, cancelled=cancelled
    ) as walk:
        for entry in walk:
            if entry.is_dir or entry.target_is_dir:
                continue
            if name_or_path_match(pattern, _relative_to(walk.start_rel, entry.rel)):
                if len(found) == limit:
                    return found, True
                found.append(entry.rel)
    return found, False
