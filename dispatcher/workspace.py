"""WorkspaceFileAPI: the only way tools touch files.

Every path is resolved physically (symlinks followed, ``..`` collapsed after
each link) and must land on the workspace root or below it; anything else is a
WorkspaceEscapeError (``permission_denied``). Writes go to a temporary file in
the same directory and are renamed into place, so a crash leaves either the
old or the new content, never half of it; on Linux the temporary file has no
name until it is complete (O_TMPFILE), so a crash leaves no partial file beside
it either.

Known limit: a process that swaps a checked directory for a symlink between
the check and the open (a race only an ``execute`` tool could run) is not
stopped here; the shell sandbox is the defence for that.
"""

from __future__ import annotations

import contextlib
import difflib
import errno
import os
import secrets
import stat
import tempfile
from pathlib import Path

from dispatcher.errors import (
    ToolExecutionError,
    ToolPermissionDenied,
    ToolValidationError,
    WorkspaceEscapeError,
)

DEFAULT_MAX_READ_BYTES = 16 * 1024 * 1024


class WorkspaceFileAPI:
    """File access confined to one workspace root."""

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

    # -- resolution -------------------------------------------------------

    def resolve(self, path: str) -> Path:
        """The absolute, physical path for ``path``, or WorkspaceEscapeError."""
        if not isinstance(path, str):
            raise WorkspaceEscapeError(f"path must be a string, got {type(path).__name__}")
        if "\x00" in path:
            raise WorkspaceEscapeError(f"path {path!r} contains a NUL byte")
        _check_name(path)
        expanded = path if not path.startswith("~") else os.path.expanduser(path)
        candidate = os.path.join(self.workspace_root, expanded or ".")
        real = os.path.realpath(candidate)
        if not self.contains(real):
            raise WorkspaceEscapeError(f"path {path!r} escapes the workspace root")
        return Path(real)

    def contains(self, real_path: str) -> bool:
        """Whether an already-resolved absolute path lies inside the root."""
        return real_path == self.workspace_root or real_path.startswith(self._root_prefix)

    def relative(self, real_path: str | os.PathLike[str]) -> str:
        """``real_path`` relative to the root, with '/' separators ('.' for the root)."""
        rel = os.path.relpath(os.fspath(real_path), self.workspace_root)
        return rel.replace(os.sep, "/")

    # -- reading ----------------------------------------------------------

    def read_bytes(self, path: str) -> bytes:
        target = self.resolve(path)
        try:
            st = target.stat()
            if stat.S_ISDIR(st.st_mode):
                raise ToolExecutionError(f"{path!r} is a directory, not a file")
            if st.st_size > self.max_read_bytes:
                raise ToolExecutionError(
                    f"{path!r} is {st.st_size} bytes; the read limit is {self.max_read_bytes}"
                )
            return target.read_bytes()
        except OSError as exc:
            raise _os_error(path, exc) from exc

    def read(self, path: str) -> str:
        data = self.read_bytes(path)
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ToolExecutionError(
                f"{path!r} is not UTF-8 text (byte {exc.start} is invalid); it may be binary"
            ) from exc

    def exists(self, path: str) -> bool:
        return self.resolve(path).exists()

    def list(self, path: str = ".") -> list[str]:
        """Entries of a directory, relative to the root, sorted; folders end in '/'."""
        target = self.resolve(path)
        try:
            entries = sorted(os.scandir(target), key=lambda e: e.name)
        except OSError as exc:
            raise _os_error(path, exc) from exc
        out: list[str] = []
        for entry in entries:
            rel = self.relative(os.path.join(target, entry.name))
            out.append(rel + "/" if entry.is_dir(follow_symlinks=False) else rel)
        return out

    # -- writing ----------------------------------------------------------

    def write_bytes(self, path: str, content: bytes) -> None:
        target = self.resolve(path)
        if target.is_dir():
            raise ToolExecutionError(f"{path!r} is a directory, not a file")
        try:
            self._mkdirs(target.parent)
            _atomic_write(target, content)
        except OSError as exc:
            raise _os_error(path, exc) from exc

    def write(self, path: str, content: str) -> None:
        self.write_bytes(path, content.encode("utf-8"))

    def append(self, path: str, content: str) -> None:
        target = self.resolve(path)
        existing = self.read_bytes(path) if target.exists() else b""
        self.write_bytes(path, existing + content.encode("utf-8"))

    def delete(self, path: str) -> None:
        if not self.allow_delete:
            raise ToolPermissionDenied("deleting files is disabled for this workspace")
        target = self.resolve(path)
        if str(target) == self.workspace_root:
            raise ToolPermissionDenied("the workspace root cannot be deleted")
        try:
            if target.is_dir():
                raise ToolExecutionError(f"{path!r} is a directory; only files can be deleted")
            target.unlink()
        except OSError as exc:
            raise _os_error(path, exc) from exc

    def patch(self, path: str, old: str, new: str) -> str:
        """Replace the one occurrence of ``old`` with ``new``; returns the unified diff."""
        if not old:
            raise ToolExecutionError("old_str must not be empty")
        text = self.read(path)
        count = text.count(old)
        if count == 0:
            raise ToolExecutionError(f"old_str not found in {path!r}")
        if count > 1:
            lines = _match_lines(text, old)
            raise ToolExecutionError(
                f"old_str is not unique in {path!r}: {count} matches, at lines "
                + ", ".join(str(n) for n in lines)
            )
        updated = text.replace(old, new, 1)
        self.write(path, updated)
        return unified_diff(self.relative(self.resolve(path)), text, updated)

    def _mkdirs(self, directory: Path) -> None:
        # Re-check after creating: a parent may have been a dangling symlink.
        directory.mkdir(parents=True, exist_ok=True)
        if not self.contains(os.path.realpath(directory)):
            raise WorkspaceEscapeError(f"directory {directory} escapes the workspace root")


