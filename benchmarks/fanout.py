"""Event fan-out: the server's events to N WebSocket subscribers vs a bare
Starlette broadcast loop, both measured from a separate client process.

For N = 1, 10, 100 subscribers of one session:

- saturated: a tool publishes a burst as fast as it can; deliveries/s =
  deliveries / (last receive - first publish stamp). The bare loop does the
  same with ``POST /burst``. Target: the server >= 70% of the bare loop.
- paced at 200 events/s: p99 publish-to-receive latency over every delivery.
  Target: <= 1.5x the bare loop's.

The server's per-socket queue (``events.subscriber_queue``) is raised for
this benchmark so a saturating burst is measured, not cut off as a slow
consumer (which is what the default would rightly do to a client this far
behind). The server's CPU time per delivery is reported too (psutil on its
PID), as it is less sensitive to the client process than wall-clock rates.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import httpx2

from benchmarks.processes import PLUGINS, ClientProcess, ServerHandle
from benchmarks.report import Section, Target
from benchmarks.server_api import create_session, start_turn, tool_use, wait_turn

SUBSCRIBERS = (1, 10, 100)
PAYLOAD_PAD = 100  # bytes of padding: envelopes of about 330 bytes, like real deltas
LATENCY_RATE = 200.0

SERVER_CONFIG: dict[str, Any] = {
    "plugins": {"import_paths": PLUGINS, "entry_points": False},
    "events": {"subscriber_queue": 400_000},
}


def _workspace(root: Path) -> Path:
    """The sessions' workspace: a folder beside the server's data dir, never its
    parent (the server refuses a workspace that contains its data dir)."""
    workspace = root / "workspace"
    workspace.mkdir(exist_ok=True)
    return workspace


def fanout_config(**extra: Any) -> dict[str, Any]:
    return {**SERVER_CONFIG, **extra}


async def server_run(
    server: ServerHandle,
    http: httpx2.AsyncClient,
    session_id: str,
    subscribers: int,
    *,
    count: int,
    rate: float = 0.0,
    latency: bool = False,
) -> dict[str, Any]:
    """One burst from the server to ``subscribers`` sockets on one session."""
    url = server.ws_url(f"/sessions/{session_id}/events", client="bench")
    client = ClientProcess(
        {
            "mode": "measure",
            "urls": [url] * subscribers,
            "match": "tool.output_delta",
            "expect": count,
            "latency": latency,
            "timeout": _timeout(count, rate),
        }
    )
    await client.start()
    cpu_before = server.cpu_seconds()
    turn_id = await start_turn(
        http, session_id, [tool_use("emit", "bench_emit", count=count, rate=rate, size=PAYLOAD_PAD)]
    )
    result = await client.result(_timeout(count, rate) + 30)
    cpu = server.cpu_seconds() - cpu_before
    await wait_turn(http, session_id, turn_id)
    return _rates(result, cpu)


async def bare_run(
    bare: ServerHandle,
    http: httpx2.AsyncClient,
    subscribers: int,
    *,
    count: int,
    rate: float = 0.0,
    latency: bool = False,
) -> dict[str, Any]:
    """The same burst from the bare broadcast loop."""
    client = ClientProcess(
        {
            "mode": "measure",
            "urls": [bare.ws_url("/ws")] * subscribers,
            "match": "tool.output_delta",
            "expect": count,
            "latency": latency,
            "timeout": _timeout(count, rate),
        }
    )
    await client.start()
    cpu_before = bare.cpu_seconds()
    response = await http.post("/burst", json={"count": count, "rate": rate, "size": PAYLOAD_PAD})
    response.raise_for_status()
    result = await client.result(_timeout(count, rate) + 30)
    return _rates(result, bare.cpu_seconds() - cpu_before)


def _timeout(count: int, rate: float) -> float:
    return (count / rate if rate > 0 else 0.0) + 120.0


def _rates(result: dict[str, Any], cpu_seconds: float) -> dict[str, Any]:
    received = int(result["received"])
    first, last = result.get("first_stamp_ns"), result.get("last_recv_ns")
    elapsed = (last - first) / 1e9 if first and last and last > first else float("nan")
    out = dict(result)
    out["elapsed_s"] = round(elapsed, 4)
    out["deliveries_per_s"] = round(received / elapsed) if elapsed == elapsed else 0
    out["server_cpu_us_per_delivery"] = round(cpu_seconds * 1e6 / received, 2) if received else None
    if received != result["expected"]:
        out["incomplete"] = True
    return out


def burst_size(subscribers: int, quick: bool) -> int:
    """Events per burst: about the same number of deliveries for every N."""
    deliveries = 30_000 if quick else 150_000
    return max(500, deliveries // subscribers)


def _median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run with the median deliveries/s (its other figures come with it)."""
    ordered = sorted(runs, key=lambda r: float(r["deliveries_per_s"]))
    return ordered[len(ordered) // 2]


async def run(quick: bool = False) -> Section:
    section = Section("fanout")
    latency_events = int(LATENCY_RATE * (2 if quick else 5))
    repeats = 1 if quick else 3
    runs: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="toolrelay-bench-") as tmp:
        root = Path(tmp)
        with (
            ServerHandle(root / "server", config=SERVER_CONFIG) as server,
            ServerHandle(root / "bare", bare=True) as bare,
        ):
            async with server.http() as http, bare.http() as bare_http:
                session_id = await create_session(http, str(_workspace(root)))
                for n in SUBSCRIBERS:
                    count = burst_size(n, quick)
                    # Server and bare loop alternate, so drifting load hits both alike.
                    ours_runs, base_runs = [], []
                    for _ in range(repeats):
                        ours_runs.append(await server_run(server, http, session_id, n, count=count))
                        base_runs.append(await bare_run(bare, bare_http, n, count=count))
                    ours, base = _median_run(ours_runs), _median_run(base_runs)
                    ours_lat = await server_run(
                        server, http, session_id, n, count=latency_events,
                        rate=LATENCY_RATE, latency=True,
                    )  # fmt: skip
                    base_lat = await bare_run(
                        bare, bare_http, n, count=latency_events, rate=LATENCY_RATE, latency=True
                    )
                    runs[f"N={n}"] = {
                        "saturated": {
                            "server": ours,
                            "bare": base,
                            "server_all_runs_per_s": [r["deliveries_per_s"] for r in ours_runs],
                            "bare_all_runs_per_s": [r["deliveries_per_s"] for r in base_runs],
                        },
                        "paced_200_per_s": {"server": ours_lat, "bare": base_lat},
                    }
                    section.add(
                        f"saturated deliveries/s, N={n} (median of {repeats})",
                        ours["deliveries_per_s"],
                        "/s",
                        target=Target.ratio_at_least(0.7),
                        baseline=base["deliveries_per_s"],
                        baseline_name="bare broadcast loop",
                    )
                    section.add(
                        f"p99 publish->receive at 200 ev/s, N={n}",
                        ours_lat["latency_us"]["p99"] / 1000,
                        "ms",
                        target=Target.ratio_at_most(1.5),
                        baseline=base_lat["latency_us"]["p99"] / 1000,
                        baseline_name="bare broadcast loop",
                    )
                    section.add(
                        f"p50 publish->receive at 200 ev/s, N={n}",
                        ours_lat["latency_us"]["p50"] / 1000,
                        "ms",
                        baseline=base_lat["latency_us"]["p50"] / 1000,
                        baseline_name="bare broadcast loop",
                    )
                    section.add(
                        f"server CPU per delivery (saturated), N={n}",
                        ours["server_cpu_us_per_delivery"] or float("nan"),
                        "us",
                        baseline=base["server_cpu_us_per_delivery"],
                        baseline_name="bare broadcast loop",
                    )
    section.details = {"payload_pad_bytes": PAYLOAD_PAD, "repeats": repeats, "runs": runs}
    return section
