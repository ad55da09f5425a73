"""Run one command as its own process group: stream its output, cap what is
kept, enforce a timeout, and stop the whole group on request.

- stdin is /dev/null: commands run headless and cannot wait for input;
- stdout and stderr are read concurrently; each chunk goes to the output
  sink as it arrives (the dispatcher turns it into ``tool.output_delta``),
  up to a streaming budget, and into an OutputCapture that keeps the head and
  the tail of each stream with a marker where bytes were dropped;
- the process starts a new session, so its process group holds it and every
  descendant that did not leave on purpose; stopping sends SIGTERM to the
  group, waits up to a grace period (3 s) for the command to exit, then sends
  SIGKILL to the group;
- when the command itself exits, anything it left running in the background
  is killed too (after a short drain of the pipes): a tool call must not
  leave processes behind;
- while it runs, the group is guarded by the process's ChildReaper
  (dispatcher/reaper.py): if the server dies, even by ``kill -9``, the
  group and everything carrying the reaper's environment marker is killed.

Spawning happens on the event-loop thread (``subprocess.Popen`` called
there, as ``loop.subprocess_exec`` would): that matters for bubblewrap's
``--die-with-parent``, whose PR_SET_PDEATHSIG fires when the *thread* that
forked the sandbox exits. ProcessRunner reads the pipes with its own read
protocol and watches the exit through a pidfd (see ProcessRunner for why).
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dispatcher.elapsed import elapsed_ms
from dispatcher.reaper import child_reaper
from dispatcher.tool import OutputSink

DEFAULT_KILL_GRACE = 3.0
DRAIN_GRACE = 0.5
READ_CHUNK = 64 * 1024
# After SIGKILL, how long to wait for pipes that something outside the group holds open.
PIPE_CLOSE_TIMEOUT = 2.0


class OutputCapture:
    """Keeps the first ``limit/2`` and the last ``limit/2`` bytes of a stream."""

    def __init__(self, limit: int) -> None:
        self.head_limit = limit // 2
        self.tail_limit = limit - self.head_limit
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        room = self.head_limit - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data
            excess = len(self.tail) - self.tail_limit
            if excess > 0:
                del self.tail[:excess]

    @property
    def truncated(self) -> bool:
        return self.total > len(self.head) + len(self.tail)

    def data(self) -> bytes:
        """Every byte, when nothing was dropped (check ``truncated`` first)."""
        return bytes(self.head) + bytes(self.tail)

    def text(self) -> str:
        head = bytes(self.head).decode("utf-8", errors="replace")
        if not self.truncated:
            return head + bytes(self.tail).decode("utf-8", errors="replace")
        omitted = self.total - len(self.head) - len(self.tail)
        tail = bytes(self.tail).decode("utf-8", errors="replace")
        return f"{head}\n[... {omitted} bytes omitted ...]\n{tail}"


@dataclass(slots=True)
class ProcessResult:
    """How a run ended and what it printed."""

    exit_code: int | None
    stdout: OutputCapture
    stderr: OutputCapture
    timed_out: bool
    cancelled: bool
    background_killed: bool
    duration_ms: float
    pid: int


class _PipeReader(asyncio.Protocol):
    """One of the command's output pipes, read on the loop's own read callback
    straight into its capture and the output sink: no StreamReader buffer in
    between and no reading task per pipe."""

    def __init__(self, runner: ProcessRunner, name: str, capture: OutputCapture) -> None:
        self.runner = runner
        self.name = name
        self.capture = capture
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.transport: asyncio.BaseTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        # The transport reads up to 256 KiB at once; chunks stay at READ_CHUNK
        # so that one output_delta never carries more than a read used to.
        for start in range(0, len(data), READ_CHUNK):
            piece = data[start : start + READ_CHUNK]
            self.capture.feed(piece)
            self.runner._stream(self.name, self.decoder.decode(piece), len(piece))

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(None)

    def itself(self) -> _PipeReader:
        """The protocol factory connect_read_pipe wants."""
        return self

    def close(self) -> None:
        """Stop reading (the pipe is held open by something outside the group)."""
        if self.transport is not None:
            self.transport.close()


class ProcessRunner:
    """One command run; ``terminate()`` may be called from anywhere, any number of times.

    The exit is watched through a pidfd on the event loop (Linux 5.3+), not
    through asyncio's child watcher: on Python 3.11 that starts a thread per
    child and blocks the loop until the thread runs (about 0.5 ms per spawn
    here, more when both cores are busy, as when a turn starts 8 commands at
    once). Where pidfd_open is refused, one waiting thread per command does
    what the watcher did."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        cwd: str,
        env: Mapping[str, str],
        timeout: float,
        output_limit: int,
        stream_limit: int,
        emit: OutputSink,
        cancel_event: asyncio.Event,
        kill_grace: float = DEFAULT_KILL_GRACE,
    ) -> None:
        self.argv = list(argv)
        self.cwd = cwd
        self.env = dict(env)
        self.timeout = timeout
        self.emit = emit
        self.cancel_event = cancel_event
        self.kill_grace = kill_grace
        self.stdout = OutputCapture(output_limit)
        self.stderr = OutputCapture(output_limit)
        self.stream_limit = stream_limit
        self.streamed = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self._exited: asyncio.Future[int] | None = None
        self._readers: list[_PipeReader] = []
        self._terminating: asyncio.Task[bool] | None = None

    def _start(self, loop: asyncio.AbstractEventLoop) -> subprocess.Popen[bytes]:
        """Fork and exec, on the event-loop thread as loop.subprocess_exec
        does (see the module docstring: bubblewrap's --die-with-parent)."""
        reaper = child_reaper()
        proc = subprocess.Popen(
            self.argv,
            cwd=self.cwd,
            env=reaper.environment(self.env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            bufsize=0,
            start_new_session=True,
        )
        self.proc = proc
        # start_new_session: the pid is the group id.
        reaper.track(proc.pid)
        self._exited = loop.create_future()
        self._watch_exit(loop, proc, self._exited)
        return proc

    async def _spawn(self) -> subprocess.Popen[bytes]:
        loop = asyncio.get_running_loop()
        proc = self._start(loop)
        assert proc.stdout is not None and proc.stderr is not None
        try:
            for name, pipe, capture in (
                ("stdout", proc.stdout, self.stdout),
                ("stderr", proc.stderr, self.stderr),
            ):
                reader = _PipeReader(self, name, capture)
                await loop.connect_read_pipe(reader.itself, pipe)
                self._readers.append(reader)
        except BaseException:
            _signal_group(proc.pid, signal.SIGKILL)
            self._close()
            for pipe in (proc.stdout, proc.stderr):
                pipe.close()
            child_reaper().untrack(proc.pid)
            raise
        return proc

    @staticmethod
    def _watch_exit(
        loop: asyncio.AbstractEventLoop, proc: subprocess.Popen[bytes], exited: asyncio.Future[int]
    ) -> None:
        """Resolve ``exited`` with the return code once ``proc`` has exited
        (and is reaped), whether or not anyone still waits for it."""

        def done(code: int) -> None:
            if not exited.done():
                exited.set_result(code)

        pidfd_open = getattr(os, "pidfd_open", None)
        try:
            pidfd = pidfd_open(proc.pid) if pidfd_open is not None else -1
        except OSError:  # ENOSYS before Linux 5.3, or a seccomp filter
            pidfd = -1
        if pidfd >= 0:

            def readable() -> None:
                # The pidfd is readable once the process has exited: this reaps it.
                code = proc.poll()
                if code is None:
                    return
                loop.remove_reader(pidfd)
                os.close(pidfd)
                done(code)

            loop.add_reader(pidfd, readable)
            return

        def wait() -> None:
            code = proc.wait()
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(done, code)

        threading.Thread(target=wait, name=f"wait-{proc.pid}", daemon=True).start()

    async def run(self) -> ProcessResult:
        """Spawn, wait for the exit, a cancel or the timeout, stop the group."""
        started = time.perf_counter()
        proc = await self._spawn()
        assert self._exited is not None
        exited = self._exited
        cancelled = asyncio.ensure_future(self.cancel_event.wait())
        try:
            timed_out, was_cancelled, background_killed = await self._await_end(
                proc.pid, exited, cancelled
            )
        except asyncio.CancelledError:
            # The dispatcher's own timeout or the turn's cancellation: no grace.
            _signal_group(proc.pid, signal.SIGKILL)
            self._close()
            raise
        finally:
            cancelled.cancel()
            # Every path above has stopped the group; make sure (an unexpected
            # error may not have), then stop guarding it so a reused id is never hit.
            _signal_group(proc.pid, signal.SIGKILL)
            child_reaper().untrack(proc.pid)
        self._flush_decoders()
        self._close()
        return ProcessResult(
            exit_code=exited.result(),
            stdout=self.stdout,
            stderr=self.stderr,
            timed_out=timed_out,
            cancelled=was_cancelled,
            background_killed=background_killed,
            duration_ms=elapsed_ms(started),
            pid=proc.pid,
        )

    async def _await_end(
        self, pid: int, exited: asyncio.Future[int], cancelled: asyncio.Future[Any]
    ) -> tuple[bool, bool, bool]:
        """``(timed_out, cancelled, background_killed)`` once the command's
        group is stopped and its pipes are closed or let go."""
        pipes = [reader.closed for reader in self._readers]
        timed_out = was_cancelled = background_killed = False
        first: set[asyncio.Future[Any]] = {exited, cancelled}
        done, _ = await asyncio.wait(
            first, timeout=self.timeout, return_when=asyncio.FIRST_COMPLETED
        )
        if exited not in done:
            was_cancelled = cancelled in done
            timed_out = not was_cancelled
            await self.terminate()
        else:
            # The exit may be seen in the same loop iteration as the cancel
            # that caused it (the pidfd reports it at once): still a cancel.
            was_cancelled = cancelled in done or (
                self.cancel_event.is_set() and self._terminating is not None
            )
            # Let the pipes drain; whatever still holds them is a leftover
            # background process of the command's group. Every leftover is
            # killed; only pipe holders are reported, because killpg also
            # "reaches" members that are merely exiting (a sandbox's init).
            pending = [p for p in pipes if not p.done()]
            if pending:
                _, still = await asyncio.wait(pending, timeout=DRAIN_GRACE)
                background_killed = bool(still)
            _signal_group(pid, signal.SIGKILL)
        pending = [p for p in pipes if not p.done()]
        if pending:
            await asyncio.wait(pending, timeout=PIPE_CLOSE_TIMEOUT)
        for reader in self._readers:
            if not reader.closed.done():
                # Held open by a process that left the group (setsid): stop listening.
                reader.close()
        return timed_out, was_cancelled, background_killed

    def _close(self) -> None:
        """Release the pipes, without waiting on pipe holders. A process still
        running has been sent SIGKILL; its exit watch reaps it."""
        for reader in self._readers:
            reader.close()

    async def terminate(self) -> bool:
        """SIGTERM the group, SIGKILL it after the grace period. True if this
        call (or one it joined) stopped a running command; False when there
        was nothing left to stop."""
        proc = self.proc
        exited = self._exited
        if proc is None or exited is None:
            return False
        if self._terminating is None:
            if exited.done():
                _signal_group(proc.pid, signal.SIGKILL)
                return False
            self._terminating = asyncio.ensure_future(self._stop(proc.pid, exited))
        elif self._terminating.done():
            return False
        return await asyncio.shield(self._terminating)

    async def _stop(self, pgid: int, exited: asyncio.Future[int]) -> bool:
        _signal_group(pgid, signal.SIGTERM)
        # asyncio.wait, not a timeout around ``await exited``: a timeout would
        # cancel the shared future itself.
        await asyncio.wait({exited}, timeout=self.kill_grace)
        # Whatever is left of the group (or the command, if it ignored SIGTERM).
        _signal_group(pgid, signal.SIGKILL)
        await asyncio.wait({exited})
        return True

    # -- output -----------------------------------------------------------

    def _stream(self, name: str, text: str, size: int) -> None:
        if self.streamed >= self.stream_limit:
            return
        self.streamed += size
        if text:
            self.emit(name, text)
        if self.streamed >= self.stream_limit:
            self.emit(
                name,
                f"\n[live output stopped after {self.stream_limit} bytes; the result keeps "
                "the head and tail]\n",
            )

    def _flush_decoders(self) -> None:
        for reader in self._readers:
            rest = reader.decoder.decode(b"", final=True)
            if rest and self.streamed < self.stream_limit:
                self.emit(reader.name, rest)


@contextlib.asynccontextmanager
async def guarded_exec(
    argv: Sequence[str], *, env: Mapping[str, str], **kwargs: Any
) -> AsyncIterator[asyncio.subprocess.Process]:
    """``asyncio.create_subprocess_exec`` for a child that must die with the
    server, for callers that need what ProcessRunner does not offer (a stdin
    pipe, ``pass_fds``, their own reading of stdout): grep's rg/grep and
    search_code's regex worker.

    As ProcessRunner does: the child starts its own session (its pid is its
    group id), carries the reaper's marker in its environment and its group
    is tracked while the block runs. On leaving the block whatever is left of
    the group is killed and the group untracked, so a reused id is never hit.
    Spawns on the calling (event-loop) thread, as bubblewrap's
    ``--die-with-parent`` needs. ``kwargs`` go to create_subprocess_exec."""
    reaper = child_reaper()
    proc = await asyncio.create_subprocess_exec(
        *argv, env=reaper.environment(env), start_new_session=True, **kwargs
    )
    reaper.track(proc.pid)
    try:
        yield proc
    finally:
        _signal_group(proc.pid, signal.SIGKILL)
        reaper.untrack(proc.pid)


def _signal_group(pgid: int, sig: signal.Signals) -> bool:
    """Signal a process group; False if no process is left in it."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True
