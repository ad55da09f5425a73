"""What the operator's observer (server.observer: metrics, tool-call log lines,
traces) costs the event loop.

Run: ``.venv/bin/python benchmarks/observer_overhead.py [--calls N] [--rounds R]``

A real EventBus with a file log (the child-process writer, as the server runs
it) receives the events of N tool calls, each shaped like a real one (turn
started, assistant message with the tool_use, tool.called, two output deltas,
tool.completed, tool message, turn completed: 8 events per call), published
in bursts of 100 calls, then flushed. It times the loop's CPU time
(``time.process_time`` of this process: the log's commits happen in the
child) for: no observer; the observer with metrics only; with metrics and the
tool-call log lines (to /dev/null); and with traces too (an in-memory
exporter). Each configuration runs R times, alternating; it prints the median
per event and per call and the difference to no observer. It asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from eventbus import EventBus, EventLog
from server.logs import CALLS_LOGGER
from server.observer import Observer

EVENTS_PER_CALL = 8


def _publish_call(bus: EventBus, n: int) -> None:
    sid = f"ses_{n % 10}"
    tid = f"turn_{n}"
    use_id = f"tu_{n}"
    tool_use = {"type": "tool_use", "id": use_id, "name": "read_file", "input": {"path": "a.txt"}}
    bus.publish("turn.started", {"source": "tool_uses", "number": n}, session_id=sid, turn_id=tid)
    bus.publish(
        "message.completed",
        {"message": {"role": "assistant", "content": [tool_use]}},
        session_id=sid,
        turn_id=tid,
    )
    bus.publish(
        "tool.called",
        {
            "tool_use_id": use_id,
            "tool_name": "read_file",
            "side_effects": "read",
            "input": {"path": "a.txt"},
            "rating": None,
        },
        session_id=sid,
        turn_id=tid,
    )
    for _ in range(2):
        bus.publish(
            "tool.output_delta",
            {"tool_use_id": use_id, "stream": "stdout", "text": "x" * 200},
            session_id=sid,
            turn_id=tid,
        )
    content = [{"type": "text", "text": "y" * 400}]
    bus.publish(
        "tool.completed",
        {
            "tool_use_id": use_id,
            "tool_name": "read_file",
            "duration_ms": 0.3,
            "content": content,
            "files_modified": None,
            "command_executed": None,
            "metadata": {},
        },
        session_id=sid,
        turn_id=tid,
    )
    result = {"type": "tool_result", "tool_use_id": use_id, "content": content, "is_error": False}
    bus.publish(
        "message.completed",
        {"message": {"role": "tool", "content": [result]}},
        session_id=sid,
        turn_id=tid,
    )
    bus.publish("turn.completed", {"usage": None}, session_id=sid, turn_id=tid)


async def _run(mode: str, calls: int, tmp: Path) -> float:
    """CPU seconds of this process to publish, commit and observe ``calls`` calls."""
    calls_log = logging.getLogger(CALLS_LOGGER)
    calls_log.handlers.clear()
    calls_log.propagate = False
    if mode in ("metrics+log", "metrics+log+traces"):
        handler = logging.FileHandler("/dev/null")
        calls_log.addHandler(handler)
        calls_log.setLevel(logging.INFO)
    else:
        calls_log.setLevel(logging.WARNING)
    log = await asyncio.to_thread(EventLog.open, tmp / f"{mode}-{time.monotonic_ns()}.db")
    bus = EventBus(log)
    await bus.start()
    observer: Observer | None = None
    if mode != "none":
        observer = Observer()
        if mode == "metrics+log+traces":
            from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
                InMemorySpanExporter,
            )

            exporter = InMemorySpanExporter()
            observer.span_exporter_factory = lambda: exporter
        await observer.start(bus)
    started = time.process_time()
    for burst in range(0, calls, 100):
        for n in range(burst, min(calls, burst + 100)):
            _publish_call(bus, n)
        await asyncio.sleep(0)  # let the writer and the observer run, as a server would
    await bus.flush()
    await bus.close()
    if observer is not None:
        await observer.stop()
    elapsed = time.process_time() - started
    await asyncio.to_thread(log.close)
    return elapsed


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    modes = ["none", "metrics", "metrics+log", "metrics+log+traces"]
    times: dict[str, list[float]] = {m: [] for m in modes}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.rounds):
            for mode in modes:
                times[mode].append(await _run(mode, args.calls, Path(tmp)))
    events = args.calls * EVENTS_PER_CALL
    base = statistics.median(times["none"])
    print(f"{args.calls} calls, {events} events, median of {args.rounds} rounds (CPU time)")
    for mode in modes:
        med = statistics.median(times[mode])
        extra = med - base
        print(
            f"  {mode:20s} {med * 1e6 / events:6.2f} us/event  {med * 1e6 / args.calls:7.1f} "
            f"us/call   observer: {extra * 1e6 / events:+6.2f} us/event "
            f"{extra * 1e6 / args.calls:+7.1f} us/call"
        )


if __name__ == "__main__":
    asyncio.run(main())
