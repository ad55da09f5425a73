"""Cost growth: what one operation costs as the server holds more.

1. Dispatch overhead as sessions grow 1 -> 1,000: the full dispatcher with
   the bus and the durable log, in this process, with one live subscriber
   per session (each consumed by a task, as each session's stream would
   be); calls go round-robin over the sessions, the loop yielding every 64
   calls as a server's would. Every session count is set up at once and the
   rounds are interleaved. Should be flat.
2. Fan-out as sessions grow 1 -> 1,000, on a real server: every session
   holds an idle event stream (a separate client process), and a burst goes
   to 10 subscribers of one session (another client process). Should be flat.
3. Replay as the log grows to 1M events: the log is built directly through
   ``EventLog`` in a temp dir (new sessions appear as it grows, 10 per 10,000
   events, their events interleaved), and replaying the last 100 events, of
   the whole log and of one session, is timed at each size; also through the
   bus (subscribe with ``after``, as a reconnecting client does). Indexed
   reads: should stay constant.

"Flat" and "constant" are checked as: the figure at the largest size is
within 1.5x of the smallest (the same-run baseline).
"""

from __future__ import annotations

import asyncio
import gc
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.dispatch_overhead import INPUT, YIELD_EVERY, NoOpTool
from benchmarks.fanout import fanout_config, server_run
from benchmarks.processes import ClientProcess, ServerHandle
from benchmarks.report import Section, Target, percentile
from benchmarks.scale import create_sessions, hold_streams
from benchmarks.server_api import wait_health
from dispatcher import AutoAllowPolicy, DispatchSession, ToolDispatcher, WorkspaceFileAPI
from eventbus import EventBus, EventLog, EventRecord, Subscription
from eventbus.encoding import EnvelopeEncoder
from protocol.canonical import ToolUseBlock

SESSION_STEPS = (1, 10, 100, 1000)
FLAT = 1.5
FANOUT_SUBSCRIBERS = 10
REPLAY_LAST = 100


# -- 1. dispatch overhead vs sessions ------------------------------------------------


def _workspace(root: Path) -> Path:
    """The sessions' workspace: a folder beside the server's data dir, never its
    parent (the server refuses a workspace that contains its data dir)."""
    workspace = root / "workspace"
    workspace.mkdir(exist_ok=True)
    return workspace


async def _drain(sub: Subscription) -> None:
    async for _ in sub:
        pass


class _DispatchSetup:
    """A bus with the durable log, a dispatcher and ``sessions`` sessions, each
    with a live subscriber drained by its own task."""

    def __init__(self, root: Path, sessions: int) -> None:
        self.sessions = sessions
        self.bus = EventBus(EventLog.open(root / f"dispatch-{sessions}.db"))
        self.dispatcher = ToolDispatcher(self.bus)
        self.dispatcher.register(NoOpTool)
        ws = WorkspaceFileAPI(root)
        self.states = [
            DispatchSession(f"ses-{i}", ws, policy=AutoAllowPolicy()) for i in range(sessions)
        ]
        self.consumers: list[asyncio.Task[None]] = []
        self.samples: list[float] = []

    async def start(self) -> None:
        await self.bus.start()
        for state in self.states:
            sub = await self.bus.subscribe(session_id=state.session_id)
            self.consumers.append(asyncio.create_task(_drain(sub)))

    async def round(self, blocks: list[ToolUseBlock]) -> None:
        """Round-robin over the sessions; the clock stops once all is committed."""
        gc.collect()
        states, sessions = self.states, self.sessions
        started = time.perf_counter()
        for i, block in enumerate(blocks):
            await self.dispatcher.dispatch(block, states[i % sessions], turn_id="turn")
            if i % YIELD_EVERY == YIELD_EVERY - 1:
                await asyncio.sleep(0)  # as a server's loop would: commits overlap
        await self.bus.flush()
        self.samples.append((time.perf_counter() - started) / len(blocks) * 1e6)

    async def close(self) -> dict[str, Any]:
        stats = self.bus.stats()
        for task in self.consumers:
            task.cancel()
        await asyncio.gather(*self.consumers, return_exceptions=True)
        await self.bus.close()
        return {
            "sessions": self.sessions,
            "us_per_call": round(statistics.median(self.samples), 2),
            "rounds_us": [round(x, 1) for x in self.samples],
            "delivered": stats.delivered,
            "dropped_subscribers": stats.dropped_subscribers,
        }


