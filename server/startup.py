"""What ``toolrelay serve`` secures before it creates anything: the listening
socket and the data dir, locked for this process alone.

The order is the point. The port is bound first (binding creates no file),
so a start that fails on a port in use leaves nothing behind. The data dir
is then created if missing and locked with an exclusive ``flock`` on its
``lock`` file before anything else is written there (the token, the
databases): a second server on the same data dir stops at once with the
pid of the first, instead of both writing the same event log. A start that
fails after this point removes what it created (``DataDirLock.release``
with ``cleanup=True``).

The sandbox is decided in the same spirit (``sandbox_files``,
``unasked_runners``, used by the services' start): what the configuration
would run on a workspace's behalf without asking (hooks, quality gates,
stdio MCP servers) must not start unsandboxed unless the admin chose that
with ``workspaces.shell.sandbox: false``; otherwise start-up stops with one
line (exit code 2, a configuration error).

The lock belongs to the open file description: it is released when the
process ends, however it ends (kill -9 included), so a stale lock file never
blocks a restart. The file is never deleted (deleting a flock'ed file lets a
third process lock a new file of the same name while the second still holds
the old one).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import socket
from collections.abc import Mapping
from pathlib import Path

from dispatcher.mcp.config import McpServerConfig
from dispatcher.pipeline.guardrails import GuardrailConfig
from dispatcher.pipeline.hooks import HooksConfig
from dispatcher.sandbox_files import WorkspaceGlobs
from server.config import ShellSection

LOCK_FILE = "lock"


class StartupFailed(Exception):
    """The server cannot start; the message is the one line printed on stderr."""


def bind_listener(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` (not yet listening; uvicorn does that).

    Raises StartupFailed naming the address (e.g. the port is in use)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on accepted sockets whose
    # proto says TCP. Without it Nagle holds each small write (a WebSocket event,
    # a response body) until the peer's delayed ACK, ~40 ms (issue 16).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        # As uvicorn does: a restart may rebind while old connections sit in TIME_WAIT.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        shown = f"[{host}]" if ":" in host else host
        why = "the port is in use" if exc.errno == errno.EADDRINUSE else exc.strerror or str(exc)
        raise StartupFailed(f"cannot listen on {shown}:{port}: {why}") from None
    sock.set_inheritable(False)
    return sock


class DataDirLock:
    """An exclusive lock on a data dir, held while the process lives."""

    def __init__(self, data_dir: Path, fd: int, created: list[Path], new_file: bool) -> None:
        self.data_dir = data_dir
        self._fd: int | None = fd
        self._created = created  # directories this start created, outermost first
        self._new_file = new_file  # this start created the lock file

    @property
    def created(self) -> list[Path]:
        """The directories this start created (empty if the data dir existed)."""
        return list(self._created)

    @classmethod
    def acquire(cls, data_dir: Path) -> DataDirLock:
        """Create the data dir if needed and lock it.

        Raises StartupFailed: the path is not a usable directory, or another
        process holds the lock (``data dir <path> is in use by pid <n>``).
        Nothing is left behind on failure."""
        created = _make_dirs(data_dir)
        path = data_dir / LOCK_FILE
        new_file = not path.exists()
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            _remove_dirs(created)
            raise StartupFailed(
                f"cannot use data dir {data_dir}: {exc.strerror or exc} ({path})"
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = _read_pid(fd)
            os.close(fd)
            if new_file:  # lost a race for a brand-new data dir: leave nothing behind
                with contextlib.suppress(OSError):
                    os.unlink(path)
                _remove_dirs(created)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                who = f"pid {holder}" if holder else "another process"
                raise StartupFailed(f"data dir {data_dir} is in use by {who}") from None
            raise StartupFailed(f"cannot lock data dir {data_dir}: {exc.strerror}") from None
        try:
            # Who holds it, for the next one's message (read under no lock: best effort).
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError:
            pass  # a full disk must not stop the start here; the pid is only a hint
        return cls(data_dir, fd, created, new_file)

    def release(self, *, cleanup: bool = False) -> None:
        """Unlock. ``cleanup``: also remove what this start created (a failed
        start leaves nothing behind): the lock file and any directory it made."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        if cleanup and self._new_file:
            with contextlib.suppress(OSError):
                os.unlink(self.data_dir / LOCK_FILE)
        os.close(fd)
        if cleanup:
            _remove_dirs(self._created)


def sandbox_files(guardrails: GuardrailConfig, shell: ShellSection) -> WorkspaceGlobs:
    """The workspace globs every sandbox mounts read-only (the guardrails'
    ``protected_files``) or hides (``workspaces.shell.sandbox_hide_files``)."""
    return WorkspaceGlobs(
        read_only=tuple(guardrails.protected_files),
        hidden=tuple(shell.sandbox_hide_files),
    )


def unasked_runners(
    hooks: HooksConfig,
    guardrails: GuardrailConfig,
    mcp_servers: Mapping[str, McpServerConfig],
) -> list[str]:
    """The config keys of what runs workspace content with nobody asked:
    hooks, quality gates and stdio MCP servers."""
    found: list[str] = []
    if hooks.configured:
        found.append("hooks")
    if guardrails.quality_gates:
        found.append("guardrails.quality_gates")
    found += [f"mcp_servers.{name}" for name, server in mcp_servers.items() if server.command]
    return found


def _make_dirs(data_dir: Path) -> list[Path]:
    """mkdir -p, remembering which directories did not exist (outermost first)."""
    missing: list[Path] = []
    probe = data_dir
    while not probe.exists() and not probe.is_symlink():
        missing.append(probe)
        if probe.parent == probe:
            break
        probe = probe.parent
    if probe.exists() and not probe.is_dir():
        raise StartupFailed(f"cannot use data dir {data_dir}: {probe} is not a directory")
    missing.reverse()
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        _remove_dirs(missing)
        raise StartupFailed(f"cannot create data dir {data_dir}: {exc.strerror or exc}") from None
    if not os.access(data_dir, os.W_OK | os.X_OK):
        _remove_dirs(missing)
        raise StartupFailed(f"cannot use data dir {data_dir}: it is not writable")
    return missing


def _remove_dirs(created: list[Path]) -> None:
    for directory in reversed(created):
        with contextlib.suppress(OSError):
            directory.rmdir()  # only if empty: never anything someone else put there


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None
