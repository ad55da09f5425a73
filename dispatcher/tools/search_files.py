"""Which files a search looks at: the shared front half of search_code and grep.

Files come from the workspace walk (confined, .git skipped, .gitignore
honoured by default), filtered by a glob, capped by size and count. A file
whose first 8 KiB hold a NUL byte counts as binary and is skipped by every
search backend, so all of them see the same set of text files.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field

from dispatcher.tools.globbing import name_or_path_match
from dispatcher.tools.walk import walk
from dispatcher.workspace import WorkspaceFileAPI

BINARY_SNIFF_BYTES = 8192
DEFAULT_MAX_FILE_BYTES = 4 * 1024 * 1024
DEFAULT_MAX_FILES = 20_000


@dataclass(frozen=True, slots=True)
class Candidate:
    """One file to search: workspace-relative and physical (resolved) paths."""

    rel: str
    real: str
    size: int


@dataclass(slots=True)
class CandidateSet:
    """The files to search, and what was left out and why."""

    files: list[Candidate] = field(default_factory=list)
    # rel -> why it was not searched (too large)
    skipped: dict[str, str] = field(default_factory=dict)
    # The walk stopped at max_files.
    truncated: bool = False


def gather_candidates(
    ws: WorkspaceFileAPI,
    path: str,
    file_pattern: str,
    *,
    recursive: bool = True,
    respect_gitignore: bool = True,
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
    max_files: int = DEFAULT_MAX_FILES,
    cancelled: Callable[[], bool] = lambda: False,
) -> CandidateSet:
    """The files below ``path`` (or ``path`` itself, if it is a file) to search."""
    out = CandidateSet()
    target = ws.resolve(path)
    if target.is_file():
        _consider(out, ws.relative(target), str(target), max_file_bytes)
        return out
    start_rel = ws.relative(target)
    for entry in walk(
        ws, path, recursive=recursive, respect_gitignore=respect_gitignore, cancelled=cancelled
    ):
        if entry.is_dir:
            continue
        real = str(ws.resolve(entry.rel)) if entry.is_symlink else entry.absolute
        if not os.path.isfile(real):
            continue
        sub = entry.rel if start_rel == "." else entry.rel[len(start_rel) + 1 :]
        if file_pattern not in ("*", "**") and not name_or_path_match(file_pattern, sub):
            continue
        if len(out.files) >= max_files:
            out.truncated = True
            break
        _consider(out, entry.rel, real, max_file_bytes)
    return out


def _consider(out: CandidateSet, rel: str, real: str, max_file_bytes: int) -> None:
    try:
        size = os.stat(real).st_size
    except OSError:
        return
    if size > max_file_bytes:
        out.skipped[rel] = f"larger than {max_file_bytes} bytes"
        return
    out.files.append(Candidate(rel, real, size))


def looks_binary(head: bytes) -> bool:
    """The shared binary test: a NUL byte within the first 8 KiB."""
    return b"\x00" in head[:BINARY_SNIFF_BYTES]


def sniff_binary(real: str) -> bool:
    """Read the head of an already-confined file and apply ``looks_binary``."""
    try:
        with open(real, "rb") as fh:
            return looks_binary(fh.read(BINARY_SNIFF_BYTES))
    except OSError:
        return True
