"""Run a server module with an event-loop lag probe (and, optionally, cProfile).

``python -m benchmarks.loop_probe OUT.json MODULE [ARGS...]`` runs ``MODULE``
as ``__main__`` (``server.cli serve ...`` or ``benchmarks.turn_floor``). Every
event loop the process creates gets a ticker task: it sleeps
:data:`PERIOD` and records how late it woke up. Whatever held the loop (a
blocking call, a long callback, the GIL held by a thread) shows as lateness.
At exit the probe writes ``{"samples": [[monotonic_ns, late_ns], ...],
"ticks": n}`` to ``OUT.json``, samples being the wake-ups later than
:data:`RECORD_ABOVE_NS`; ``time.monotonic_ns()`` is one clock for every
process on Linux, so the benchmark can pick the samples inside a turn.

With ``BENCH_PROFILE=<path>`` in the environment the whole run is also
profiled with cProfile and the stats are dumped to that path. With
``BENCH_STALLS=<path>``, a watchdog thread records the main thread's stack
whenever the loop has not ticked for :data:`STALL_NS` (what held it), and
writes the stacks to that path at exit.
"""

from __future__ import annotations

import asyncio
import cProfile
import json
import os
import runpy
import signal
import sys
import threading
import time
import traceback
from typing import Any

PERIOD = 0.002
RECORD_ABOVE_NS = 200_000

STALL_NS = 40_000_000

_samples: list[tuple[int, int]] = []
_ticks = 0
_last_tick = time.monotonic_ns()
_stalls: list[str] = []
_tickers: set[asyncio.Task[None]] = set()


async def _tick() -> None:
    global _ticks, _last_tick
    period_ns = int(PERIOD * 1e9)
    while True:
        before = time.monotonic_ns()
        await asyncio.sleep(PERIOD)
        _last_tick = now = time.monotonic_ns()
        late = now - before - period_ns
        _ticks += 1
        if late > RECORD_ABOVE_NS:
            _samples.append((before, late))


def _start_ticker(loop: asyncio.AbstractEventLoop) -> None:
    task = loop.create_task(_tick(), name="loop-lag-probe")
    _tickers.add(task)
    task.add_done_callback(_tickers.discard)


class _ProbedPolicy(asyncio.DefaultEventLoopPolicy):
    """The stdlib policy; each new loop starts the ticker once it runs."""

    def new_event_loop(self) -> asyncio.AbstractEventLoop:
        loop = super().new_event_loop()
        # Only the main thread's loops: the one that serves requests.
        if threading.current_thread() is threading.main_thread():
            loop.call_soon(_start_ticker, loop)
        return loop


def _watch_stalls(main_id: int) -> None:
    """Sample the main thread's stack while its loop is stalled (once per stall)."""
    seen = 0
    while True:
        time.sleep(0.01)
        stalled = time.monotonic_ns() - _last_tick
        if stalled > STALL_NS and _ticks and seen != _last_tick:
            frame = sys._current_frames().get(main_id)
            if frame is not None:
                stack = "".join(traceback.format_stack(frame)[-25:])
                _stalls.append(f"--- stalled {stalled / 1e6:.0f} ms at {_last_tick}\n{stack}")
                seen = _last_tick


def main() -> None:
    out, module, *args = sys.argv[1:]
    # uvicorn re-raises the SIGTERM it handled once it has shut down; the default
    # action would end the process before the samples are written.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))
    asyncio.set_event_loop_policy(_ProbedPolicy())
    stalls_path = os.environ.get("BENCH_STALLS")
    if stalls_path:
        threading.Thread(target=_watch_stalls, args=(threading.get_ident(),), daemon=True).start()
    profile_path = os.environ.get("BENCH_PROFILE")
    profiler = cProfile.Profile() if profile_path else None
    sys.argv = [module, *args]
    code: Any = 0
    try:
        if profiler is not None:
            profiler.enable()
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        code = exc.code
    finally:
        if profiler is not None:
            profiler.disable()
            profiler.dump_stats(str(profile_path))
        with open(out, "w", encoding="utf-8") as fh:
            json.dump({"samples": _samples, "ticks": _ticks}, fh)
        if stalls_path:
            with open(stalls_path, "w", encoding="utf-8") as fh:
                fh.write("\n".join(_stalls))
    sys.exit(code)


if __name__ == "__main__":
    main()