# Linux limits: a longer name or path fails in the OS with ENAMETOOLONG deep
# inside some tool; checked up front, the caller learns what is wrong instead.
NAME_MAX = 255
PATH_MAX = 4096


def _check_name(path: str) -> None:
    """Refuse paths no file can have: text that is not valid Unicode (a lone
    surrogate that is not an undecodable byte of a real file name) and names
    or paths over the OS's length limits."""
    try:
        encoded = os.fsencode(path)
    except UnicodeEncodeError:
        raise ToolValidationError(
            f"path {path!r} is not a valid file name: it holds a lone surrogate"
        ) from None
    if len(encoded) >= PATH_MAX:
        raise ToolValidationError(f"path is {len(encoded)} bytes long; the limit is {PATH_MAX}")
    longest = max(encoded.split(b"/"), key=len)
    if len(longest) > NAME_MAX:
        raise ToolValidationError(
            f"path {path[:80]!r}... has a name of {len(longest)} bytes; the limit is {NAME_MAX}"
        )


def unified_diff(rel_path: str, before: str, after: str) -> str:
    """A git-style unified diff of one file's change."""
    return "".join(
        difflib.unified_diff(
            before.splitlines(keepends=True),
            after.splitlines(keepends=True),
            fromfile=f"a/{rel_path}",
            tofile=f"b/{rel_path}",
        )
    )


def _match_lines(text: str, needle: str) -> list[int]:
    lines: list[int] = []
    start = text.find(needle)
    while start != -1:
        lines.append(text.count("\n", 0, start) + 1)
        start = text.find(needle, start + 1)
    return lines


def _atomic_write(target: Path, content: bytes) -> None:
    mode: int | None = None
    with contextlib.suppress(FileNotFoundError):
        mode = stat.S_IMODE(target.stat().st_mode)
    if not _write_unnamed(target, content, mode):
        _write_named(target, content, mode)


# Errors meaning "this file system (or OS) has no O_TMPFILE": use a named temp file.
_NO_TMPFILE = frozenset({errno.EOPNOTSUPP, errno.EINVAL, errno.EISDIR, errno.ENOENT})


def _write_unnamed(target: Path, content: bytes, mode: int | None) -> bool:
    """Write into an unnamed file (O_TMPFILE) and give it a name only once it is
    complete: a crash while writing (kill -9 of the server) leaves nothing behind
    in the workspace, where a named temporary file would stay half-written. The
    name exists for the instant between link and rename. False when the OS or
    file system cannot do this; nothing was written then."""
    flag = getattr(os, "O_TMPFILE", None)
    if flag is None:
        return False
    dir_fd = os.open(target.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        try:
            fd = os.open(".", flag | os.O_WRONLY | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno in _NO_TMPFILE:
                return False
            raise
        try:
            with os.fdopen(fd, "wb", closefd=False) as fh:
                fh.write(content)
                fh.flush()
                os.fsync(fh.fileno())
            if mode is not None:
                os.fchmod(fd, mode)
            tmp = str(target.parent / f".{target.name}.{secrets.token_hex(6)}.tmp")
            try:
                # A dir fd makes os.link use linkat(AT_SYMLINK_FOLLOW), which links
                # the file /proc/self/fd/N stands for (plain link() would not).
                os.link(f"/proc/self/fd/{fd}", tmp, dst_dir_fd=dir_fd)
            except FileNotFoundError:
                return False  # no /proc to name the file by
            try:
                os.replace(tmp, target)
            except BaseException:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)
                raise
        finally:
            os.close(fd)
    finally:
        os.close(dir_fd)
    return True


def _write_named(target: Path, content: bytes, mode: int | None) -> None:
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(content)
            fh.flush()
            os.fsync(fh.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _os_error(path: str, exc: OSError) -> ToolExecutionError | ToolPermissionDenied:
    reason = exc.strerror or str(exc)
    if exc.errno in (errno.EACCES, errno.EPERM):
        return ToolPermissionDenied(f"{path!r}: {reason}")
    if exc.errno == errno.ELOOP:
        return ToolPermissionDenied(f"{path!r}: symlink loop")
    return ToolExecutionError(f"{path!r}: {reason}")
