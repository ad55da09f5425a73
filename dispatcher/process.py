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

Spawning happens on the event-loop thread (``loop.subprocess_exec``): that
matters for bubblewrap's ``--die-with-parent``, whose PR_SET_PDEATHSIG fires
when the *thread* that forked the sandbox exits.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import os
import signal
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

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


class _ExitAwareProtocol(asyncio.subprocess.SubprocessStreamProtocol):
    """Stream protocol that also reports the moment the process exits.

    On Python 3.11 ``Process.wait()`` returns only once the process has exited
    *and* every pipe is closed, so a background child that inherited stdout
    would keep it waiting. ``process_exited`` fires on the exit itself."""

    def __init__(self, limit: int, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(limit=limit, loop=loop)
        self.exited = asyncio.Event()

    def process_exited(self) -> None:
        super().process_exited()
        self.exited.set()


class ProcessRunner:
    """One command run; ``terminate()`` may be called from anywhere, any number of times."""

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
        self.proc: asyncio.subprocess.Process | None = None
        self._protocol: _ExitAwareProtocol | None = None
        self._transport: asyncio.SubprocessTransport | None = None
        self._terminating: asyncio.Task[bool] | None = None
        self._decoders: dict[str, codecs.IncrementalDecoder] = {}

    async def _spawn(self) -> asyncio.subprocess.Process:
        loop = asyncio.get_running_loop()
        reaper = child_reaper()
        transport, protocol = await loop.subprocess_exec(
            lambda: _ExitAwareProtocol(limit=READ_CHUNK * 4, loop=loop),
            *self.argv,
            cwd=self.cwd,
            env=reaper.environment(self.env),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
        self._protocol = protocol
        self._transport = transport
        self.proc = asyncio.subprocess.Process(transport, protocol, loop)
        # start_new_session: the pid is the group id.
        reaper.track(self.proc.pid)
        return self.proc

    async def run(self) -> ProcessResult:
        started = time.perf_counter()
        proc = await self._spawn()
        assert self._protocol is not None
        exited_event = self._protocol.exited
        assert proc.stdout is not None and proc.stderr is not None
        readers = [
            asyncio.ensure_future(self._pump(proc.stdout, "stdout", self.stdout)),
            asyncio.ensure_future(self._pump(proc.stderr, "stderr", self.stderr)),
        ]
        exited = asyncio.ensure_future(exited_event.wait())
        cancelled = asyncio.ensure_future(self.cancel_event.wait())
        timed_out = was_cancelled = background_killed = False
        try:
            done, _ = await asyncio.wait(
                {exited, cancelled}, timeout=self.timeout, return_when=asyncio.FIRST_COMPLETED
            )
            if exited not in done:
                was_cancelled = cancelled in done
                timed_out = not was_cancelled
                await self.terminate()
            else:
                # Let the pipes drain; whatever still holds them is a leftover
                # background process of the command's group. Every leftover is
                # killed; only pipe holders are reported, because killpg also
                # "reaches" members that are merely exiting (a sandbox's init).
                _, pending = await asyncio.wait(readers, timeout=DRAIN_GRACE)
                _signal_group(proc.pid, signal.SIGKILL)
                background_killed = bool(pending)
            _, stuck = await asyncio.wait(readers, timeout=PIPE_CLOSE_TIMEOUT)
            for reader in stuck:
                # Held open by a process that left the group (setsid): stop listening.
                reader.cancel()
        except asyncio.CancelledError:
            # The dispatcher's own timeout or the turn's cancellation: no grace.
            _signal_group(proc.pid, signal.SIGKILL)
            for reader in readers:
                reader.cancel()
            self._close()
            raise
        finally:
            cancelled.cancel()
            exited.cancel()
            # Every path above has stopped the group; make sure (an unexpected
            # error may not have), then stop guarding it so a reused id is never hit.
            _signal_group(proc.pid, signal.SIGKILL)
            child_reaper().untrack(proc.pid)
        self._flush_decoders()
        self._close()
        return ProcessResult(
            exit_code=proc.returncode,
            stdout=self.stdout,
            stderr=self.stderr,
            timed_out=timed_out,
            cancelled=was_cancelled,
            background_killed=background_killed,
            duration_ms=round((time.perf_counter() - started) * 1000, 3),
            pid=proc.pid,
        )

    def _close(self) -> None:
        """Release the pipes (and reap), without waiting on pipe holders."""
        if self._transport is not None:
            self._transport.close()

    async def terminate(self) -> bool:
        """SIGTERM the group, SIGKILL it after the grace period. True if this
        call (or one it joined) stopped a running command; False when there
        was nothing left to stop."""
        proc = self.proc
        protocol = self._protocol
        if proc is None or protocol is None:
            return False
        if self._terminating is None:
            if protocol.exited.is_set():
                _signal_group(proc.pid, signal.SIGKILL)
                return False
            self._terminating = asyncio.ensure_future(self._stop(proc.pid, protocol.exited))
        elif self._terminating.done():
            return False
        return await asyncio.shield(self._terminating)

    async def _stop(self, pgid: int, exited: asyncio.Event) -> bool:
        _signal_group(pgid, signal.SIGTERM)
        try:
            async with asyncio.timeout(self.kill_grace):
                await exited.wait()
        except TimeoutError:
            pass
        # Whatever is left of the group (or the command, if it ignored SIGTERM).
        _signal_group(pgid, signal.SIGKILL)
        await exited.wait()
        return True

    # -- output -----------------------------------------------------------

    async def _pump(self, stream: asyncio.StreamReader, name: str, capture: OutputCapture) -> None:
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._decoders[name] = decoder
        while True:
            data = await stream.read(READ_CHUNK)
            if not data:
                break
            capture.feed(data)
            self._stream(name, decoder.decode(data), len(data))

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
        for name, decoder in self._decoders.items():
            rest = decoder.decode(b"", final=True)
            if rest and self.streamed < self.stream_limit:
                self.emit(name, rest)


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
