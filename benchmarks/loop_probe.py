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
profiled with cProfile and the stats are dumped to that path.
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
from typing import Any

PERIOD = 0.002
RECORD_ABOVE_NS = 200_000

_samples: list[tuple[int, int]] = []
_ticks = 0
_tickers: set[asyncio.Task[None]] = set()


async def _tick() -> None:
    global _ticks
    period_ns = int(PERIOD * 1e9)
    while True:
        before = time.monotonic_ns()
        await asyncio.sleep(PERIOD)
        late = time.monotonic_ns() - before - period_ns
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


def main() -> None:
    out, module, *args = sys.argv[1:]
    # uvicorn re-raises the SIGTERM it handled once it has shut down; the default
    # action would end the process before the samples are written.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))
    asyncio.set_event_loop_policy(_ProbedPolicy())
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
    sys.exit(code)


if __name__ == "__main__":
    main()