async def _dispatch_growth(root: Path, calls: int, rounds: int) -> list[dict[str, Any]]:
    """Every session count set up at once, rounds interleaved, so drifting
    machine load hits every count alike."""
    setups = [_DispatchSetup(root, n) for n in SESSION_STEPS]
    blocks = [ToolUseBlock(id=f"tu_{i}", name="noop", input=INPUT) for i in range(calls)]
    try:
        for setup in setups:
            await setup.start()
        for _ in range(rounds):
            for setup in setups:
                await setup.round(blocks)
    finally:
        rows = [await setup.close() for setup in setups]
    return rows


# -- 2. fan-out vs sessions -----------------------------------------------------------


async def _fanout_with_sessions(root: Path, count: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    holders: list[ClientProcess] = []
    with ServerHandle(root / "fanout-server", config=fanout_config()) as server:
        async with server.http() as http:
            ids: list[str] = []
            try:
                for step in SESSION_STEPS:
                    new = await create_sessions(http, str(_workspace(root)), step - len(ids))
                    if new:
                        holders.append(await hold_streams(server, new))
                    ids.extend(new)
                    await wait_health(http, "clients", len(ids))
                    # Best of three: interference from other work only ever slows a run.
                    tries = [
                        await server_run(server, http, ids[0], FANOUT_SUBSCRIBERS, count=count)
                        for _ in range(3)
                    ]
                    best = max(tries, key=lambda r: float(r["deliveries_per_s"]))
                    rows.append(
                        {
                            "sessions_with_idle_stream": len(ids),
                            "deliveries_per_s": best["deliveries_per_s"],
                            "all_tries_per_s": [r["deliveries_per_s"] for r in tries],
                            "server_cpu_us_per_delivery": best["server_cpu_us_per_delivery"],
                            "received": best["received"],
                            "expected": best["expected"],
                        }
                    )
            finally:
                for holder in holders:
                    await holder.quit()
    return rows


# -- 3. replay vs log size ------------------------------------------------------------


def _extend_log(log: EventLog, start_seq: int, until: int, counters: dict[str, int]) -> None:
    """Append events ``start_seq + 1 .. until``; 10 new sessions per 10,000 events,
    their events interleaved."""
    encoder = EnvelopeEncoder()
    data = {"tool_use_id": "tu_bench", "stream": "stdout", "text": "x" * 80}
    batch: list[EventRecord] = []
    ts = "2026-01-01T00:00:00.000000Z"
    for seq in range(start_seq + 1, until + 1):
        block = (seq - 1) // 10_000
        session_id = f"ses_{block:05d}_{seq % 10}"
        session_seq = counters.get(session_id, 0) + 1
        counters[session_id] = session_seq
        text = encoder.encode(
            seq=seq,
            session_seq=session_seq,
            event_id=f"evt_bench000{seq:012x}",
            type="tool.output_delta",
            session_id=session_id,
            turn_id="turn_bench",
            ts=ts,
            data=data,
        )
        batch.append(
            EventRecord(seq, session_seq, session_id, "tool.output_delta", "turn_bench", ts, text)
        )
        if len(batch) == 10_000:
            log.append_many(batch)
            batch = []
    if batch:
        log.append_many(batch)


def _time_us(fn: Any, reps: int) -> dict[str, float]:
    samples = []
    for _ in range(reps):
        started = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - started) * 1e6)
    return {"p50": round(statistics.median(samples), 1), "p99": round(percentile(samples, 99), 1)}


def _log_replay_us(
    log: EventLog, size: int, session_id: str, session_seq: int, reps: int
) -> tuple[dict[str, float], dict[str, float]]:
    """Replaying the last 100 events straight from the log: all sessions, one session."""
    all_us = _time_us(lambda: log.replay(after_seq=size - REPLAY_LAST, limit=REPLAY_LAST), reps)
    session_us = _time_us(
        lambda: log.replay_session(
            session_id, after_session_seq=session_seq - REPLAY_LAST, limit=REPLAY_LAST
        ),
        reps,
    )
    return all_us, session_us


