"""Publish -> subscriber lag through the durable log, on a busy event loop.

``python -m benchmarks.commit_lag [--events N] [--busy K] [--work-us U]``

One process, the real ``EventBus`` with a file log (its child process), one
session subscriber, and ``K`` busy tasks that each burn ``U`` microseconds
of CPU per step and then yield: every loop iteration then costs about
``K * U`` microseconds, as a server's loop does while it serves turns and
sockets. A publisher publishes one event every 2 ms (bursts of 1-3 events)
and the subscriber records ``monotonic_ns`` at receipt minus the stamp taken
just before ``publish``. The figures are the lag's p50/p90/p99 and the loop
iterations an event waited (the busy tasks count the iterations), which is
what the commit path's design changes: on a busy loop every hop between the
publish and the subscriber costs one iteration.

Run it against another source tree in the same invocation, interleaved, with
``--tree DIR`` (each side runs in its own interpreter, ``DIR`` first on
``sys.path``); ``--side`` is used internally. Bounded: ``--events`` events per
round, every wait has a timeout. Nothing here asserts times.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
PERIOD_S = 0.002


def _burn(us: float) -> None:
    end = time.perf_counter() + us / 1e6
    while time.perf_counter() < end:
        pass


async def _side(events: int, busy: int, work_us: float) -> dict[str, Any]:
    # Imported here: the side runs with the chosen tree first on sys.path.
    from eventbus import EventBus, EventLog

    iterations = 0
    stop = False

    async def busy_task() -> None:
        nonlocal iterations
        while not stop:
            _burn(work_us)
            iterations += 1
            await asyncio.sleep(0)

    with tempfile.TemporaryDirectory() as tmp:
        log = EventLog.open(Path(tmp) / "events.db")
        bus = EventBus(log)
        await bus.start()
        sub = await bus.subscribe(session_id="ses_lag")
        lags: list[int] = []
        hops: list[float] = []
        stamps: dict[int, tuple[int, int]] = {}

        async def receive() -> None:
            async for record in sub:
                sent = stamps.pop(record.session_seq, None)
                if sent is not None:
                    lags.append(time.monotonic_ns() - sent[0])
                    hops.append((iterations - sent[1]) / max(busy, 1))
                if len(lags) >= events:
                    return

        receiver = asyncio.create_task(receive())
        workers = [asyncio.create_task(busy_task()) for _ in range(busy)]
        cpu0 = time.process_time()
        published = 0
        async with asyncio.timeout(60):
            while published < events:
                for _ in range(1 + published % 3):
                    if published >= events:
                        break
                    published += 1
                    stamps[bus.last_session_seq("ses_lag") + 1] = (
                        time.monotonic_ns(),
                        iterations,
                    )
                    bus.publish(
                        "tool.output_delta",
                        {"tool_use_id": "t", "stream": "stdout", "text": "x" * 200},
                        session_id="ses_lag",
                        turn_id="trn_lag",
                    )
                await asyncio.sleep(PERIOD_S)
            await receiver
        cpu = time.process_time() - cpu0
        stop = True
        await asyncio.gather(*workers)
        stats = bus.stats()
        await bus.close()
        log.close()
    lags.sort()
    return {
        "p50_ms": lags[len(lags) // 2] / 1e6,
        "p90_ms": lags[int(len(lags) * 0.9)] / 1e6,
        "p99_ms": lags[int(len(lags) * 0.99)] / 1e6,
        "iterations_waited_p50": statistics.median(hops),
        "batches": stats.batches,
        "cpu_s": cpu,
    }


def _run_side(tree: Path, events: int, busy: int, work_us: float) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run(
        [
            sys.executable,
            # Run as a file: its folder, not a source tree, is then sys.path[0],
            # and PYTHONPATH decides which tree's eventbus is measured.
            str(Path(__file__).resolve()),
            "--side",
            "--events",
            str(events),
            "--busy",
            str(busy),
            "--work-us",
            str(work_us),
        ],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=600)
    parser.add_argument("--busy", type=int, default=4)
    parser.add_argument("--work-us", type=float, default=250.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tree", type=Path, default=None, help="compare with this tree")
    parser.add_argument("--side", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.side:
        print(json.dumps(asyncio.run(_side(args.events, args.busy, args.work_us))))
        return
    trees = {"this tree": REPO_ROOT}
    if args.tree is not None:
        trees["other tree"] = args.tree.resolve()
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
    for _ in range(args.rounds):
        for name, tree in trees.items():
            results[name].append(_run_side(tree, args.events, args.busy, args.work_us))
    print(
        f"{args.events} events/round, {args.busy} busy tasks x {args.work_us:.0f} us "
        f"(~{args.busy * args.work_us / 1000:.1f} ms per loop iteration), {args.rounds} rounds"
    )
    for name, rounds in results.items():
        for key in ("p50_ms", "p90_ms", "p99_ms", "iterations_waited_p50", "batches", "cpu_s"):
            values = [r[key] for r in rounds]
            print(
                f"  {name:10s} {key:22s} "
                + " ".join(f"{v:.3g}" for v in values)
                + f"  (median {statistics.median(values):.3g})"
            )


if __name__ == "__main__":
    main()
