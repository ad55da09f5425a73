"""Which files a search looks at, and how they are opened: the shared front
half of search_code and grep.

Files come from the descriptor walk (confined, .git skipped, .gitignore
honoured by default), filtered by a glob, capped by size and count. A file
whose first 8 KiB hold a NUL byte counts as binary and is skipped by every
search backend, so all of them see the same set of text files.

A candidate is a name, never something to open by path. ``open_candidates``
opens each one again from the workspace root, folder by folder with
``O_NOFOLLOW`` (``WorkspaceFileAPI.open_dir``, then ``openat`` of the file
relative to that folder's descriptor), and checks with ``fstat`` that it is
still a regular file within the size budget; a link the walk saw is opened by
``WorkspaceFileAPI.open_file``, which follows it only inside the workspace.
A file swapped for a link to the outside in between is therefore refused,
not read.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass, field

from dispatcher.errors import ToolError, WorkspaceEscape
from dispatcher.sandbox import SYSTEM_DIRS, Sandbox
from dispatcher.tools.search.globbing import name_or_path_match
from dispatcher.tools.search.walk import FILE_FLAGS, Walk
from dispatcher.workspace import WorkspaceFileAPI

BINARY_SNIFF_BYTES = 8192
DEFAULT_MAX_FILE_BYTES = 4 * 1024 * 1024
DEFAULT_MAX_FILES = 20_000


@dataclass(frozen=True, slots=True)
class Candidate:
    """One file to search. ``rel`` is workspace-relative; ``linked`` means the
    walk met it as an in-workspace symbolic link (opened through the
    workspace API, which follows it under its rules)."""

    rel: str
    size: int
    linked: bool = False

    @property
    def folder(self) -> str:
        head, sep, _ = self.rel.rpartition("/")
        return head if sep else "."

    @property
    def name(self) -> str:
        return self.rel.rpartition("/")[2]


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
    st: os.stat_result | None
    try:
        st = ws.stat(path)
    except WorkspaceEscape:
        raise
    except ToolError:
        st = None  # the walk below words the error
    if st is not None and stat.S_ISREG(st.st_mode):
        # A name for display and for opening again through the API.
        _consider(out, Candidate(ws.relative(ws.resolve(path)), st.st_size, True), max_file_bytes)
        return out
    with Walk(
        ws,
        path,
        recursive=recursive,
        respect_gitignore=respect_gitignore,
        sizes=True,
        cancelled=cancelled,
    ) as walk:
        start_rel = walk.start_rel
        for entry in walk:
            if entry.is_dir or entry.target_is_dir:
                continue
            sub = entry.rel if start_rel == "." else entry.rel[len(start_rel) + 1 :]
            if file_pattern not in ("*", "**") and not name_or_path_match(file_pattern, sub):
                continue
            if len(out.files) >= max_files:
                out.truncated = True
                break
            _consider(out, Candidate(entry.rel, entry.size, entry.is_symlink), max_file_bytes)
    return out


def _consider(out: CandidateSet, cand: Candidate, max_file_bytes: int) -> None:
    if cand.size > max_file_bytes:
        out.skipped[cand.rel] = f"larger than {max_file_bytes} bytes"
        return
    out.files.append(cand)


def open_candidates(
    ws: WorkspaceFileAPI, files: Iterable[tuple[int, Candidate]], max_file_bytes: int
) -> Generator[tuple[int, Candidate, int], None, None]:
    """``(index, candidate, fd)`` for each candidate that is still a regular
    file of at most ``max_file_bytes``, opened read-only as the module
    docstring says; the caller closes ``fd``. Candidates that cannot be
    opened that way are left out silently (as rg skips a vanished file).
    Consecutive files of one folder share one folder descriptor."""
    folder: str | None = None
    folder_fd = -1
    try:
        for index, cand in files:
            try:
                if cand.linked:
                    fd = ws.open_file(cand.rel, os.O_RDONLY | os.O_NONBLOCK)
                else:
                    if cand.folder != folder:
                        if folder_fd >= 0:
                            os.close(folder_fd)
                            folder_fd = -1
                        folder = cand.folder
                        folder_fd = ws.open_dir(folder)
                    elif folder_fd < 0:
                        continue  # this folder could not be opened
                    fd = os.open(cand.name, FILE_FLAGS, dir_fd=folder_fd)
            except (ToolError, OSError):
                continue
            try:
                st = os.fstat(fd)
                usable = stat.S_ISREG(st.st_mode) and st.st_size <= max_file_bytes
            except OSError:
                usable = False
            if not usable:
                os.close(fd)
                continue
            yield index, cand, fd
    finally:
        if folder_fd >= 0:
            os.close(folder_fd)


def read_fd(fd: int, limit: int) -> bytes | None:
    """Up to ``limit`` bytes of an open file, or None if it holds more (it
    grew past the budget) or cannot be read. Does not close ``fd``."""
    chunks: list[bytes] = []
    total = 0
    try:
        while total <= limit:
            chunk = os.read(fd, min(limit + 1 - total, 1024 * 1024))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
    except OSError:
        return None
    return None if total > limit else b"".join(chunks)


def read_text_files(
    opened: Iterable[tuple[int, Candidate, int]], max_bytes: int, cancelled: Callable[[], bool]
) -> Iterator[tuple[int, Candidate, bytes]]:
    """The bytes of each open file that is text and within ``max_bytes`` (the
    others are skipped, as rg and grep skip them), each descriptor closed as
    soon as it is read; ends when ``cancelled``."""
    for index, cand, fd in opened:
        try:
            data = read_fd(fd, max_bytes)
        finally:
            os.close(fd)
        if cancelled():
            return
        if data is not None and not looks_binary(data):
            yield index, cand, data


def looks_binary(head: bytes) -> bool:
    """The shared binary test: a NUL byte within the first 8 KiB."""
    return b"\x00" in head[:BINARY_SNIFF_BYTES]


def sniff_binary_fd(fd: int) -> bool:
    """Apply ``looks_binary`` to the head of an open file (by ``pread``, so
    the file offset is untouched); unreadable counts as binary."""
    try:
        return looks_binary(os.pread(fd, BINARY_SNIFF_BYTES, 0))
    except OSError:
        return True


def sandboxed_reader(sandbox: Sandbox, argv: list[str], needs: Iterable[str] = ()) -> list[str]:
    """``argv`` wrapped to run in the session's sandbox as a pure reader: the
    "system" host view (installed programs and libraries only), the workspace
    read-only, no network. ``needs``: paths the program must see that the
    system view may lack (a program or interpreter installed elsewhere, such
    as under a pyenv prefix); those outside the system folders are shown
    read-only."""
    extra = [path for path in dict.fromkeys(needs) if not _in_system_view(path)]
    return sandbox.command(argv, writable_workspace=False, host_view="system", extra_readable=extra)


def _in_system_view(path: str) -> bool:
    real = os.path.realpath(path)
    for folder in SYSTEM_DIRS:
        top = os.path.realpath(folder)
        if real == top or real.startswith(top.rstrip("/") + "/"):
            return True
    return False
