"""Dispatch overhead: a no-op tool through the full dispatcher vs the bare floor.

The floor is what any server must do per call anyway: take a semaphore slot,
enter a timeout scope, await the tool's execute and put the outcome into four
queues (standing in for event delivery). The dispatcher adds validation, the
policy, a fresh instance, a ToolContext, events and the result block.

Variants, measured in the same process and run, each once per round in turn
(interleaved: the machine's speed drifts between minutes):

- ``floor``: the bare loop above;
- ``direct``: ``await tool.execute()`` alone;
- ``dispatcher (no bus)``: the full dispatcher publishing to a null publisher;
- ``dispatcher + bus (memory)`` and ``dispatcher + bus + SQLite log``: the
  real event bus, without and with the durable log (flushed before the clock
  stops, so every event is on disk);
- the same with the loop yielding once every 64 calls: a no-op tool never
  suspends, so without a yield the bus's writer cannot run until the final
  flush and every commit is serialised after the loop; a server's loop yields
  constantly (its sockets), so there the log process commits alongside.

Throughput on one core: this process (the event loop) is pinned to one CPU
and many calls are in flight at once (``WORKERS`` tasks, each its own
session, handing over to the next after every call), with the durable log
on; the log's child process is pinned to the other CPUs, as the server's is
free to run there. Calls/s = calls / time until the last event is committed.

Also prints what validating one input costs with each validator choice.

Targets (issue 7): median overhead <= 3x the floor (the full dispatcher with
the durable log), >= 20,000 no-op dispatches/s on one core with the log on.

Run: ``.venv/bin/python -m benchmarks.dispatch_overhead [--calls N] [--json FILE]``
(or ``python -m benchmarks --only dispatch`` for the table with targets);
``--profile [--top N]`` prints a cProfile of the full pipeline with the log,
per dispatch.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import statistics
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

from jsonschema import Draft7Validator
from referencing import Registry

from benchmarks.report import Section, Target
from dispatcher import (
    AutoAllowPolicy,
    CompiledValidator,
    DispatchSession,
    EventPublisher,
    ToolContext,
    ToolDispatcher,
    ToolOutput,
    WorkspaceFileAPI,
)
from protocol.canonical import SideEffects, ToolDefinition, ToolUseBlock

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {"type": "string"},
        "limit": {"type": "integer", "minimum": 1},
        "recursive": {"type": "boolean"},
    },
    "required": ["path"],
    "additionalProperties": False,
}
INPUT = {"path": "src/main.py", "limit": 10, "recursive": False}


class NoOpTool:
    """Returns a constant; the cost measured is everything around it."""

    definition = ToolDefinition(
        name="noop",
        description="Does nothing.",
        input_schema=SCHEMA,
        side_effects=SideEffects.NONE,
    )
    _output = ToolOutput.text("ok")

    async def execute(self, input: dict[str, Any], context: ToolContext) -> ToolOutput:
        return self._output

    async def cancel(self) -> bool:
        return False


# CPU time of this process per call, per variant and round, beside the wall
# figures: on a shared machine a descheduled moment inflates wall time but
# not CPU time (the log process's CPU is not in it: compare wall for that).
_CPU: dict[str, list[float]] = {}


def _cpu_sample(label: str, cpu_started: float, n: int) -> None:
    _CPU.setdefault(label, []).append((time.process_time() - cpu_started) / n * 1e6)


# One round of a variant: runs its calls and returns microseconds per call.
RoundFn = Callable[[], Awaitable[float]]


def _timed(
    label: str,
    n: int,
    call: Callable[[int], Awaitable[object]],
    finish: Callable[[], Awaitable[None]] | None = None,
) -> RoundFn:
    """A round of ``n`` calls (then ``finish``, inside the clock): wall
    microseconds per call, and its CPU per call into ``_CPU[label]``."""

    async def one_round() -> float:
        gc.collect()
        cpu = time.process_time()
        started = time.perf_counter()
        for i in range(n):
            await call(i)
        if finish is not None:
            await finish()
        elapsed = time.perf_counter() - started
        _cpu_sample(label, cpu, n)
        return elapsed / n * 1e6

    return one_round


def _floor(n: int, ws: WorkspaceFileAPI) -> RoundFn:
    tool = NoOpTool()
    sem = asyncio.Semaphore(4)
    queues: list[asyncio.Queue[object]] = [asyncio.Queue() for _ in range(4)]
    ctx = ToolContext("s", "t", "tu", ws.workspace_root, ws)

    async def call(i: int) -> object:
        async with sem, asyncio.timeout(60):
            out = await tool.execute(INPUT, ctx)
        for q in queues:
            q.put_nowait(out)
        if i % 1024 == 0:  # keep the queues from growing without bound
            for q in queues:
                while not q.empty():
                    q.get_nowait()
        return out

    return _timed(FLOOR, n, call)


def _direct(n: int, ws: WorkspaceFileAPI) -> RoundFn:
    tool = NoOpTool()
    ctx = ToolContext("s", "t", "tu", ws.workspace_root, ws)

    async def call(i: int) -> object:
        return await tool.execute(INPUT, ctx)

    return _timed("direct execute()", n, call)


def _blocks(n: int) -> list[ToolUseBlock]:
    return [ToolUseBlock(id=f"tu_{i}", name="noop", input=INPUT) for i in range(n)]


def _through_dispatcher(
    n: int, ws: WorkspaceFileAPI, publisher: EventPublisher | None, label: str
) -> RoundFn:
    dispatcher = ToolDispatcher(publisher)
    dispatcher.register(NoOpTool)
    session = DispatchSession("bench", ws, policy=AutoAllowPolicy())
    blocks = _blocks(n)

    async def call(i: int) -> object:
        return await dispatcher.dispatch(blocks[i], session, turn_id="turn")

    return _timed(label, n, call)


@contextlib.asynccontextmanager
async def _through_bus(
    n: int,
    ws: WorkspaceFileAPI,
    log_path: Path | None,
    yield_every: int = 0,
    label: str = "",
) -> AsyncIterator[RoundFn]:
    """The full dispatcher on a real bus (and log); the clock of each round
    stops only once every event is logged (``flush``)."""
    from eventbus import EventBus, EventLog

    log = EventLog.open(log_path) if log_path else None
    bus = EventBus(log)
    await bus.start()
    try:
        dispatcher = ToolDispatcher(bus)
        dispatcher.register(NoOpTool)
        session = DispatchSession("bench", ws, policy=AutoAllowPolicy())
        blocks = _blocks(n)

        async def call(i: int) -> object:
            result = await dispatcher.dispatch(blocks[i], session, turn_id="turn")
            if yield_every and i % yield_every == yield_every - 1:
                # A server's loop yields all the time (sockets); a no-op tool
                # never does, and without this the loop would read no reply of
                # the log process until the final flush.
                await asyncio.sleep(0)
            return result

        yield _timed(label, n, call, bus.flush)
    finally:
        await bus.close()


WORKERS = 64
FLOOR = "floor (semaphore + timeout + execute + 4 queue puts)"
WITH_LOG = "dispatcher + bus + SQLite log"
YIELD_EVERY = 64
WITH_LOG_OVERLAP = "dispatcher + bus + SQLite log, loop yields every 64 calls"


@contextlib.contextmanager
def _one_core() -> Iterator[int | None]:
    """Pin this process to one CPU for the block; yields the CPU (None if it cannot)."""
    if not hasattr(os, "sched_getaffinity"):
        yield None
        return
    before = os.sched_getaffinity(0)
    cpu = min(before)
    os.sched_setaffinity(0, {cpu})
    try:
        yield cpu
    finally:
        os.sched_setaffinity(0, before)


async def _throughput(n: int, ws: WorkspaceFileAPI, log_path: Path) -> dict[str, Any]:
    """Concurrent no-op dispatches/s with the durable log, the loop on one core."""
    from eventbus import EventBus, EventLog

    all_cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set()
    with _one_core() as cpu:
        bus = EventBus(EventLog.open(log_path))
        await bus.start()
        child = bus.log_process_pid
        others = all_cpus - {cpu}
        if child is not None and others:
            os.sched_setaffinity(child, others)  # the log process is not the loop's core
        try:
            dispatcher = ToolDispatcher(bus)
            dispatcher.register(NoOpTool)
            sessions = [
                DispatchSession(f"bench-{w}", ws, policy=AutoAllowPolicy()) for w in range(WORKERS)
            ]
            per_worker = max(1, n // WORKERS)
            blocks = [
                ToolUseBlock(id=f"tu_{i}", name="noop", input=INPUT) for i in range(per_worker)
            ]

            async def worker(session: DispatchSession) -> None:
                for block in blocks:
                    await dispatcher.dispatch(block, session, turn_id="turn")
                    # Hand over to the next session, as concurrent requests would:
                    # without it the "64 in flight" would run one after another.
                    await asyncio.sleep(0)

            gc.collect()
            started = time.perf_counter()
            await asyncio.gather(*(worker(s) for s in sessions))
            await bus.flush()
            elapsed = time.perf_counter() - started
            calls = per_worker * WORKERS
            stats = bus.stats()
        finally:
            await bus.close()
    return {
        "calls": calls,
        "workers": WORKERS,
        "loop_cpu": cpu,
        "log_process_cpus": sorted(others),
        "seconds": round(elapsed, 3),
        "calls_per_s": round(calls / elapsed),
        "events_committed": stats.committed,
        "group_commits": stats.batches,
        "largest_batch": stats.largest_batch,
    }


def _validator_costs(n: int) -> dict[str, float]:
    compiled = CompiledValidator(SCHEMA)
    reused = Draft7Validator(SCHEMA, registry=Registry())
    out: dict[str, float] = {}
    for label, fn in (
        ("compiled fast path (valid input)", lambda: compiled.is_valid(INPUT)),
        ("reused Draft7Validator.is_valid", lambda: reused.is_valid(INPUT)),
        ("compiled errors() on invalid input", lambda: compiled.errors({"path": 3})),
    ):
        started = time.perf_counter()
        for _ in range(n):
            fn()
        out[label] = (time.perf_counter() - started) / n * 1e6
    return out


async def run(calls: int = 20_000, rounds: int = 5) -> dict[str, Any]:
    """Every variant once per round, in turn (the floor first each time): on a
    shared machine whose speed drifts over minutes, variants measured in
    separate stretches would compare different machines."""
    with tempfile.TemporaryDirectory() as tmp:
        ws = WorkspaceFileAPI(tmp)
        throughput = await _throughput(calls * 2, ws, Path(tmp) / "throughput.db")
        async with contextlib.AsyncExitStack() as stack:
            runners: dict[str, RoundFn] = {
                FLOOR: _floor(calls, ws),
                "direct execute()": _direct(calls, ws),
                "dispatcher, no bus": _through_dispatcher(calls, ws, None, "dispatcher, no bus"),
                "dispatcher + bus (memory)": await stack.enter_async_context(
                    _through_bus(calls, ws, None, label="dispatcher + bus (memory)")
                ),
                WITH_LOG: await stack.enter_async_context(
                    _through_bus(calls, ws, Path(tmp) / "events.db", label=WITH_LOG)
                ),
                WITH_LOG_OVERLAP: await stack.enter_async_context(
                    _through_bus(
                        calls,
                        ws,
                        Path(tmp) / "events-overlap.db",
                        yield_every=YIELD_EVERY,
                        label=WITH_LOG_OVERLAP,
                    )
                ),
            }
            variants: dict[str, list[float]] = {label: [] for label in runners}
            for _ in range(rounds):
                for label, one_round in runners.items():
                    variants[label].append(await one_round())
    medians = {k: statistics.median(v) for k, v in variants.items()}
    floor = medians[FLOOR]
    cpu = {k: statistics.median(_CPU.pop(k, [0.0])) for k in variants}
    # Each round's ratio to the floor of the same round: the spread shows how
    # much of a figure is the machine.
    spread = {
        k: (
            round(min(x / f for x, f in zip(v, variants[FLOOR], strict=True)), 2),
            round(max(x / f for x, f in zip(v, variants[FLOOR], strict=True)), 2),
        )
        for k, v in variants.items()
    }
    rows = [
        {
            "variant": k,
            "us_per_call": round(v, 2),
            "ratio_to_floor": round(v / floor, 2),
            "round_ratios": spread[k],
            "calls_per_s": round(1e6 / v),
            "cpu_us_per_call": round(cpu[k], 2),
            "cpu_ratio_to_floor": round(cpu[k] / cpu[FLOOR], 2) if cpu[FLOOR] else None,
        }
        for k, v in medians.items()
    ]
    return {
        "benchmark": "dispatch_overhead",
        "calls_per_round": calls,
        "rounds": rounds,
        "rows": rows,
        "validators_us": {k: round(v, 2) for k, v in _validator_costs(calls).items()},
        "throughput_one_core": throughput,
    }


async def section(quick: bool = False) -> Section:
    """The figures with their targets, for ``python -m benchmarks``."""
    result = await run(5_000 if quick else 20_000, 3 if quick else 5)
    rows = {row["variant"]: row for row in result["rows"]}
    out = Section("dispatch")
    floor = rows[FLOOR]["us_per_call"]
    for variant in ("dispatcher, no bus", "dispatcher + bus (memory)", WITH_LOG, WITH_LOG_OVERLAP):
        out.add(
            f"no-op dispatch, {variant}",
            rows[variant]["us_per_call"],
            "us",
            # Both durable-log variants carry the target: the strict one (the loop
            # never yields, so every commit waits for the final flush) and the one
            # whose commits overlap the loop, as they do in a server.
            target=Target.ratio_at_most(3.0) if "SQLite" in variant else Target.none(),
            baseline=floor,
            baseline_name="floor",
        )
    tput = result["throughput_one_core"]
    out.add(
        f"dispatches/s on one core, durable log, {tput['workers']} in flight",
        tput["calls_per_s"],
        "/s",
        target=Target.at_least(20_000),
        baseline=rows[FLOOR]["calls_per_s"],
        baseline_name="floor, sequential",
    )
    for label, us in result["validators_us"].items():
        out.add(f"validate: {label}", us, "us")
    out.details = result
    return out


def print_report(result: dict[str, Any]) -> None:
    print(
        f"dispatch overhead ({result['calls_per_round']} calls x {result['rounds']} rounds, median)"
    )
    print(
        f"{'variant':<60} {'us/call':>9} {'x floor':>8} {'rounds x floor':>15} {'calls/s':>9} "
        f"{'CPU us':>8} {'x floor':>8}"
    )
    for row in result["rows"]:
        low, high = row["round_ratios"]
        print(
            f"{row['variant']:<60} {row['us_per_call']:>9.2f} {row['ratio_to_floor']:>8.2f} "
            f"{f'{low:.2f}-{high:.2f}':>15} {row['calls_per_s']:>9} "
            f"{row['cpu_us_per_call']:>8.2f} {row['cpu_ratio_to_floor'] or 0:>8.2f}"
        )
    print("validation cost per call (us):")
    for label, us in result["validators_us"].items():
        print(f"  {label:<58} {us:>9.2f}")
    tput = result["throughput_one_core"]
    print(
        f"throughput, loop on one core, durable log, {tput['workers']} calls in flight: "
        f"{tput['calls_per_s']} calls/s ({tput['group_commits']} group commits)"
    )


async def _profiled(calls: int, top: int, out: Path | None) -> None:
    """cProfile of the full pipeline with the durable log (the variant with the
    target), loop yielding every 64 calls; prints the ``top`` functions by own
    time in microseconds per dispatch, so per-call costs can be compared."""
    import cProfile
    import pstats

    with tempfile.TemporaryDirectory() as tmp:
        ws = WorkspaceFileAPI(tmp)
        # Warm-up (imports, first-use caches) outside the profile.
        async with _through_bus(500, ws, Path(tmp) / "warm.db", YIELD_EVERY) as warm:
            await warm()
        async with _through_bus(calls, ws, Path(tmp) / "events.db", YIELD_EVERY) as one_round:
            cpu0 = time.process_time()
            # CPU time, not wall time: on a shared machine a descheduled moment
            # would be charged to whatever function was running.
            profile = cProfile.Profile(time.process_time)
            profile.enable()
            await one_round()
            profile.disable()
            cpu = time.process_time() - cpu0
    if out is not None:
        profile.dump_stats(out)
    stats = pstats.Stats(profile)
    entries = stats.stats  # type: ignore[attr-defined]
    rows = sorted(entries.items(), key=lambda kv: kv[1][2], reverse=True)[:top]
    print(
        f"cProfile, {calls} dispatches (bus + SQLite log, yield every {YIELD_EVERY}); "
        f"CPU {cpu / calls * 1e6:.1f} us/call under the profiler (it inflates small calls)"
    )
    by_area: dict[str, float] = {}
    for (file, _line, name), (_cc, _n, tottime, _cum, _callers) in entries.items():
        area = next(
            (
                a
                for a in ("dispatcher/", "eventbus/", "protocol/", "asyncio/", "pydantic")
                if a in file
            ),
            f"builtin {name}" if file == "~" else "other",
        )
        by_area[area] = by_area.get(area, 0.0) + tottime
    print("own CPU by area, us per dispatch:")
    for area, spent in sorted(by_area.items(), key=lambda kv: kv[1], reverse=True)[:12]:
        print(f"  {spent / calls * 1e6:8.2f}  {area}")
    print(f"{'own us/call':>11} {'cum us/call':>11} {'calls/dispatch':>14}  function")
    for (file, line, name), (_cc, ncalls, tottime, cumtime, _callers) in rows:
        where = f"{Path(file).parent.name}/{Path(file).name}:{line}" if line else file
        print(
            f"{tottime / calls * 1e6:>11.2f} {cumtime / calls * 1e6:>11.2f} "
            f"{ncalls / calls:>14.2f}  {name} ({where})"
        )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--profile", action="store_true", help="cProfile the full pipeline instead (top costs)"
    )
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--profile-out", type=Path, help="also dump the pstats file here")
    args = parser.parse_args(argv)
    if args.profile:
        asyncio.run(_profiled(args.calls, args.top, args.profile_out))
        return
    result = asyncio.run(run(args.calls, args.rounds))
    print_report(result)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