async def _bus_replay_us(path: Path, session_id: str, after: int, reps: int) -> dict[str, float]:
    bus = EventBus(EventLog.open(path))
    await bus.start()
    try:
        samples = []
        for _ in range(reps):
            started = time.perf_counter()
            sub = await bus.subscribe(session_id=session_id, after=after)
            got = 0
            async with asyncio.timeout(30):
                async for _record in sub:
                    got += 1
                    if got == REPLAY_LAST:
                        break
            sub.close()
            samples.append((time.perf_counter() - started) * 1e6)
            if got != REPLAY_LAST:
                raise RuntimeError(f"replay returned {got} events, expected {REPLAY_LAST}")
        return {
            "p50": round(statistics.median(samples), 1),
            "p99": round(percentile(samples, 99), 1),
        }
    finally:
        await bus.close()


async def _replay_growth(root: Path, sizes: tuple[int, ...], reps: int) -> list[dict[str, Any]]:
    path = root / "replay.db"
    rows: list[dict[str, Any]] = []
    counters: dict[str, int] = {}
    written = 0
    for size in sizes:
        log = EventLog.open(path)
        started = time.perf_counter()
        await asyncio.to_thread(_extend_log, log, written, size, counters)
        build_s = time.perf_counter() - started
        written = size
        last_session = max(counters)  # one of the newest sessions
        last_session_seq = counters[last_session]
        if last_session_seq <= REPLAY_LAST:
            raise RuntimeError("sessions too short for the replay benchmark")
        all_us, session_us = _log_replay_us(log, size, last_session, last_session_seq, reps)
        log.close()
        bus_us = await _bus_replay_us(path, last_session, last_session_seq - REPLAY_LAST, reps)
        rows.append(
            {
                "events": size,
                "sessions": len(counters),
                "build_s": round(build_s, 1),
                "file_mib": round(path.stat().st_size / 1024 / 1024, 1),
                "replay_last_100_all_us": all_us,
                "replay_last_100_session_us": session_us,
                "replay_last_100_session_via_bus_us": bus_us,
            }
        )
    return rows


# -- the section -----------------------------------------------------------------------


async def run(quick: bool = False) -> Section:
    section = Section("growth")
    sizes = (10_000, 100_000) if quick else (10_000, 100_000, 1_000_000)
    with tempfile.TemporaryDirectory(prefix="toolrelay-bench-") as tmp:
        root = Path(tmp)
        dispatch_rows = await _dispatch_growth(root, 2_000 if quick else 10_000, 3 if quick else 5)
        fanout_rows = await _fanout_with_sessions(root, 1_000 if quick else 3_000)
        replay_rows = await _replay_growth(root, sizes, 50 if quick else 200)

    first, last = dispatch_rows[0], dispatch_rows[-1]
    section.add(
        f"no-op dispatch with {last['sessions']} sessions (durable log, 1 subscriber each)",
        last["us_per_call"],
        "us",
        target=Target.ratio_at_most(FLAT, "flat"),
        baseline=first["us_per_call"],
        baseline_name=f"{first['sessions']} session",
    )
    f_first, f_last = fanout_rows[0], fanout_rows[-1]
    section.add(
        f"fan-out to {FANOUT_SUBSCRIBERS} subscribers (best of 3), "
        f"{f_last['sessions_with_idle_stream']} sessions with an idle stream",
        f_last["deliveries_per_s"],
        "/s",
        target=Target.ratio_at_least(round(1 / FLAT, 2), "flat"),
        baseline=f_first["deliveries_per_s"],
        baseline_name=f"{f_first['sessions_with_idle_stream']} session",
    )
    r_first, r_last = replay_rows[0], replay_rows[-1]
    for key, label in (
        ("replay_last_100_all_us", "replay last 100 events (all sessions)"),
        ("replay_last_100_session_us", "replay last 100 events of one session"),
        ("replay_last_100_session_via_bus_us", "replay last 100 of one session via the bus"),
    ):
        section.add(
            f"{label}, {r_last['events']:,} events in the log",
            r_last[key]["p50"],
            "us",
            target=Target.ratio_at_most(FLAT, "constant"),
            baseline=r_first[key]["p50"],
            baseline_name=f"{r_first['events']:,} events",
        )
    section.details = {
        "dispatch_vs_sessions": dispatch_rows,
        "fanout_vs_sessions": fanout_rows,
        "replay_vs_log_size": replay_rows,
    }
    return section
