"""Walk a workspace folder for the listing and search tools, by descriptor.

The start folder is opened through ``WorkspaceFileAPI.open_dir`` (component by
component from the root, in-workspace links followed under its rules). Below
it the walk never uses a path again: each folder is listed with
``os.scandir(fd)`` and a child folder is entered with ``openat(parent_fd,
name, O_DIRECTORY | O_NOFOLLOW)``. A process that swaps a folder for a
symbolic link between the listing and the descent therefore makes the open
fail (the folder is then left out); it can never lead the walk outside the
workspace. ``.gitignore`` files are read the same way, relative to their
folder's descriptor.

A symbolic link is never entered as a folder. It is reported when its target,
resolved by the workspace API under the same rules, is a regular file or a
folder inside the workspace; one that leads outside is left out entirely.
Only regular files, folders and such links are reported: reading a FIFO or a
device could hang or never end. ``.git`` is always skipped.

Descriptors held: one per folder level of the current branch (depth first),
capped at ``MAX_DEPTH`` levels; each is closed when its folder is done, and
all of them when the walk ends or is abandoned.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from dispatcher.errors import ToolError, ToolExecutionError, WorkspaceEscape
from dispatcher.tools.search.gitignore import IgnoreRule, is_ignored, parse_gitignore
from dispatcher.workspace import WorkspaceFileAPI, WorkspacePathNotFound

IGNORE_FILE = ".gitignore"
MAX_IGNORE_FILE_BYTES = 1024 * 1024
# Folder levels below the start folder the walk enters (one descriptor each).
MAX_DEPTH = 128
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: a FIFO swapped in for a file must not block the open.
FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


@dataclass(frozen=True, slots=True)
class Entry:
    """One walked path. ``rel`` is relative to the workspace root; ``is_dir``
    means a real folder (never a link); for a link, ``target_is_dir`` says
    whether it leads to a folder. ``size`` is the file's size (of the link's
    target for a link) when the walk was asked for sizes, else -1."""

    rel: str
    is_dir: bool
    is_symlink: bool
    target_is_dir: bool = False
    size: int = -1


@dataclass(slots=True)
class _Level:
    fd: int
    rel: str
    rules: list[IgnoreRule]
    entries: list[os.DirEntry[str]] = field(default_factory=list)
    pos: int = 0


class Walk:
    """A depth-first walk below one folder. Construction opens the start
    folder (so a bad start fails at once); iterate once, then ``close`` (or
    use it as a context manager; an abandoned walk closes its descriptors
    when collected)."""

    def __init__(
        self,
        ws: WorkspaceFileAPI,
        start: str,
        *,
        recursive: bool,
        respect_gitignore: bool,
        sizes: bool = False,
        cancelled: Callable[[], bool] = lambda: False,
    ) -> None:
        self.ws = ws
        self.recursive = recursive
        self.respect_gitignore = respect_gitignore
        self.sizes = sizes
        self.cancelled = cancelled
        self._stack: list[_Level] = []
        fd = open_start_folder(ws, start)
        try:
            # The start's physical place: what the descriptor is, not what
            # the name means now (labels only; all I/O stays on descriptors).
            self.start_rel = folder_rel(ws, fd, start)
            rules = inherited_rules(ws, self.start_rel) if respect_gitignore else []
            self._push(fd, self.start_rel, rules)
        except BaseException:
            os.close(fd)
            raise

    def __enter__(self) -> Walk:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()

    def close(self) -> None:
        """Close every descriptor the walk still holds."""
        while self._stack:
            with contextlib.suppress(OSError):
                os.close(self._stack.pop().fd)

    def __iter__(self) -> Iterator[Entry]:
        """Entries in sorted, depth-first order (a folder before its contents)."""
        try:
            while self._stack:
                if self.cancelled():
                    return
                level = self._stack[-1]
                if level.pos >= len(level.entries):
                    os.close(self._stack.pop().fd)
                    continue
                dirent = level.entries[level.pos]
                level.pos += 1
                found = self._entry(level, dirent)
                if found is None:
                    continue
                yield found
                if found.is_dir and self.recursive and len(self._stack) <= MAX_DEPTH:
                    try:
                        child = os.open(dirent.name, DIR_FLAGS, dir_fd=level.fd)
                    except OSError:
                        # Swapped for a link or a file since the listing, or
                        # gone: not entered. O_NOFOLLOW is the whole point.
                        continue
                    self._push(child, found.rel, level.rules)
        finally:
            self.close()

    def _push(self, fd: int, rel: str, inherited: list[IgnoreRule]) -> None:
        level = _Level(fd, rel, inherited)
        # On the stack first: from here on close() owns the descriptor.
        self._stack.append(level)
        if self.respect_gitignore:
            level.rules = inherited + rules_at(fd, "" if rel == "." else rel)
        try:
            with os.scandir(fd) as it:
                level.entries = sorted(it, key=lambda e: e.name)
        except OSError:
            level.entries = []  # unreadable folder: nothing to list

    def _entry(self, level: _Level, dirent: os.DirEntry[str]) -> Entry | None:
        if dirent.name == ".git":
            return None
        rel = dirent.name if level.rel == "." else f"{level.rel}/{dirent.name}"
        try:
            is_link = dirent.is_symlink()
            is_dir = dirent.is_dir(follow_symlinks=False)
            is_file = dirent.is_file(follow_symlinks=False)
        except OSError:
            return None
        size = -1
        target_is_dir = False
        if is_link:
            is_dir = is_file = False
            try:
                # Resolved by the workspace API under the walk-from-root rules;
                # a link leading outside raises and is left out.
                st = self.ws.stat(rel)
            except (ToolError, OSError):
                return None
            if stat.S_ISDIR(st.st_mode):
                target_is_dir = True
            elif stat.S_ISREG(st.st_mode):
                size = st.st_size
            else:
                return None
        elif is_file:
            if self.sizes:
                try:
                    # fstatat relative to the folder's descriptor, link not followed.
                    st = dirent.stat(follow_symlinks=False)
                except OSError:
                    return None
                if not stat.S_ISREG(st.st_mode):
                    return None
                size = st.st_size
        elif not is_dir:
            return None
        if self.respect_gitignore and is_ignored(level.rules, rel, is_dir):
            return None
        return Entry(rel, is_dir, is_link, target_is_dir, size)


def walk(
    ws: WorkspaceFileAPI,
    start: str,
    *,
    recursive: bool,
    respect_gitignore: bool,
    sizes: bool = False,
    cancelled: Callable[[], bool] = lambda: False,
) -> Iterator[Entry]:
    """Entries below ``start``, as ``Walk`` yields them. The start folder is
    checked when the first entry is asked for; raises ToolExecutionError if
    it is not a folder, WorkspaceEscape if it lies outside."""
    with Walk(
        ws,
        start,
        recursive=recursive,
        respect_gitignore=respect_gitignore,
        sizes=sizes,
        cancelled=cancelled,
    ) as w:
        yield from w


def open_start_folder(ws: WorkspaceFileAPI, start: str) -> int:
    """``ws.open_dir(start)`` with the listing tools' error messages."""
    try:
        return ws.open_dir(start)
    except WorkspaceEscape:
        raise
    except WorkspacePathNotFound:
        raise ToolExecutionError(f"folder {start!r} does not exist") from None
    except ToolExecutionError:
        # Only to word the error: the stat below opens nothing.
        try:
            st = ws.stat(start)
        except ToolError:
            raise ToolExecutionError(f"{start!r} is not a folder") from None
        if stat.S_ISREG(st.st_mode):
            raise ToolExecutionError(f"{start!r} is a file, not a folder") from None
        raise ToolExecutionError(f"{start!r} is not a folder") from None


