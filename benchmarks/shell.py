"""Shell: ``true`` through the shell tool vs a bare asyncio subprocess.

Variants, in one process and run, interleaved in rounds so that changes in
the machine's load hit them alike; each the median (and p99) over its calls:

- bare: ``asyncio.create_subprocess_exec("bash", "-c", "true")`` with piped
  output, awaited to the end (what the tool must do at the least);
- bare + bwrap: the same inside the sandbox's bubblewrap command line;
- tool: the full dispatcher (bus with the durable log) running the ``shell``
  tool, sandbox off and on;
- the bare spawn and the tool again with a 200 MiB ballast in this process,
  since the cost of spawning can grow with the parent's size (fork copies
  page tables; the stdlib uses vfork/posix_spawn where it can);
- under uvloop, if it is importable (it is not a dependency; uvloop's spawn
  is documented as several times slower here and growing with process size).

The issue sets no numeric target: the figures are reported with their ratio.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import importlib
import importlib.util
import shutil
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

from benchmarks.report import Section, percentile
from dispatcher import AutoAllowPolicy, DispatchSession, ToolDispatcher, WorkspaceFileAPI
from dispatcher.sandbox import Sandbox, SandboxConfig, hidden_paths
from dispatcher.tools.shell.tool import ShellTool
from protocol.canonical import ToolUseBlock
from server.config import ShellSection

BALLAST_MIB = 200
SPAWN_TIMEOUT = 30.0  # seconds; `true` takes milliseconds


async def _times_ms(call: Callable[[int], Awaitable[None]], n: int) -> list[float]:
    samples = []
    gc.collect()
    for i in range(n):
        started = time.perf_counter()
        await call(i)
        samples.append((time.perf_counter() - started) * 1000)
    return samples


async def _bare(argv: list[str], n: int) -> list[float]:
    async def call(i: int) -> None:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        await asyncio.wait_for(proc.communicate(), SPAWN_TIMEOUT)
        if proc.returncode != 0:
            raise RuntimeError(f"{argv} exited with {proc.returncode}")

    return await _times_ms(call, n)


def _find_bwrap() -> str | None:
    return shutil.which("bwrap")


def _sandbox(root: str) -> Sandbox:
    """The sandbox a session on ``root`` gets, the default credential folders hidden."""
    bwrap = _find_bwrap()
    assert bwrap is not None
    return Sandbox(SandboxConfig(bwrap, hidden_paths(ShellSection().sandbox_hide)), root)


async def _tool(root: str, n: int, *, sandbox: bool) -> list[float]:
    from eventbus import EventBus, EventLog

    bus = EventBus(EventLog.open(Path(root) / f"events-{sandbox}.db"))
    await bus.start()
    try:
        dispatcher = ToolDispatcher(bus)
        dispatcher.register(ShellTool)
        session = DispatchSession(
            "bench",
            WorkspaceFileAPI(root),
            policy=AutoAllowPolicy(),
            sandbox=_sandbox(root) if sandbox else None,
        )

        async def call(i: int) -> None:
            block = ToolUseBlock(id=f"sh{i}", name="shell", input={"command": "true"})
            result = await dispatcher.dispatch(block, session, turn_id="turn")
            if result.is_error:
                raise RuntimeError(f"shell true failed: {result.content}")

        samples = await _times_ms(call, n)
        await bus.flush()
        return samples
    finally:
        await bus.close()


@contextlib.contextmanager
def _ballast(mib: int) -> Iterator[None]:
    """Grow this process by ``mib`` MiB of touched memory for the block."""
    block = bytearray(mib * 1024 * 1024)
    for i in range(0, len(block), 4096):
        block[i] = 1  # touch every page so it is really resident
    try:
        yield
    finally:
        del block
        gc.collect()


def _run_in_loop(factory: Callable[[], Coroutine[Any, Any, list[float]]], uvloop: bool) -> Any:
    if not uvloop:
        return asyncio.run(factory())
    # Optional and not a dependency: imported by name, only when installed.
    uv = importlib.import_module("uvloop")
    with asyncio.Runner(loop_factory=uv.new_event_loop) as runner:
        return runner.run(factory())


def _measure_all(n: int, rounds: int, root: str, uvloop: bool) -> dict[str, list[float]]:
    """Every variant, interleaved: ``rounds`` rounds of ``n // rounds`` calls each,
    so a change in the machine's load hits all variants alike."""
    bash = ["/bin/bash", "-c", "true"]
    has_bwrap = _find_bwrap() is not None
    per_round = max(1, n // rounds)
    out: dict[str, list[float]] = {}
    suffix = " [uvloop]" if uvloop else ""

    def measure(label: str, factory: Callable[[], Coroutine[Any, Any, list[float]]]) -> None:
        out.setdefault(label + suffix, []).extend(_run_in_loop(factory, uvloop))

    for _ in range(rounds):
        measure("bare asyncio subprocess", lambda: _bare(bash, per_round))
        measure("shell tool, sandbox off", lambda: _tool(root, per_round, sandbox=False))
        if has_bwrap:
            sandboxed = _sandbox(root).command(bash)
            measure(
                "bare asyncio subprocess in bwrap",
                lambda argv=sandboxed: _bare(argv, per_round),  # type: ignore[misc]
            )
            measure("shell tool, sandbox on", lambda: _tool(root, per_round, sandbox=True))
        with _ballast(BALLAST_MIB):
            measure(f"bare asyncio subprocess, +{BALLAST_MIB} MiB", lambda: _bare(bash, per_round))
            measure(
                f"shell tool, sandbox off, +{BALLAST_MIB} MiB",
                lambda: _tool(root, per_round, sandbox=False),
            )
    return out


def _baseline_of(label: str) -> str | None:
    """What each variant is compared with: the bare spawn it wraps; a uvloop
    variant with the same variant on the stdlib loop."""
    if label.endswith(" [uvloop]"):
        return label.removesuffix(" [uvloop]")
    ballast = f", +{BALLAST_MIB} MiB"
    table = {
        "shell tool, sandbox off": "bare asyncio subprocess",
        "bare asyncio subprocess in bwrap": "bare asyncio subprocess",
        "shell tool, sandbox on": "bare asyncio subprocess in bwrap",
        f"bare asyncio subprocess{ballast}": "bare asyncio subprocess",
        f"shell tool, sandbox off{ballast}": f"bare asyncio subprocess{ballast}",
    }
    return table.get(label)


def _uvloop_available() -> bool:
    return importlib.util.find_spec("uvloop") is not None


async def run(quick: bool = False) -> Section:
    # The loops below need their own event loops (asyncio and uvloop), so the
    # measuring runs in a worker thread, away from the caller's running loop.
    return await asyncio.to_thread(_run_sync, quick)


def _run_sync(quick: bool) -> Section:
    n = 60 if quick else 300
    rounds = 3 if quick else 5
    section = Section("shell")
    with tempfile.TemporaryDirectory(prefix="toolrelay-bench-") as tmp:
        root = str(Path(tmp).resolve())
        samples = _measure_all(n, rounds, root, uvloop=False)
        uvloop = _uvloop_available()
        if uvloop:
            samples.update(_measure_all(n, rounds, root, uvloop=True))
    medians = {k: statistics.median(v) for k, v in samples.items()}
    for label, median in medians.items():
        base_label = _baseline_of(label)
        section.add(
            f"`true`: {label} (median)",
            median,
            "ms",
            baseline=medians.get(base_label) if base_label else None,
            baseline_name=base_label,
        )
    section.details = {
        "calls_per_variant": n,
        "uvloop": "measured" if uvloop else "not importable (not a dependency): not measured",
        "bwrap": _find_bwrap() or "not installed: sandbox variants not measured",
        "ms": {
            k: {
                "p50": round(statistics.median(v), 3),
                "p99": round(percentile(v, 99), 3),
                "mean": round(statistics.fmean(v), 3),
            }
            for k, v in samples.items()
        },
    }
    return section
