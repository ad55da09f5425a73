"""Atomic file writes by directory descriptor: the new content under a
temporary name (or none, with O_TMPFILE) in the target's directory, fsynced,
then ``renameat`` over the target. A crash leaves the old or the new
content, never half of it; ``renameat`` replaces whatever the name is then
(a link swapped in included) and never follows it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets


def atomic_write(dir_fd: int, name: str, content: bytes, mode: int | None) -> None:
    """Replace ``name`` in ``dir_fd`` with ``content`` (``mode``: its permissions)."""
    if not _write_unnamed(dir_fd, name, content, mode):
        _write_named(dir_fd, name, content, mode)


# Errors meaning "this file system (or OS) has no O_TMPFILE": use a named temp file.
_NO_TMPFILE = frozenset({errno.EOPNOTSUPP, errno.EINVAL, errno.EISDIR, errno.ENOENT})


def _write_unnamed(dir_fd: int, name: str, content: bytes, mode: int | None) -> bool:
    """Write into an unnamed file (O_TMPFILE) and give it a name only once it is
    complete: a crash while writing (kill -9 of the server) leaves nothing behind
    in the workspace, where a named temporary file would stay half-written. The
    name exists for the instant between link and rename. False when the OS or
    file system cannot do this; nothing was written then."""
    flag = getattr(os, "O_TMPFILE", None)
    if flag is None:
        return False
    try:
        fd = os.open(".", flag | os.O_WRONLY | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in _NO_TMPFILE:
            return False
        raise
    try:
        _write_all(fd, content)
        if mode is not None:
            os.fchmod(fd, mode)
        tmp = f".{name[:200]}.{secrets.token_hex(6)}.tmp"
        try:
            # A dir fd makes os.link use linkat(AT_SYMLINK_FOLLOW), which links
            # the file /proc/self/fd/N stands for (plain link() would not).
            os.link(f"/proc/self/fd/{fd}", tmp, dst_dir_fd=dir_fd)
        except FileNotFoundError:
            return False  # no /proc to name the file by
        _replace(dir_fd, tmp, name)
    finally:
        os.close(fd)
    return True


def _write_named(dir_fd: int, name: str, content: bytes, mode: int | None) -> None:
    tmp = f".{name[:200]}.{secrets.token_hex(6)}.tmp"
    fd = os.open(
        tmp,
        os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
        0o600,
        dir_fd=dir_fd,
    )
    try:
        try:
            _write_all(fd, content)
            if mode is not None:
                os.fchmod(fd, mode)
        finally:
            os.close(fd)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise
    _replace(dir_fd, tmp, name)


def _write_all(fd: int, content: bytes) -> None:
    view = memoryview(content)
    while view:
        view = view[os.write(fd, view) :]
    os.fsync(fd)


def _replace(dir_fd: int, tmp: str, name: str) -> None:
    """Rename ``tmp`` over ``name``, both in ``dir_fd``; ``tmp`` is removed on failure.
    renameat replaces whatever ``name`` is then (a link swapped in included)
    and never follows it."""
    try:
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise
