"""WorkspaceFileAPI: the only way tools touch files.

Every path is walked component by component from a descriptor of the
workspace root, opened once: each directory is opened with ``openat`` and
``O_NOFOLLOW`` relative to the descriptor of its parent, and the final read,
write, rename, unlink, list or stat happens on a descriptor reached that way.
No path is checked and then opened again by name, so a process inside the
workspace (a sandboxed shell command) that swaps a directory or a file for a
symbolic link while a tool runs cannot make the tool read or write outside
the root: a swapped component is either refused (``O_NOFOLLOW``) or followed
under the same rules.

Rules of the walk:

- ``..`` pops the last walked component (the physical parent, as the walk
  knows it); it never goes above the root: that is a WorkspaceEscape.
- A symbolic link met on the way is followed only by walking its target under
  the same rules: a relative target from the link's own directory, an
  absolute one only when it lies inside the root's real path (then walked from
  the root). Anything else is a WorkspaceEscape (``permission_denied``).
  At most ``MAX_SYMLINK_HOPS`` links per path (dispatcher.workspace_walk;
  more: ``permission_denied``).
- Writes go to an unnamed file (O_TMPFILE) or a named temporary file in the
  target's directory, by directory descriptor, and are renamed into place with
  ``renameat``: a crash leaves either the old or the new content, never half
  of it, and (with O_TMPFILE) no partial file beside it.

``resolve`` remains for callers that need to show or validate a path (the
dispatcher's scope step, a shell's cwd, lock keys): it uses the same walk, but
its result is a name and must never be used to open anything.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from dispatcher.atomic_write import atomic_write
from dispatcher.errors import (
    ToolError,
    ToolExecutionError,
    ToolPermissionDenied,
)
from dispatcher.workspace_walk import MAYBE_LINK, Walk, open_last

DEFAULT_MAX_READ_BYTES = 16 * 1024 * 1024

_ACCESS_MODE = os.O_RDONLY | os.O_WRONLY | os.O_RDWR


# Called with the workspace-relative path a write reached; raises to refuse it.
Guard = Callable[[str], None]


class WorkspacePathNotFound(ToolExecutionError):
    """A workspace path (or one of its folders) does not exist."""


@dataclass(slots=True)
class WriteResult:
    """What a write did: the file's workspace-relative path, whether it was
    created, its size afterwards and the folders created for it (outermost
    first, workspace-relative)."""

    rel: str
    created: bool
    size: int
    made_dirs: list[str] = field(default_factory=list)


class WorkspaceFileAPI:
    """File access confined to one workspace root, by descriptor."""

    def __init__(
        self,
        workspace_root: str | os.PathLike[str],
        *,
        allow_delete: bool = False,
        max_read_bytes: int = DEFAULT_MAX_READ_BYTES,
    ) -> None:
        root = os.path.realpath(os.path.expanduser(os.fspath(workspace_root)))
        if not os.path.isdir(root):
            raise NotADirectoryError(f"workspace root is not a directory: {root}")
        self.workspace_root = root
        self.allow_delete = allow_delete
        self.max_read_bytes = max_read_bytes
        self._root_prefix = root.rstrip(os.sep) + os.sep
        # Opened once: every walk starts here, whatever the name `root` later means.
        self._root_fd = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        self._finalizer = weakref.finalize(self, os.close, self._root_fd)

    def close(self) -> None:
        """Release the root descriptor (also done when the object is collected)."""
        self._finalizer()

    # -- resolution -------------------------------------------------------

    def resolve(self, path: str) -> Path:
        """The absolute, physical path ``path`` names, or WorkspaceEscape.

        For display and validation only, never to open: the name may mean
        something else by the time it is used. Folders that do not exist are
        taken lexically (as ``realpath`` does)."""
        walk = Walk(self, path)
        try:
            try:
                name, _ = walk.settle()
                parts = [*walk.parts, name] if name is not None else list(walk.parts)
            except OSError as exc:
                if exc.errno not in (errno.ENOENT, errno.ENOTDIR, errno.EACCES):
                    raise _os_error(path, exc) from exc
                parts = walk.lexical_rest()
        finally:
            walk.close()
        return Path(self.workspace_root, *parts)

    def contains(self, real_path: str) -> bool:
        """Whether an already-resolved absolute path lies inside the root."""
        return real_path == self.workspace_root or real_path.startswith(self._root_prefix)

    def relative(self, real_path: str | os.PathLike[str]) -> str:
        """``real_path`` relative to the root, with '/' separators ('.' for the root)."""
        rel = os.path.relpath(os.fspath(real_path), self.workspace_root)
        return rel.replace(os.sep, "/")

    # -- descriptors --------------------------------------------------------

    def open_dir(self, path: str) -> int:
        """An ``O_RDONLY|O_DIRECTORY|O_CLOEXEC`` descriptor of a workspace folder,
        reached component by component (in-workspace links followed under the
        walk's rules). The caller closes it; ``os.scandir(fd)`` lists it."""
        walk = Walk(self, path)
        try:
            while True:
                name = walk.advance()
                try:
                    return os.open(
                        name or ".",
                        os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                        dir_fd=walk.fd,
                    )
                except OSError as exc:
                    if (
                        name is not None
                        and exc.errno in MAYBE_LINK
                        and walk.relook(name, want_dir=True)
                    ):
                        continue
                    if exc.errno == errno.ENOTDIR:
                        raise ToolExecutionError(f"{path!r} is not a directory") from None
                    raise
        except OSError as exc:
            raise _os_error(path, exc) from exc
        finally:
            walk.close()

    def open_file(self, path: str, flags: int = os.O_RDONLY, mode: int = 0o644) -> int:
        """A descriptor of a regular workspace file (the caller closes it).

        The last component is opened with ``O_NOFOLLOW``; a link there is
        followed only under the walk's rules. FIFOs, sockets, devices and
        folders are refused without blocking (opened ``O_NONBLOCK``, checked
        with fstat, then made blocking again). ``O_CREAT`` creates the file
        (its folder must exist)."""
        walk = Walk(self, path)
        try:
            fd = open_last(walk, path, flags | os.O_NONBLOCK, mode)
        except OSError as exc:
            raise _os_error(path, exc) from exc
        finally:
            walk.close()
        try:
            _require_regular(fd, path)
            if not flags & os.O_NONBLOCK:
                fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def lstat(self, path: str) -> os.stat_result:
        """The status of ``path`` itself (a link is not followed at the end)."""
        walk = Walk(self, path)
        try:
            name = walk.advance()
            if name is None:
                return os.stat(walk.fd)
            return os.stat(name, dir_fd=walk.fd, follow_symlinks=False)
        except OSError as exc:
            raise _os_error(path, exc) from exc
        finally:
            walk.close()

    def stat(self, path: str) -> os.stat_result:
        """The status of what ``path`` names, in-workspace links followed."""
        walk = Walk(self, path)
        try:
            _, st = walk.settle()
            if st is None:
                raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT))
            return st
        except OSError as exc:
            raise _os_error(path, exc) from exc
        finally:
            walk.close()

    # -- reading ----------------------------------------------------------

    def read_bytes(self, path: str) -> bytes:
        fd = self.open_file(path)
        return self.read_fd(fd, path)

    def read_fd(self, fd: int, path: str) -> bytes:
        """All of an open file's bytes (the read limit applies); closes ``fd``."""
        limit = self.max_read_bytes
        try:
            size = os.fstat(fd).st_size
            if size > limit:
                raise ToolExecutionError(f"{path!r} is {size} bytes; the read limit is {limit}")
            # Sized from fstat (one read for a file that does not change);
            # bounded by the limit if it grows meanwhile.
            chunks: list[bytes] = []
            total, want = 0, size + 1
            while total <= limit:
                chunk = os.read(fd, min(want, limit + 1 - total))
                if not chunk:
                    break
                chunks.append(chunk)
                total += len(chunk)
                want = max(want - len(chunk), 64 * 1024)
        except OSError as exc:
            raise _os_error(path, exc) from exc
        finally:
            os.close(fd)
        if total > limit:
            raise ToolExecutionError(f"{path!r} grew past the read limit of {limit} bytes")
        return b"".join(chunks)

    def read(self, path: str) -> str:
        data = self.read_bytes(path)
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ToolExecutionError(
                f"{path!r} is not UTF-8 text (byte {exc.start} is invalid); it may be binary"
            ) from exc

    def exists(self, path: str) -> bool:
        try:
            self.stat(path)
        except WorkspacePathNotFound:
            return False
        return True

    def list(self, path: str = ".") -> list[str]:
        """Entries of a directory, relative to the root, sorted; folders end in '/'."""
        base = self.relative(self.resolve(path))
        fd = self.open_dir(path)
        try:
            with os.scandir(fd) as it:
                entries = sorted(it, key=lambda e: e.name)
            out: list[str] = []
            for entry in entries:
                rel = entry.name if base == "." else f"{base}/{entry.name}"
                out.append(rel + "/" if entry.is_dir(follow_symlinks=False) else rel)
            return out
        except OSError as exc:
            raise _os_error(path, exc) from exc
        finally:
            os.close(fd)

    # -- writing ----------------------------------------------------------

    def write_bytes(
        self,
        path: str,
        content: bytes,
        *,
        create_parents: bool = True,
        guard: Guard | None = None,
    ) -> WriteResult:
        """Replace (or create) ``path`` with ``content``, atomically; missing
        folders are created unless ``create_parents`` is false. ``guard`` gets
        the workspace-relative path the walk reached, before anything is
        written, and may raise to refuse it (a name-based check made earlier
        could have been raced)."""
        return self._write(
            path, lambda _old: content, create_parents=create_parents, needs_old=False, guard=guard
        )

    def write(self, path: str, content: str, *, guard: Guard | None = None) -> WriteResult:
        return self.write_bytes(path, content.encode("utf-8"), guard=guard)

    def append(
        self,
        path: str,
        content: str,
        *,
        create_parents: bool = True,
        guard: Guard | None = None,
    ) -> WriteResult:
        """Add ``content`` to the end of ``path`` (created when missing), atomically."""
        extra = content.encode("utf-8")
        return self._write(
            path,
            lambda old: (old or b"") + extra,
            create_parents=create_parents,
            needs_old=True,
            guard=guard,
        )

    def delete(self, path: str, *, guard: Guard | None = None) -> None:
        if not self.allow_delete:
            raise ToolPermissionDenied("deleting files is disabled for this workspace")
        self.unlink(path, guard=guard)

    def unlink(self, path: str, *, guard: Guard | None = None) -> None:
        """Remove one file, ignoring ``allow_delete``: for undoing a file this
        process just created (apply_patch's rollback). Tools call ``delete``."""
        walk = Walk(self, path)
        try:
            name, st = walk.settle()
            if name is None:
                raise ToolPermissionDenied("the workspace root cannot be deleted")
            if st is not None and stat.S_ISDIR(st.st_mode):
                raise ToolExecutionError(f"{path!r} is a directory; only files can be deleted")
            if guard is not None:
                guard("/".join([*walk.parts, name]))
            os.unlink(name, dir_fd=walk.fd)
        except OSError as exc:
            raise _os_error(path, exc) from exc
        finally:
            walk.close()

    def rmdir(self, path: str) -> None:
        """Remove one empty folder (apply_patch's rollback of folders it made)."""
        walk = Walk(self, path)
        try:
            name = walk.advance()
            if name is None:
                raise ToolPermissionDenied("the workspace root cannot be removed")
            os.rmdir(name, dir_fd=walk.fd)
        except OSError as exc:
            raise _os_error(path, exc) from exc
        finally:
            walk.close()

    def _write(
        self,
        path: str,
        make: Callable[[bytes | None], bytes],
        *,
        create_parents: bool,
        needs_old: bool,
        guard: Guard | None,
    ) -> WriteResult:
        walk = Walk(self, path, create_dirs=create_parents)
        try:
            try:
                name, st = walk.settle()
            except FileNotFoundError:
                if not create_parents:
                    raise ToolExecutionError(
                        f"the folder of {path!r} does not exist and create_parents is false"
                    ) from None
                raise
            if name is None or (st is not None and stat.S_ISDIR(st.st_mode)):
                raise ToolExecutionError(f"{path!r} is a directory, not a file")
            rel = "/".join([*walk.parts, name])
            if guard is not None:
                guard(rel)
            old: bytes | None = None
            if st is not None:
                if not stat.S_ISREG(st.st_mode):
                    raise ToolExecutionError(
                        f"{path!r} is not a regular file (a FIFO, socket or device)"
                    )
                if needs_old:
                    old = self._read_at(walk.fd, name, path)
            content = make(old)
            mode = None if st is None else stat.S_IMODE(st.st_mode)
            atomic_write(walk.fd, name, content, mode)
            return WriteResult(rel, st is None, len(content), walk.made_dirs)
        except OSError as exc:
            raise _os_error(path, exc) from exc
        finally:
            walk.close()

    def _read_at(self, dir_fd: int, name: str, path: str) -> bytes:
        fd = os.open(
            name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd
        )
        try:
            _require_regular(fd, path)
        except BaseException:
            os.close(fd)
            raise
        return self.read_fd(fd, path)


def _require_regular(fd: int, path: str) -> None:
    st = os.fstat(fd)
    if stat.S_ISDIR(st.st_mode):
        raise ToolExecutionError(f"{path!r} is a directory, not a file")
    if not stat.S_ISREG(st.st_mode):
        raise ToolExecutionError(
            f"{path!r} is not a regular file (a FIFO, socket or device); it cannot be used"
        )


def _os_error(path: str, exc: OSError) -> ToolError:
    reason = exc.strerror or str(exc)
    if exc.errno in (errno.EACCES, errno.EPERM):
        return ToolPermissionDenied(f"{path!r}: {reason}")
    if exc.errno == errno.ELOOP:
        return ToolPermissionDenied(f"{path!r}: symlink loop (or too many links)")
    if exc.errno == errno.ENOENT:
        return WorkspacePathNotFound(f"{path!r}: {reason}")
    return ToolExecutionError(f"{path!r}: {reason}")
