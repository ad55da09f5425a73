"""Dispatch overhead: a no-op tool through the full dispatcher vs the bare floor.

The floor is what any server must do per call anyway: take a semaphore slot,
enter a timeout scope, await the tool's execute and put the outcome into four
queues (standing in for event delivery). The dispatcher adds validation, the
policy, a fresh instance, a ToolContext, events and the result block.

Variants, measured in the same process and run:

- ``floor``: the bare loop above;
- ``direct``: ``await tool.execute()`` alone;
- ``dispatcher (no bus)``: the full dispatcher publishing to a null publisher;
- ``dispatcher + bus (memory)`` and ``dispatcher + bus + SQLite log``: the
  real event bus, without and with the durable log (flushed before the clock
  stops, so every event is on disk).

Also prints what validating one input costs with each validator choice.

Run: ``.venv/bin/python -m benchmarks.dispatch_overhead [--calls N] [--json FILE]``
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from jsonschema import Draft7Validator
from referencing import Registry

from adapters.canonical import SideEffects, ToolDefinition, ToolUseBlock
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


async def _time_calls(call: Callable[[int], Awaitable[object]], n: int, rounds: int) -> list[float]:
    """Per-call microseconds for each round (median of rounds is reported)."""
    samples = []
    for _ in range(rounds):
        gc.collect()
        started = time.perf_counter()
        for i in range(n):
            await call(i)
        samples.append((time.perf_counter() - started) / n * 1e6)
    return samples


async def _floor(n: int, rounds: int, ws: WorkspaceFileAPI) -> list[float]:
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

    return await _time_calls(call, n, rounds)


async def _direct(n: int, rounds: int, ws: WorkspaceFileAPI) -> list[float]:
    tool = NoOpTool()
    ctx = ToolContext("s", "t", "tu", ws.workspace_root, ws)

    async def call(i: int) -> object:
        return await tool.execute(INPUT, ctx)

    return await _time_calls(call, n, rounds)


async def _through_dispatcher(
    n: int, rounds: int, ws: WorkspaceFileAPI, publisher: EventPublisher | None
) -> list[float]:
    dispatcher = ToolDispatcher(publisher)
    dispatcher.register(NoOpTool)
    session = DispatchSession("bench", ws, policy=AutoAllowPolicy())
    blocks = [ToolUseBlock(id=f"tu_{i}", name="noop", input=INPUT) for i in range(n)]

    async def call(i: int) -> object:
        return await dispatcher.dispatch(blocks[i], session, turn_id="turn")

    return await _time_calls(call, n, rounds)


async def _through_bus(
    n: int, rounds: int, ws: WorkspaceFileAPI, log_path: Path | None
) -> list[float]:
    from eventbus import EventBus, EventLog

    log = EventLog.open(log_path) if log_path else None
    bus = EventBus(log)
    await bus.start()
    try:
        dispatcher = ToolDispatcher(bus)
        dispatcher.register(NoOpTool)
        session = DispatchSession("bench", ws, policy=AutoAllowPolicy())
        blocks = [ToolUseBlock(id=f"tu_{i}", name="noop", input=INPUT) for i in range(n)]
        samples = []
        for _ in range(rounds):
            gc.collect()
            started = time.perf_counter()
            for block in blocks:
                await dispatcher.dispatch(block, session, turn_id="turn")
            await bus.flush()  # the clock stops only once every event is logged
            samples.append((time.perf_counter() - started) / n * 1e6)
        return samples
    finally:
        await bus.close()


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
    with tempfile.TemporaryDirectory() as tmp:
        ws = WorkspaceFileAPI(tmp)
        variants: dict[str, list[float]] = {
            "floor (semaphore + timeout + execute + 4 queue puts)": await _floor(calls, rounds, ws),
            "direct execute()": await _direct(calls, rounds, ws),
            "dispatcher, no bus": await _through_dispatcher(calls, rounds, ws, None),
            "dispatcher + bus (memory)": await _through_bus(calls, rounds, ws, None),
            "dispatcher + bus + SQLite log": await _through_bus(
                calls, rounds, ws, Path(tmp) / "events.db"
            ),
        }
    medians = {k: statistics.median(v) for k, v in variants.items()}
    floor = medians["floor (semaphore + timeout + execute + 4 queue puts)"]
    rows = [
        {
            "variant": k,
            "us_per_call": round(v, 2),
            "ratio_to_floor": round(v / floor, 2),
            "calls_per_s": round(1e6 / v),
        }
        for k, v in medians.items()
    ]
    return {
        "benchmark": "dispatch_overhead",
        "calls_per_round": calls,
        "rounds": rounds,
        "rows": rows,
        "validators_us": {k: round(v, 2) for k, v in _validator_costs(calls).items()},
        "targets": {"median overhead <= 3x floor": None, ">= 20000 dispatches/s with log": None},
    }


def print_report(result: dict[str, Any]) -> None:
    print(
        f"dispatch overhead ({result['calls_per_round']} calls x {result['rounds']} rounds, median)"
    )
    print(f"{'variant':<55} {'us/call':>9} {'x floor':>8} {'calls/s':>9}")
    for row in result["rows"]:
        print(
            f"{row['variant']:<55} {row['us_per_call']:>9.2f} {row['ratio_to_floor']:>8.2f} "
            f"{row['calls_per_s']:>9}"
        )
    print("validation cost per call (us):")
    for label, us in result["validators_us"].items():
        print(f"  {label:<53} {us:>9.2f}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    result = asyncio.run(run(args.calls, args.rounds))
    print_report(result)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
