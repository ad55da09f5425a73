"""Walk a workspace folder for the listing and search tools.

The walk starts at a folder the WorkspaceFileAPI has resolved and confined.
Below it, real folders are entered (they cannot leave the workspace); a
symbolic link is never followed as a folder, and one whose target lies
outside the workspace is left out entirely (the API decides, via
``resolve``). Only regular files, folders and links are reported: reading a
FIFO or a device could hang or never end. ``.git`` is always skipped.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from dispatcher.errors import ToolExecutionError, WorkspaceEscapeError
from dispatcher.tools.gitignore import IgnoreRule, is_ignored, parse_gitignore
from dispatcher.workspace import WorkspaceFileAPI

IGNORE_FILE = ".gitignore"
MAX_IGNORE_FILE_BYTES = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Entry:
    """One walked path: ``rel`` is relative to the workspace root."""

    rel: str
    absolute: str
    is_dir: bool
    is_symlink: bool


def walk(
    ws: WorkspaceFileAPI,
    start: str,
    *,
    recursive: bool,
    respect_gitignore: bool,
    cancelled: Callable[[], bool] = lambda: False,
) -> Iterator[Entry]:
    """Entries below ``start`` in sorted, depth-first order (a folder comes
    before its contents). Raises ToolExecutionError if ``start`` is not a folder."""
    root = ws.resolve(start)
    if not root.exists():
        raise ToolExecutionError(f"folder {start!r} does not exist")
    if not root.is_dir():
        raise ToolExecutionError(f"{start!r} is a file, not a folder")
    start_rel = ws.relative(root)
    rules = _inherited_rules(ws, start_rel) if respect_gitignore else []
    yield from _walk_dir(ws, str(root), start_rel, rules, recursive, respect_gitignore, cancelled)


def _walk_dir(
    ws: WorkspaceFileAPI,
    absolute: str,
    rel: str,
    rules: list[IgnoreRule],
    recursive: bool,
    respect_gitignore: bool,
    cancelled: Callable[[], bool],
) -> Iterator[Entry]:
    if cancelled():
        return
    if respect_gitignore:
        rules = rules + _rules_in(absolute, "" if rel == "." else rel)
    try:
        with os.scandir(absolute) as it:
            entries = sorted(it, key=lambda e: e.name)
    except OSError:
        return  # unreadable folder: nothing to list
    for entry in entries:
        if entry.name == ".git":
            continue
        child_rel = entry.name if rel == "." else f"{rel}/{entry.name}"
        try:
            is_link = entry.is_symlink()
            is_dir = entry.is_dir(follow_symlinks=False)
            is_file = entry.is_file(follow_symlinks=False)
        except OSError:
            continue
        if is_link:
            try:
                target = ws.resolve(child_rel)
            except WorkspaceEscapeError:
                continue
            if not (target.is_file() or target.is_dir()):
                continue
        elif not (is_dir or is_file):
            continue
        if respect_gitignore and is_ignored(rules, child_rel, is_dir):
            continue
        yield Entry(child_rel, entry.path, is_dir, is_link)
        if is_dir and recursive:
            yield from _walk_dir(
                ws, entry.path, child_rel, rules, recursive, respect_gitignore, cancelled
            )


def _rules_in(folder: str, base: str) -> list[IgnoreRule]:
    path = os.path.join(folder, IGNORE_FILE)
    try:
        # lstat: an ignore file that is a link could point anywhere.
        st = os.lstat(path)
    except OSError:
        return []
    if not os.path.isfile(path) or os.path.islink(path) or st.st_size > MAX_IGNORE_FILE_BYTES:
        return []
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return parse_gitignore(fh.read(), base)
    except OSError:
        return []


def _inherited_rules(ws: WorkspaceFileAPI, start_rel: str) -> list[IgnoreRule]:
    """Rules that apply inside ``start_rel`` from the folders above it (and
    .git/info/exclude), shallowest first; the start folder's own file is
    read by the walk itself."""
    root = ws.workspace_root
    rules = _exclude_file_rules(root)
    if start_rel == ".":
        return rules
    parts = start_rel.split("/")
    for depth in range(len(parts)):
        base = "/".join(parts[:depth])
        rules += _rules_in(os.path.join(root, *parts[:depth]), base)
    return rules


def _exclude_file_rules(root: str) -> list[IgnoreRule]:
    path = os.path.join(root, ".git", "info", "exclude")
    if os.path.islink(path) or not os.path.isfile(path):
        return []
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return parse_gitignore(fh.read(1024 * 1024), "")
    except OSError:
        return []
