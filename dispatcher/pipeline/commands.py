"""Run one admin-configured command (a hook, a quality gate) the way every
process started on a workspace's behalf runs: ``sh -c`` in the workspace,
inside the session's sandbox when there is one, with an environment the
caller chose (never the server's own: secrets stay out), a timeout that
kills the whole process group, and output capped (head and tail kept).

Spawning goes through dispatcher/process.py's ``guarded_exec``: the child is
in its own process group, guarded by the child reaper, and whatever is left
of the group is killed when the run ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass

from dispatcher.elapsed import elapsed_ms
from dispatcher.process import OutputCapture, guarded_exec
from dispatcher.sandbox import Sandbox

DEFAULT_OUTPUT_BYTES = 16 * 1024
READ_CHUNK = 64 * 1024
# After the kill, how long to wait for pipes a stray descendant still holds.
PIPE_GRACE = 1.0


@dataclass(frozen=True, slots=True)
class CommandRun:
    """How one configured command ended."""

    exit_code: int | None
    stdout: str
    stderr: str
    timed_out: bool
    duration_ms: float


def minimal_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """A safe environment for configured commands: PATH, HOME, LANG and little
    else, taken from ``base`` (the caller's already scrubbed environment)."""
    source = os.environ if base is None else base
    env = {k: source[k] for k in ("PATH", "HOME", "USER", "LANG", "TZ") if k in source}
    env.setdefault("PATH", os.defpath)
    env.setdefault("LANG", "C.UTF-8")
    env.update({"TERM": "dumb", "NO_COLOR": "1", "PAGER": "cat", "GIT_PAGER": "cat"})
    return env


async def run_shell_command(
    command: str,
    *,
    workspace_root: str,
    sandbox: Sandbox | None,
    env: Mapping[str, str],
    time_limit: float,
    stdin: bytes = b"",
    output_limit: int = DEFAULT_OUTPUT_BYTES,
    writable_workspace: bool = True,
) -> CommandRun:
    """Run ``sh -c command`` in ``workspace_root``; raises OSError only when
    the process cannot be started at all (SandboxUnavailable when the
    sandbox refuses this workspace). ``workspace_root`` is the real
    path (as the workspace file API and the sandbox hold it).
    ``writable_workspace=False`` binds the workspace read-only in the sandbox
    (a dry-run's hooks); without a sandbox nothing can enforce it."""
    cwd = workspace_root
    argv = ["/bin/sh", "-c", command]
    if sandbox is not None:
        argv = sandbox.command(argv, cwd=cwd, writable_workspace=writable_workspace)
    out, err = OutputCapture(output_limit), OutputCapture(output_limit)
    started = time.perf_counter()
    async with guarded_exec(
        argv,
        env=env,
        cwd=cwd,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    ) as proc:
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        readers = [
            asyncio.ensure_future(_pump(proc.stdout, out)),
            asyncio.ensure_future(_pump(proc.stderr, err)),
        ]
        # Fed beside the wait: a command that never reads a large stdin must
        # not hold the run until its timeout.
        feeder = asyncio.ensure_future(_feed(proc.stdin, stdin))
        try:
            timed_out = await _wait_or_kill(proc, time_limit)
        finally:
            feeder.cancel()
            _, stuck = await asyncio.wait(readers, timeout=PIPE_GRACE)
            for reader in stuck:
                reader.cancel()
    return CommandRun(
        exit_code=None if timed_out else proc.returncode,
        stdout=out.text(),
        stderr=err.text(),
        timed_out=timed_out,
        duration_ms=elapsed_ms(started),
    )


async def _wait_or_kill(proc: asyncio.subprocess.Process, time_limit: float) -> bool:
    """Wait for ``proc`` up to ``time_limit``; past it, kill its process group
    and give it PIPE_GRACE to go. True when it timed out."""
    try:
        async with asyncio.timeout(time_limit):
            await proc.wait()
        return False
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(PIPE_GRACE):
                await proc.wait()
        return True


async def _feed(pipe: asyncio.StreamWriter, data: bytes) -> None:
    # A command that never reads its stdin must not make the write fail.
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        if data:
            pipe.write(data)
            await pipe.drain()
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        pipe.close()


async def _pump(stream: asyncio.StreamReader, capture: OutputCapture) -> None:
    while True:
        data = await stream.read(READ_CHUNK)
        if not data:
            return
        capture.feed(data)
