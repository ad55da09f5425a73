"""Confirmation round trip: from ``tool.confirmation_requested`` received by a
client, through its POST answer, to ``tool.completed`` received.

The client is this process (the server is a subprocess): it starts a turn
whose one call needs a confirmation (a write tool under the default policy),
waits on the session's WebSocket for the request, stamps it, POSTs ``allow``
and stamps the ``tool.completed`` event. Turns run one after another, so each
figure is one isolated round trip. The baseline is a bare FastAPI POST round
trip from the same HTTP client to an app under the same uvicorn settings.

Target: p50 <= 3 ms (over 500 confirmations).
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from websockets.asyncio.client import ClientConnection, connect

from benchmarks.processes import PLUGINS, ServerHandle
from benchmarks.report import Section, Target, percentile, summarize
from benchmarks.server_api import create_session, start_turn, tool_use

SERVER_CONFIG: dict[str, Any] = {"plugins": {"import_paths": PLUGINS, "entry_points": False}}
EVENT_WAIT = 30.0


def _workspace(root: Path) -> Path:
    """The sessions' workspace: a folder beside the server's data dir, never its
    parent (the server refuses a workspace that contains its data dir)."""
    workspace = root / "workspace"
    workspace.mkdir(exist_ok=True)
    return workspace


async def _until(ws: ClientConnection, type_: str) -> dict[str, Any]:
    """Read events until one of ``type_`` arrives (bounded by EVENT_WAIT)."""
    deadline = time.monotonic() + EVENT_WAIT
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"no {type_} event within {EVENT_WAIT:g} s")
        event: dict[str, Any] = json.loads(await asyncio.wait_for(ws.recv(), remaining))
        if event["type"] == type_:
            return event


async def run(quick: bool = False) -> Section:
    count = 100 if quick else 500
    warmup = 10
    section = Section("confirmation")
    round_trips_ms: list[float] = []
    post_ms: list[float] = []
    bare_ms: list[float] = []
    with tempfile.TemporaryDirectory(prefix="toolrelay-bench-") as tmp:
        root = Path(tmp)
        with (
            ServerHandle(root / "server", config=SERVER_CONFIG) as server,
            ServerHandle(root / "bare", bare=True) as bare,
        ):
            async with server.http() as http:
                session_id = await create_session(http, str(_workspace(root)))
                url = server.ws_url(f"/sessions/{session_id}/events", client="bench")
                async with connect(url, compression=None, proxy=None, max_queue=None) as ws:
                    for i in range(warmup + count):
                        turn_id = await start_turn(
                            http, session_id, [tool_use(f"c{i}", "bench_confirm", n=i)]
                        )
                        request = await _until(ws, "tool.confirmation_requested")
                        t0 = time.perf_counter()
                        rid = request["data"]["request_id"]
                        response = await http.post(
                            f"/sessions/{session_id}/turns/{turn_id}/confirmations/{rid}",
                            json={"decision": "allow"},
                        )
                        t1 = time.perf_counter()
                        if response.status_code != 200:
                            raise RuntimeError(f"answer refused: {response.text[:300]}")
                        await _until(ws, "tool.completed")
                        t2 = time.perf_counter()
                        await _until(ws, "turn.completed")  # the next turn may start now
                        if i >= warmup:
                            round_trips_ms.append((t2 - t0) * 1000)
                            post_ms.append((t1 - t0) * 1000)
            async with bare.http() as bare_http:
                for i in range(warmup + count):
                    t0 = time.perf_counter()
                    response = await bare_http.post("/echo", json={"decision": "allow", "n": i})
                    t1 = time.perf_counter()
                    response.raise_for_status()
                    if i >= warmup:
                        bare_ms.append((t1 - t0) * 1000)
    for pct in (50, 99):
        section.add(
            f"round trip p{pct} ({count} confirmations)",
            percentile(round_trips_ms, pct),
            "ms",
            target=Target.at_most(3.0) if pct == 50 else Target.none(),
            baseline=percentile(bare_ms, pct),
            baseline_name="bare FastAPI POST",
        )
    section.details = {
        "confirmations": count,
        "round_trip_ms": summarize(round_trips_ms),
        "answer_post_ms": summarize(post_ms),
        "bare_post_ms": summarize(bare_ms),
    }
    return section
