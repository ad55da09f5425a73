"""The walk of one workspace path, component by component, from the root
descriptor (the rules are in dispatcher/workspace.py's docstring).

``Walk`` holds the descriptor of the folder reached so far and the
components still to walk; ``WorkspaceFileAPI`` drives it and opens, reads
and writes only through the descriptors it reaches. ``components`` turns a
caller's path into those components (refusing what no file can be named),
``open_last`` opens the last one without following a link it was not told
to follow.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections import deque
from typing import TYPE_CHECKING

from dispatcher.errors import ToolExecutionError, ToolValidationFailed, WorkspaceEscape

if TYPE_CHECKING:
    from dispatcher.workspace import WorkspaceFileAPI

# The kernel's own limit for one lookup (40); a path needing more hops is a loop.
MAX_SYMLINK_HOPS = 40

# Directories on the way are opened O_PATH: no read permission is needed and
# nothing is read; the descriptor only anchors the next openat.
WALK_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# What a symlink (or a regular file) gives when opened with WALK_FLAGS, or
# O_NOFOLLOW without O_DIRECTORY: the component may be a link to follow.
MAYBE_LINK = frozenset({errno.ENOTDIR, errno.ELOOP})


class Walk:
    """One path being walked from the root descriptor.

    ``fd`` is the descriptor of the folder reached so far (the root's is
    borrowed, the others owned), ``parts`` that folder's components from the
    root, ``pending`` the components still to walk."""

    __slots__ = ("create_dirs", "fd", "hops", "made_dirs", "parts", "path", "pending", "ws")

    def __init__(self, ws: WorkspaceFileAPI, path: str, *, create_dirs: bool = False) -> None:
        self.ws = ws
        self.path = path
        self.fd = ws._root_fd
        self.parts: list[str] = []
        self.pending: deque[str] = deque(components(ws, path))
        self.hops = 0
        self.create_dirs = create_dirs
        self.made_dirs: list[str] = []

    def close(self) -> None:
        if self.fd != self.ws._root_fd:
            os.close(self.fd)
        self.fd = self.ws._root_fd

    def advance(self) -> str | None:
        """Walk every component but the last; return the last one's name, or
        None when the path names the folder ``fd`` itself."""
        while self.pending:
            comp = self.pending.popleft()
            if comp == "..":
                self._up()
            elif not self.pending:
                return comp
            else:
                self._descend(comp)
        return None

    def settle(self) -> tuple[str | None, os.stat_result | None]:
        """Like advance, then follow the last component while it is a link:
        (name in ``fd``, its status or None when it does not exist)."""
        while True:
            name = self.advance()
            if name is None:
                return None, os.stat(self.fd)
            try:
                st = os.stat(name, dir_fd=self.fd, follow_symlinks=False)
            except FileNotFoundError:
                return name, None
            if not stat.S_ISLNK(st.st_mode):
                return name, st
            if not self.follow(name):
                self.pending.appendleft(name)  # it changed under us: look again

    def follow(self, name: str) -> bool:
        """If ``name`` in the current folder is a symlink, put its target's
        components in its place (False: it is not a link)."""
        self.hops += 1
        if self.hops > MAX_SYMLINK_HOPS:
            raise OSError(errno.ELOOP, os.strerror(errno.ELOOP))
        try:
            target = os.readlink(name, dir_fd=self.fd)
        except OSError as exc:
            if exc.errno in (errno.EINVAL, errno.ENOENT):
                return False
            raise
        if target.startswith("/"):
            if not self.ws.contains(target):
                raise WorkspaceEscape(
                    f"path {self.path!r} escapes the workspace root "
                    f"(the link {'/'.join([*self.parts, name])!r} points outside it)"
                )
            # Walked from the root again, so '..' in it cannot climb above it.
            self.close()
            self.parts = []
            target = target[len(self.ws.workspace_root) :]
        self.pending.extendleft(reversed([c for c in target.split("/") if c not in ("", ".")]))
        return True

    def relook(self, name: str, *, want_dir: bool) -> bool:
        """``name`` (just popped) failed with ENOTDIR/ELOOP under O_NOFOLLOW.
        True when the walk should go on: it is a link (its target now queued
        in its place) or it changed under us (it is queued again, to look
        anew; ``follow`` counts every look, so a swapping process cannot keep
        us here). False: the error stands (a file where a folder was wanted)."""
        if self.follow(name):
            return True
        try:
            mode: int | None = os.stat(name, dir_fd=self.fd, follow_symlinks=False).st_mode
        except FileNotFoundError:
            mode = None
        if mode is None or stat.S_ISLNK(mode) or stat.S_ISDIR(mode) or not want_dir:
            self.pending.appendleft(name)
            return True
        return False

    def lexical_rest(self) -> list[str]:
        """The components of the path taken lexically from where the walk stopped."""
        parts = list(self.parts)
        for comp in self.pending:
            if comp == "..":
                if not parts:
                    raise WorkspaceEscape(f"path {self.path!r} escapes the workspace root")
                parts.pop()
            else:
                parts.append(comp)
        return parts

    def _descend(self, comp: str) -> None:
        for _ in range(MAX_SYMLINK_HOPS):
            try:
                fd = os.open(comp, WALK_FLAGS, dir_fd=self.fd)
            except FileNotFoundError:
                if not self.create_dirs:
                    self.pending.appendleft(comp)  # lexical_rest still needs it
                    raise
                with contextlib.suppress(FileExistsError):
                    os.mkdir(comp, 0o777, dir_fd=self.fd)
                    self.made_dirs.append("/".join([*self.parts, comp]))
                continue
            except OSError as exc:
                if exc.errno in MAYBE_LINK and self.relook(comp, want_dir=True):
                    return
                if exc.errno == errno.ENOTDIR:
                    self.pending.appendleft(comp)
                raise
            self.close()
            self.fd = fd
            self.parts.append(comp)
            return
        raise OSError(errno.ELOOP, os.strerror(errno.ELOOP))

    def _up(self) -> None:
        if not self.parts:
            raise WorkspaceEscape(f"path {self.path!r} escapes the workspace root")
        # Walk down again from the root rather than opening '..': the parent
        # is then the one this walk came through, not wherever the folder is now.
        names = self.parts[:-1]
        self.close()
        self.parts = []
        for comp in names:
            fd = os.open(comp, WALK_FLAGS, dir_fd=self.fd)
            self.close()
            self.fd = fd
            self.parts.append(comp)


def components(ws: WorkspaceFileAPI, path: str) -> list[str]:
    """The components of ``path`` relative to the root (not yet walked)."""
    if not isinstance(path, str):
        raise WorkspaceEscape(f"path must be a string, got {type(path).__name__}")
    if "\x00" in path:
        raise WorkspaceEscape(f"path {path!r} contains a NUL byte")
    check_name(path)
    expanded = os.path.expanduser(path) if path.startswith("~") else path
    if expanded.startswith("/"):
        if ws.contains(expanded):
            expanded = expanded[len(ws.workspace_root) :]
        else:
            # Another name for the root (a link to it): only the name is
            # resolved here; the walk from the root descriptor still decides.
            real = os.path.realpath(expanded)
            if not ws.contains(real):
                raise WorkspaceEscape(f"path {path!r} escapes the workspace root")
            expanded = real[len(ws.workspace_root) :]
    return [c for c in expanded.split("/") if c not in ("", ".")]


def open_last(walk: Walk, path: str, flags: int, mode: int) -> int:
    """Open the walk's last component with ``flags`` (+O_NOFOLLOW, following
    an in-workspace link under the walk's rules)."""
    while True:
        name = walk.advance()
        try:
            return os.open(name or ".", flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=walk.fd)
        except OSError as exc:
            if name is not None and exc.errno == errno.ELOOP and walk.relook(name, want_dir=False):
                continue
            if name is None and exc.errno == errno.EISDIR:
                raise ToolExecutionError(f"{path!r} is a directory, not a file") from None
            raise


# Linux limits: a longer name or path fails in the OS with ENAMETOOLONG deep
# inside some tool; checked up front, the caller learns what is wrong instead.
NAME_MAX = 255
PATH_MAX = 4096


def check_name(path: str) -> None:
    """Refuse paths no file can have: text that is not valid Unicode (a lone
    surrogate that is not an undecodable byte of a real file name) and names
    or paths over the OS's length limits."""
    try:
        encoded = os.fsencode(path)
    except UnicodeEncodeError:
        raise ToolValidationFailed(
            f"path {path!r} is not a valid file name: it holds a lone surrogate"
        ) from None
    if len(encoded) >= PATH_MAX:
        raise ToolValidationFailed(f"path is {len(encoded)} bytes long; the limit is {PATH_MAX}")
    longest = max(encoded.split(b"/"), key=len)
    if len(longest) > NAME_MAX:
        raise ToolValidationFailed(
            f"path {path[:80]!r}... has a name of {len(longest)} bytes; the limit is {NAME_MAX}"
        )