def folder_rel(ws: WorkspaceFileAPI, fd: int, start: str) -> str:
    """The workspace-relative path of the folder ``fd`` is open on, read from
    the descriptor itself (/proc), so it names what was opened even if the
    name ``start`` has changed meaning since."""
    try:
        real = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        real = str(ws.resolve(start))  # no /proc: the walk's own name for it
    if not ws.contains(real):
        raise WorkspaceEscape(f"folder {start!r} is no longer inside the workspace")
    return ws.relative(real)


def read_small_file(dir_fd: int, name: str, limit: int) -> bytes | None:
    """The content of regular file ``name`` in folder ``dir_fd`` (not followed
    if it is a link), or None if it is not a regular file, is larger than
    ``limit`` or cannot be read."""
    try:
        fd = os.open(name, FILE_FLAGS, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
            return None
        data = os.read(fd, limit + 1)
        return data if len(data) <= limit else None
    except OSError:
        return None
    finally:
        os.close(fd)


def rules_at(dir_fd: int, base: str) -> list[IgnoreRule]:
    """The rules of the ``.gitignore`` in folder ``dir_fd`` (workspace-relative ``base``)."""
    data = read_small_file(dir_fd, IGNORE_FILE, MAX_IGNORE_FILE_BYTES)
    if data is None:
        return []
    return parse_gitignore(data.decode("utf-8", errors="replace"), base)


def inherited_rules(ws: WorkspaceFileAPI, start_rel: str) -> list[IgnoreRule]:
    """Rules that apply inside ``start_rel`` from ``.git/info/exclude`` and the
    folders above it, shallowest first; the start folder's own file is read
    by the walk itself. Every folder is reached from the root descriptor with
    O_NOFOLLOW; a folder that cannot be reached that way adds no rules."""
    fd = ws.open_dir(".")
    try:
        rules = _exclude_file_rules(fd)
        if start_rel == ".":
            return rules
        parts = start_rel.split("/")
        for depth, part in enumerate(parts):
            rules += rules_at(fd, "/".join(parts[:depth]))
            if depth == len(parts) - 1:
                break
            try:
                child = os.open(part, DIR_FLAGS, dir_fd=fd)
            except OSError:
                break
            os.close(fd)
            fd = child
        return rules
    finally:
        os.close(fd)


def _exclude_file_rules(root_fd: int) -> list[IgnoreRule]:
    fds: list[int] = []
    try:
        fd = root_fd
        for part in (".git", "info"):
            fd = os.open(part, DIR_FLAGS, dir_fd=fd)
            fds.append(fd)
        data = read_small_file(fd, "exclude", MAX_IGNORE_FILE_BYTES)
    except OSError:
        return []
    finally:
        for held in fds:
            os.close(held)
    return parse_gitignore(data.decode("utf-8", errors="replace"), "") if data else []
