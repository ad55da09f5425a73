"""Scale: 1,000 sessions with an idle WebSocket each, and 100 sessions each
running 4 concurrent tools, on one real server process.

Memory is the server process's RSS (psutil on its PID; the event log's
child process is separate and reported apart):

- per session: RSS after creating 1,000 sessions (each also asked for its
  tool list, which builds its dispatcher state) minus RSS before, / 1,000;
- per connection: RSS once a separate client process holds one idle event
  stream on each of them (the server reports 1,000 clients) minus RSS
  before, / 1,000.

Concurrency: 100 sessions each start one turn with 4 ``bench_sleep`` calls
of 1 s; the tool records the most calls it saw in flight at once, which
should be all 400. Reported: that peak, the time until every turn ended
(the ideal is the sleep itself) and the RSS at the end.

The issue gives no numeric memory target; the figures are reported. The
concurrency figure is checked: all 400 calls must run at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx2
import psutil

from benchmarks.processes import PLUGINS, ClientProcess, ServerHandle
from benchmarks.report import Section, Target
from benchmarks.server_api import create_session, start_turn, tool_use, wait_health, wait_turn

SERVER_CONFIG: dict[str, Any] = {"plugins": {"import_paths": PLUGINS, "entry_points": False}}
MIB = 1024 * 1024
SLEEP_SECONDS = 1.0
CONCURRENT_SESSIONS = 100
CALLS_PER_TURN = 4


def _workspace(root: Path) -> Path:
    """The sessions' workspace: a folder beside the server's data dir, never its
    parent (the server refuses a workspace that contains its data dir)."""
    workspace = root / "workspace"
    workspace.mkdir(exist_ok=True)
    return workspace


async def create_sessions(
    http: httpx2.AsyncClient, workspace: str, count: int, *, parallel: int = 16
) -> list[str]:
    """``count`` sessions, ``parallel`` requests at a time; each also lists its
    tools, which builds the session's dispatcher state as a first turn would."""
    gate = asyncio.Semaphore(parallel)

    async def one(i: int) -> str:
        async with gate:
            session_id = await create_session(http, workspace, name=f"scale-{i}")
            response = await http.get(f"/sessions/{session_id}/tools")
            response.raise_for_status()
            return session_id

    return list(await asyncio.gather(*(one(i) for i in range(count))))


async def hold_streams(server: ServerHandle, session_ids: list[str]) -> ClientProcess:
    """A client process holding one idle event stream per session (it reads
    and discards what arrives, as an idle dashboard would)."""
    urls = [server.ws_url(f"/sessions/{sid}/events", client="idle") for sid in session_ids]
    holder = ClientProcess({"mode": "hold", "urls": urls, "connect_concurrency": 50})
    await holder.start(within=180.0)
    return holder


def log_child_rss(server: ServerHandle) -> int:
    total = 0
    for child in psutil.Process(server.pid).children(recursive=True):
        with contextlib.suppress(psutil.NoSuchProcess):
            total += child.memory_info().rss
    return total


async def _settled_rss(server: ServerHandle) -> int:
    """RSS after a short pause, so in-flight work has finished allocating."""
    await asyncio.sleep(0.5)
    return server.rss()


async def run(quick: bool = False) -> Section:
    sessions = 200 if quick else 1000
    section = Section("scale")
    details: dict[str, Any] = {"sessions": sessions}
    with tempfile.TemporaryDirectory(prefix="toolrelay-bench-") as tmp:
        root = Path(tmp)
        with ServerHandle(root / "server", config=SERVER_CONFIG) as server:
            async with server.http() as http:
                # Warm up: the first session, turn and stream import and build
                # things once per process; that is not per-session memory.
                warm = await create_sessions(http, str(_workspace(root)), 1)
                turn = await start_turn(http, warm[0], [tool_use("w", "bench_sleep", seconds=0)])
                await wait_turn(http, warm[0], turn)
                warm_holder = await hold_streams(server, warm)
                await wait_health(http, "clients", 1)
                await warm_holder.quit()
                await wait_health(http, "clients", 0)
                rss_start = await _settled_rss(server)

                started = time.perf_counter()
                ids = await create_sessions(http, str(_workspace(root)), sessions)
                create_s = time.perf_counter() - started
                rss_sessions = await _settled_rss(server)

                started = time.perf_counter()
                holder = await hold_streams(server, ids)
                await wait_health(http, "clients", sessions)
                connect_s = time.perf_counter() - started
                rss_streams = await _settled_rss(server)
                held = await holder.quit()
                await wait_health(http, "clients", 0)

                concurrency = await _concurrent_tools(server, http, ids[:CONCURRENT_SESSIONS])
                rss_end = server.rss()
                log_rss = log_child_rss(server)

    per_session = (rss_sessions - rss_start) / sessions
    per_stream = (rss_streams - rss_sessions) / sessions
    section.add(f"server RSS per session ({sessions} sessions)", per_session / 1024, "KiB")
    section.add(f"server RSS per idle event stream ({sessions} streams)", per_stream / 1024, "KiB")
    section.add(
        f"calls in flight at once ({CONCURRENT_SESSIONS} sessions x {CALLS_PER_TURN})",
        concurrency["peak_in_flight"],
        "calls",
        target=Target.at_least(CONCURRENT_SESSIONS * CALLS_PER_TURN, "all of them"),
    )
    section.add(
        f"time until all {CONCURRENT_SESSIONS} turns ended (tools sleep {SLEEP_SECONDS:g} s)",
        concurrency["seconds"],
        "s",
        baseline=SLEEP_SECONDS,
        baseline_name="the sleep itself",
    )
    details.update(
        {
            "rss_mib": {
                "start": round(rss_start / MIB, 1),
                "with_sessions": round(rss_sessions / MIB, 1),
                "with_streams": round(rss_streams / MIB, 1),
                "after_concurrent_tools": round(rss_end / MIB, 1),
                "log_process": round(log_rss / MIB, 1),
            },
            "create_sessions_s": round(create_s, 2),
            "open_streams_s": round(connect_s, 2),
            "held_streams": held,
            "concurrent_tools": concurrency,
        }
    )
    section.details = details
    return section


async def _concurrent_tools(
    server: ServerHandle, http: httpx2.AsyncClient, session_ids: list[str]
) -> dict[str, Any]:
    started = time.perf_counter()
    calls = [tool_use(f"s{i}", "bench_sleep", seconds=SLEEP_SECONDS) for i in range(CALLS_PER_TURN)]
    turns = await asyncio.gather(*(start_turn(http, sid, calls) for sid in session_ids))
    peak_rss = server.rss()
    # One poller, not one per turn: a hundred pollers would load the server.
    await wait_health(http, "turns_running", 0)
    seconds = time.perf_counter() - started
    ended = [
        await wait_turn(http, sid, tid, within=30)
        for sid, tid in zip(session_ids, turns, strict=True)
    ]
    peak = 0
    errors = 0
    for turn in ended:
        for result in turn["results"] or []:
            if result["is_error"]:
                errors += 1
                continue
            text = "".join(block.get("text", "") for block in result["content"])
            peak = max(peak, int(text.removeprefix("peak=")))
    return {
        "turns": len(ended),
        "completed": sum(1 for t in ended if t["status"] == "completed"),
        "errors": errors,
        "peak_in_flight": peak,
        "seconds": round(seconds, 3),
        "rss_mib_while_running": round(peak_rss / MIB, 1),
    }
