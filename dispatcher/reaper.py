"""Nothing the server starts outlives it, ``kill -9`` included.

Sandboxed processes already die with the server: bubblewrap's
``--die-with-parent`` kills the sandbox's init when the server dies, and the
PID namespace takes every process inside with it. Unsandboxed ones (the
shell with the sandbox off, anything a tool starts on the host) need help:
``PR_SET_PDEATHSIG`` on the direct child does not reach the background
children it leaves (``sleep 1000 & wait``), and a per-command guard process
(a group leader that kills its group when the server dies) costs a Python
start-up, about 8 ms, on every spawn.

So one watchdog per server process (``reaper_watch.py``, started once,
in its own session) holds the read end of a pipe whose only writer is the
server. Every command is started with ``TOOLRELAY_REAPER=<marker>`` in its
environment, and ``ChildReaper.track(pgid)`` / ``untrack(pgid)`` keep the
watchdog's list of live process groups current: two ``write(2)`` calls of a
few bytes per command. When the server dies its descriptors close, the
watchdog reads end-of-file and kills every listed group and every process
carrying the marker (see reaper_watch.py for the details and the limits).

End-of-file rather than ``PR_SET_PDEATHSIG``: it fires when the whole
process is gone (PDEATHSIG fires when the *thread* that forked exits), and
it needs no ctypes in the watchdog. The write end is close-on-exec, so no
child holds it open.

If the watchdog itself dies, the next ``track`` notices (``EPIPE``) and
starts a new one with the groups still live.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import secrets
import subprocess
import sys
import threading
from collections.abc import Mapping
from pathlib import Path

log = logging.getLogger("toolrelay.reaper")

MARKER_VAR = "TOOLRELAY_REAPER"
WATCH_SCRIPT = str(Path(__file__).resolve().with_name("reaper_watch.py"))


class ChildReaper:
    """One watchdog process and the process groups it guards. Thread-safe;
    ``track``/``untrack`` never block (the pipe is non-blocking)."""

    def __init__(self) -> None:
        self.marker = secrets.token_hex(12)
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._fd: int | None = None
        self._groups: set[int] = set()

    @property
    def watchdog_pid(self) -> int | None:
        proc = self._proc
        return proc.pid if proc is not None and proc.poll() is None else None

    def environment(self, env: Mapping[str, str]) -> dict[str, str]:
        """``env`` plus the marker, set last so a caller's value cannot replace it."""
        return {**env, MARKER_VAR: self.marker}

    def start(self) -> None:
        """Start the watchdog if it is not running (idempotent)."""
        with self._lock:
            self._ensure_started()

    def track(self, pgid: int) -> None:
        """The process group ``pgid`` (a command and its descendants) must die with the server."""
        with self._lock:
            self._groups.add(pgid)
            self._send(f"+{pgid}\n")

    def untrack(self, pgid: int) -> None:
        """The group is finished (already killed): forget it, so a reused id is never hit."""
        with self._lock:
            self._groups.discard(pgid)
            self._send(f"-{pgid}\n")

    def close(self) -> None:
        """Close the pipe as a dying server would: the watchdog kills what is
        left and exits. For tests and orderly shutdown; start() makes a new one."""
        with self._lock:
            self._close_pipe()
            proc, self._proc = self._proc, None
        if proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(10)

    # -- internals (called with the lock held) ------------------------------

    def _ensure_started(self) -> None:
        if self._proc is not None and self._proc.poll() is None and self._fd is not None:
            return
        self._close_pipe()
        read_end, write_end = os.pipe()  # both close-on-exec (PEP 446)
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-I", "-S", WATCH_SCRIPT, self.marker],
                stdin=read_end,
                stdout=subprocess.DEVNULL,
                # Its own session: a terminal's Ctrl-C or a signal sent to the
                # server's process group does not reach it.
                start_new_session=True,
                env={"PATH": os.defpath},
            )
        except OSError:
            os.close(write_end)
            raise
        finally:
            os.close(read_end)
        os.set_blocking(write_end, False)
        self._fd = write_end
        # One line per write: writes up to PIPE_BUF bytes are atomic, so a
        # full pipe refuses a line whole (EAGAIN) instead of cutting it.
        for pgid in sorted(self._groups):
            self._send(f"+{pgid}\n", retry=False)

    def _send(self, line: str, *, retry: bool = True) -> None:
        try:
            self._ensure_started()
            assert self._fd is not None
            os.write(self._fd, line.encode())
        except BrokenPipeError:
            # The watchdog died: start a new one, which gets every live group.
            log.warning("the child watchdog exited; starting a new one")
            self._close_pipe()
            if retry:
                self._send("", retry=False)
        except OSError as exc:
            if exc.errno == errno.EAGAIN:
                # 64 KiB of unread lines: the watchdog is stuck. Never block the
                # event loop for it; the environment marker still covers the child.
                log.warning("the child watchdog is not reading; group list not updated")
            else:
                log.error("cannot reach the child watchdog: %s", exc)

    def _close_pipe(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None


_reaper: ChildReaper | None = None
_reaper_lock = threading.Lock()


def child_reaper() -> ChildReaper:
    """This process's reaper (one per process: every server, tool and test shares it)."""
    global _reaper
    with _reaper_lock:
        if _reaper is None:
            _reaper = ChildReaper()
        return _reaper
