"""A model-driven turn, end to end, against its floor (issue 16).

Three processes besides this client: the zero-latency OpenAI-compatible
model (``benchmarks/turn_model.py``), ``toolrelay serve`` with
``openai-compatible/bench-model`` pointed at it (sandbox off, so every shell
call asks for a confirmation), and the floor (``benchmarks/turn_floor.py``): a
bare FastAPI app doing the same visible work with one long-lived SDK client,
an in-memory event list, ``create_subprocess_shell`` and a plain read. Both
servers run under ``benchmarks/loop_probe.py``, which measures their event
loops' lag.

Scenarios, each turn on a fresh session, the two servers interleaved:

* ``shell8``: the model asks for 8 ``shell`` calls at once; this client
  approves each over HTTP as soon as its ``tool.confirmation_requested``
  arrives on the session's WebSocket; then a final text;
* ``read16``: the model asks for 16 ``read_file`` calls at once (the
  parallel-16 turn); then a final text.

Per turn: wall time from the POST to ``turn.completed`` received; the first
model request after the POST (the model server stamps arrivals with
``time.monotonic_ns()``, the same clock); publish -> client lag of every
event of the turn (its envelope ``ts`` against the receive time); approval
round trip (request received -> ``tool.confirmation_resolved`` received); new
TCP connections to the model; the servers' loop lag inside the turn. Cold:
the first ``read16`` turn of a freshly started process.

    python -m benchmarks.turn [--quick] [--rounds N] [--profile read16]
    python -m benchmarks --only turn
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx2
from websockets.asyncio.client import connect

from benchmarks.processes import REPO_ROOT, ServerHandle, _env
from benchmarks.report import Section, Target, percentile, table
from server.agents import BUILD_PROMPT

MODEL = "openai-compatible/bench-model"
SCENARIOS = ("shell8", "read16")
TURN_TIMEOUT = 60.0
FILE_TEXT = "".join(f"line {i}: the quick brown fox jumps over the lazy dog\n" for i in range(24))


class TurnServer(ServerHandle):
    """A server subprocess with a command and environment of our choosing."""

    def __init__(
        self,
        root: Path,
        command: list[str],
        *,
        bare: bool,
        env: dict[str, str] | None = None,
        config: dict[str, Any] | None = None,
        tree: Path = REPO_ROOT,
    ) -> None:
        super().__init__(root, bare=bare, config=config)
        self.tree = tree
        self.command = command
        self.extra_env = env or {}
        self.probe_path = root / "loop_probe.json"

    def _command(self) -> list[str]:
        cmd = list(self.command)
        if self.config is not None:
            path = self.root / "config.yaml"
            path.write_text(json.dumps(self.config), encoding="utf-8")  # JSON is YAML
            cmd += ["--config", str(path)]
        return cmd

    def start(self) -> TurnServer:
        extra = dict(self.extra_env)
        if not self.bare:
            extra["TOOLRELAY_TOKEN"] = self.token
        env = _env(extra)
        env["PYTHONPATH"] = str(self.tree)  # the code under test comes from its tree only
        with open(self.stdout_path, "wb") as out, open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(
                self._command(),
                cwd=self.tree,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
            )
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def lag_samples(self) -> list[tuple[int, int]]:
        """The loop probe's (monotonic_ns, late_ns) samples, once the process ended."""
        try:
            data = json.loads(self.probe_path.read_text(encoding="utf-8"))
        except (FileNotFoundError, json.JSONDecodeError):
            return []
        return [(int(t), int(late)) for t, late in data["samples"]]


def _probe(root: Path, module: str, *args: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "benchmarks.loop_probe",
        str(root / "loop_probe.json"),
        module,
        *args,
    ]


def ours(
    root: Path, model_url: str, env: dict[str, str] | None = None, tree: Path = REPO_ROOT
) -> TurnServer:
    command = _probe(
        root,
        "server.cli",
        "serve",
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--data-dir",
        str(root / "data"),
        "--log-level",
        "warning",
        "--no-access-log",
    )
    return TurnServer(
        root,
        command,
        bare=False,
        env={"OPENAI_BASE_URL": model_url, "TOOLRELAY_MODEL": MODEL, **(env or {})},
        config={"workspaces": {"shell": {"sandbox": False}}},
        tree=tree,
    )


def floor(root: Path, model_url: str) -> TurnServer:
    command = _probe(root, "benchmarks.turn_floor", "--model", MODEL.partition("/")[2])
    return TurnServer(root, command, bare=True, env={"OPENAI_BASE_URL": model_url})


@dataclass
class TurnResult:
    """What one turn measured (times in ms)."""

    wall: float
    first_model_request: float
    lags: list[float]
    approvals: list[float]
    new_connections: int
    window: tuple[int, int]
    accepted: float = 0.0  # POST /turns -> its 202 response
    cpu: float = 0.0  # CPU ms of the server process and its live children (the log writer)


@dataclass
class Side:
    """One server under test and what it measured."""

    name: str
    server: TurnServer
    tools: list[dict[str, Any]] = field(default_factory=list)
    results: dict[str, list[TurnResult]] = field(default_factory=dict)
    seen_ports: set[int] = field(default_factory=set)
    lag_samples: list[tuple[int, int]] = field(default_factory=list)


def _ts_ns(ts: str) -> int:
    parsed = datetime.fromisoformat(ts)
    return int(parsed.timestamp()) * 1_000_000_000 + parsed.microsecond * 1000


async def run_turn(
    side: Side, scenario: str, http: httpx2.AsyncClient, model: httpx2.AsyncClient, ws_root: Path
) -> TurnResult:
    """One turn of ``scenario`` on a fresh session of ``side``."""
    body: dict[str, Any] = {"workspace": str(ws_root)}
    if side.server.bare:
        body |= {
            "tools": side.tools,
            "system": BUILD_PROMPT.replace("{workspace}", str(ws_root)),
        }
    response = await http.post("/sessions", json=body)
    assert response.status_code == 201, response.text
    session_id = response.json()["id"]
    await model.post("/stats/reset")
    received: list[tuple[int, dict[str, Any]]] = []
    asked: dict[str, int] = {}
    approvals: list[float] = []
    answers: set[asyncio.Task[Any]] = set()
    url = side.server.ws_url(f"/sessions/{session_id}/events", after=0)
    async with connect(url, compression=None, max_size=2**22) as ws:

        async def read_events() -> int:
            """Receive until the turn ends, answering confirmations at once; runs
            beside the POST, so no event waits in the socket for its response."""
            while True:
                raw = await ws.recv()
                wall_ns, mono_ns = time.time_ns(), time.monotonic_ns()
                event = json.loads(raw)
                received.append((wall_ns, event))
                kind = event["type"]
                if kind == "tool.confirmation_requested":
                    request_id = event["data"]["request_id"]
                    asked[request_id] = mono_ns
                    path = f"/sessions/{session_id}/turns/{event['turn_id']}/confirmations"
                    answer = http.post(f"{path}/{request_id}", json={"decision": "allow"})
                    answers.add(asyncio.create_task(answer))
                elif kind == "tool.confirmation_resolved":
                    request_id = event["data"]["request_id"]
                    approvals.append((mono_ns - asked[request_id]) / 1e6)
                elif kind in ("turn.completed", "turn.failed"):
                    # A fresh session: its only turn is the one just started.
                    if kind == "turn.failed":
                        raise RuntimeError(f"{side.name}: turn failed: {event['data']}")
                    return mono_ns

        cpu_before = side.server.cpu_seconds()
        async with asyncio.timeout(TURN_TIMEOUT):
            reader = asyncio.create_task(read_events())
            t0 = time.monotonic_ns()
            try:
                response = await http.post(
                    f"/sessions/{session_id}/turns", json={"message": scenario}
                )
                accepted = (time.monotonic_ns() - t0) / 1e6
                assert response.status_code == 202, response.text
                turn_id = response.json()["turn_id"]
                t_end = await reader
            finally:
                reader.cancel()
            for task in answers:
                answered = await task
                assert answered.status_code == 200, answered.text
        cpu = (side.server.cpu_seconds() - cpu_before) * 1e3
    arrivals = (await model.get("/stats")).json()["arrivals"]
    after = sorted((t, port) for t, port in arrivals if t >= t0)
    ports = {port for _, port in after}
    new = len(ports - side.seen_ports)
    side.seen_ports |= ports
    lags = [
        (wall - _ts_ns(ev["ts"])) / 1e6 for wall, ev in received if ev.get("turn_id") == turn_id
    ]
    return TurnResult(
        wall=(t_end - t0) / 1e6,
        first_model_request=(after[0][0] - t0) / 1e6 if after else float("nan"),
        lags=lags,
        approvals=approvals,
        new_connections=new,
        window=(t0, t_end),
        accepted=accepted,
        cpu=cpu,
    )


def _workspace(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for i in range(16):
        (root / f"f{i:02d}.txt").write_text(FILE_TEXT, encoding="utf-8")
    return root


async def _tools_of(server: TurnServer, ws_root: Path) -> list[dict[str, Any]]:
    """The tool definitions the real server offers the model, in Chat Completions form."""
    async with server.http() as http:
        session_id = (await http.post("/sessions", json={"workspace": str(ws_root)})).json()["id"]
        listed = (await http.get(f"/sessions/{session_id}/tools")).json()
    tools = listed["tools"] if isinstance(listed, dict) else listed
    return [
        {
            "type": "function",
            "function": {
                "name": t["name"],
                "description": t.get("description", ""),
                "parameters": t["input_schema"],
            },
        }
        for t in tools
    ]


def _lag_in(samples: list[tuple[int, int]], windows: list[tuple[int, int]]) -> tuple[float, float]:
    """The worst loop lateness (ms) inside the windows, and the number of
    wake-ups more than 1 ms late per window."""
    worst, over = 0, 0
    for t, late in samples:
        if any(start <= t <= end for start, end in windows):
            worst = max(worst, late)
            over += late > 1_000_000
    return worst / 1e6, over / max(1, len(windows))


async def _cold(
    root: Path, model_url: str, model_port_url: str, index: int, before: Path | None
) -> dict[str, float]:
    """The first read16 turn of a freshly started server (and floor, and before)."""
    figures: dict[str, float] = {}
    makers: list[tuple[str, Any]] = [("ours", ours), ("floor", floor)]
    if before is not None:
        makers.append(("before", lambda r, u: ours(r, u, tree=before)))
    async with httpx2.AsyncClient(base_url=model_port_url, timeout=30) as model:
        for name, make in makers:
            proc_root = root / f"cold-{name}-{index}"
            started = time.perf_counter()
            server = make(proc_root, model_url)
            server.start()
            ready = time.perf_counter() - started
            try:
                ws_root = _workspace(proc_root / "ws")
                side = Side(name, server)
                if server.bare:
                    side.tools = _TOOLS_CACHE.get("tools", [])
                async with server.http() as http:
                    result = await run_turn(side, "read16", http, model, ws_root)
            finally:
                server.stop()
            figures[f"{name}_wall"] = result.wall
            figures[f"{name}_ready_s"] = ready
            figures[f"{name}_first_model_request"] = result.first_model_request
    return figures


_TOOLS_CACHE: dict[str, list[dict[str, Any]]] = {}


def _med(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


async def measure(quick: bool, rounds: int | None = None, before: Path | None = None) -> Section:
    """Interleaved rounds of both scenarios on ours and the floor (and, with
    ``before``, ours run from another source tree: the same run's "before")."""
    rounds = rounds or (4 if quick else 15)
    cold_rounds = 1 if quick else 5
    section = Section("turn")
    with tempfile.TemporaryDirectory(prefix="toolrelay-turn-") as tmp:
        root = Path(tmp)
        model_proc = TurnServer(
            root / "model", [sys.executable, "-m", "benchmarks.turn_model"], bare=True
        )
        with model_proc:
            model_url = f"{model_proc.base_url}/v1"
            sides = [
                Side("ours", ours(root / "ours", model_url)),
                Side("floor", floor(root / "floor", model_url)),
            ]
            if before is not None:
                sides.append(Side("before", ours(root / "before", model_url, tree=before)))
            for side in sides:
                side.server.start()
            try:
                ws_root = _workspace(root / "ws")
                _TOOLS_CACHE["tools"] = await _tools_of(sides[0].server, ws_root)
                sides[1].tools = _TOOLS_CACHE["tools"]
                async with contextlib.AsyncExitStack() as stack:
                    clients = {
                        side.name: await stack.enter_async_context(side.server.http())
                        for side in sides
                    }
                    model = await stack.enter_async_context(
                        httpx2.AsyncClient(base_url=model_proc.base_url, timeout=30)
                    )
                    for side in sides:  # warm-up: one of each, not counted
                        for scenario in SCENARIOS:
                            await run_turn(side, scenario, clients[side.name], model, ws_root)
                    for r in range(rounds):
                        for scenario in SCENARIOS:
                            # Rotate who goes first, so no side always follows another.
                            order = sides[r % len(sides) :] + sides[: r % len(sides)]
                            for side in order:
                                result = await run_turn(
                                    side, scenario, clients[side.name], model, ws_root
                                )
                                side.results.setdefault(scenario, []).append(result)
            finally:
                for side in sides:
                    side.server.stop()
                    side.lag_samples = side.server.lag_samples()
            cold = [
                await _cold(root, model_url, model_proc.base_url, i, before)
                for i in range(cold_rounds)
            ]
    _figures(section, sides[:2], cold)
    if before is not None:
        _before_figures(section, sides[2], sides[0], cold)
    return section


def _before_figures(
    section: Section, before: Side, ours_side: Side, cold: list[dict[str, float]]
) -> None:
    """Ours against the same code from another tree, both measured in this run."""
    for scenario in SCENARIOS:
        section.add(
            f"wall, {scenario}: this tree vs before (median)",
            _med([r.wall for r in ours_side.results[scenario]]),
            "ms",
            baseline=_med([r.wall for r in before.results[scenario]]),
            baseline_name="before",
        )
    for scenario in SCENARIOS:
        section.add(
            f"server CPU per {scenario} turn: this tree vs before (median)",
            _med([r.cpu for r in ours_side.results[scenario]]),
            "ms",
            baseline=_med([r.cpu for r in before.results[scenario]]),
            baseline_name="before",
        )
    section.add(
        "first model request: this tree vs before (median)",
        _med([r.first_model_request for rs in ours_side.results.values() for r in rs]),
        "ms",
        baseline=_med([r.first_model_request for rs in before.results.values() for r in rs]),
        baseline_name="before",
    )
    section.add(
        "event lag p50: this tree vs before",
        percentile([x for rs in ours_side.results.values() for r in rs for x in r.lags], 50),
        "ms",
        baseline=percentile([x for rs in before.results.values() for r in rs for x in r.lags], 50),
        baseline_name="before",
    )
    section.add(
        "cold first turn: this tree vs before (median)",
        _med([c["ours_wall"] for c in cold]),
        "ms",
        baseline=_med([c["before_wall"] for c in cold]),
        baseline_name="before",
    )
    turns = sum(len(v) for v in before.results.values())
    section.add(
        f"new model connections in {turns} warm turns: this tree vs before",
        sum(r.new_connections for rs in ours_side.results.values() for r in rs),
        "",
        baseline=sum(r.new_connections for rs in before.results.values() for r in rs) or None,
        baseline_name="before",
    )
    worst_a, _ = _lag_in(ours_side.lag_samples, [r.window for r in ours_side.results["read16"]])
    worst_b, _ = _lag_in(before.lag_samples, [r.window for r in before.results["read16"]])
    section.add(
        "max loop lag in read16 turns: this tree vs before",
        worst_a,
        "ms",
        baseline=worst_b,
        baseline_name="before",
    )


def _figures(section: Section, sides: list[Side], cold: list[dict[str, float]]) -> None:
    ours_side, floor_side = sides
    targets = {"shell8": Target.ratio_at_most(1.3), "read16": Target.ratio_at_most(1.3)}
    labels = {"shell8": "8 approved shell calls", "read16": "16 read_file calls"}
    for scenario in SCENARIOS:
        a = [r.wall for r in ours_side.results[scenario]]
        b = [r.wall for r in floor_side.results[scenario]]
        section.add(
            f"wall, {labels[scenario]} (median)",
            _med(a),
            "ms",
            target=targets[scenario],
            baseline=_med(b),
            baseline_name="floor",
        )

    def all_of(side: Side, attr: str) -> list[float]:
        values: list[float] = []
        for results in side.results.values():
            for r in results:
                v = getattr(r, attr)
                values.extend(v if isinstance(v, list) else [v])
        return values

    for scenario in SCENARIOS:
        section.add(
            f"server CPU per turn, {labels[scenario]} (median)",
            _med([r.cpu for r in ours_side.results[scenario]]),
            "ms",
            baseline=_med([r.cpu for r in floor_side.results[scenario]]),
            baseline_name="floor",
        )
    first_a, first_b = (
        all_of(ours_side, "first_model_request"),
        all_of(floor_side, "first_model_request"),
    )
    section.add(
        "first model request after POST /turns (median)",
        _med(first_a),
        "ms",
        target=Target.ratio_at_most(2),
        baseline=_med(first_b),
        baseline_name="floor",
    )
    section.add(
        "POST /turns -> 202 (median)",
        _med(all_of(ours_side, "accepted")),
        "ms",
        baseline=_med(all_of(floor_side, "accepted")),
        baseline_name="floor",
    )
    lag_a, lag_b = all_of(ours_side, "lags"), all_of(floor_side, "lags")
    section.add(
        "event lag publish->client p50",
        percentile(lag_a, 50),
        "ms",
        target=Target.at_most(2),
        baseline=percentile(lag_b, 50),
        baseline_name="floor",
    )
    section.add(
        "event lag publish->client p99",
        percentile(lag_a, 99),
        "ms",
        target=Target.at_most(10),
        baseline=percentile(lag_b, 99),
        baseline_name="floor",
    )
    appr_a, appr_b = all_of(ours_side, "approvals"), all_of(floor_side, "approvals")
    section.add(
        "approval round trip in a shell8 turn p50",
        percentile(appr_a, 50),
        "ms",
        baseline=percentile(appr_b, 50),
        baseline_name="floor",
    )
    section.add(
        "approval round trip in a shell8 turn p99",
        percentile(appr_a, 99),
        "ms",
        baseline=percentile(appr_b, 99),
        baseline_name="floor",
    )
    cold_a = [c["ours_wall"] for c in cold]
    cold_b = [c["floor_wall"] for c in cold]
    section.add(
        "cold first turn (read16) after start (median)",
        _med(cold_a),
        "ms",
        target=Target.ratio_at_most(2),
        baseline=_med(cold_b),
        baseline_name="floor",
    )
    section.add(
        "cold: first model request after POST",
        _med([c["ours_first_model_request"] for c in cold]),
        "ms",
        baseline=_med([c["floor_first_model_request"] for c in cold]),
        baseline_name="floor",
    )
    section.add(
        "start -> ready (process start to /healthz)",
        _med([c["ours_ready_s"] for c in cold]) * 1e3,
        "ms",
        baseline=_med([c["floor_ready_s"] for c in cold]) * 1e3,
        baseline_name="floor",
    )
    conn_a = sum(all_of(ours_side, "new_connections"))
    conn_b = sum(all_of(floor_side, "new_connections"))
    turns = sum(len(v) for v in ours_side.results.values())
    section.add(
        f"new model connections in {turns} warm turns",
        conn_a,
        "",
        baseline=conn_b or None,
        baseline_name="floor",
    )
    for scenario in SCENARIOS:
        worst_a, over_a = _lag_in(
            ours_side.lag_samples, [r.window for r in ours_side.results[scenario]]
        )
        worst_b, over_b = _lag_in(
            floor_side.lag_samples, [r.window for r in floor_side.results[scenario]]
        )
        section.add(
            f"max event-loop lag in {labels[scenario]} turns",
            worst_a,
            "ms",
            baseline=worst_b,
            baseline_name="floor",
        )
        section.add(
            f"loop wake-ups > 1 ms late per {scenario} turn",
            over_a,
            "",
            baseline=over_b or None,
            baseline_name="floor",
        )
    section.details = {
        side.name: {
            scenario: {
                "wall_ms": [round(r.wall, 2) for r in results],
                "first_model_request_ms": [round(r.first_model_request, 2) for r in results],
            }
            for scenario, results in side.results.items()
        }
        for side in sides
    }
    section.details["cold"] = cold


async def run(quick: bool = False) -> Section:
    """The entry point of ``python -m benchmarks --only turn``."""
    return await measure(quick)


async def profile(scenario: str, turns: int, out: Path) -> None:
    """Run ``turns`` turns of ``scenario`` on our server under cProfile; print the top."""
    with tempfile.TemporaryDirectory(prefix="toolrelay-turn-prof-") as tmp:
        root = Path(tmp)
        model_proc = TurnServer(
            root / "model", [sys.executable, "-m", "benchmarks.turn_model"], bare=True
        )
        with model_proc:
            server = ours(
                root / "ours", f"{model_proc.base_url}/v1", env={"BENCH_PROFILE": str(out)}
            )
            side = Side("ours", server)
            server.start()
            try:
                ws_root = _workspace(root / "ws")
                async with (
                    server.http() as http,
                    httpx2.AsyncClient(base_url=model_proc.base_url, timeout=30) as model,
                ):
                    started = time.perf_counter()
                    for _ in range(turns):
                        await run_turn(side, scenario, http, model, ws_root)
                    print(f"{turns} {scenario} turns in {time.perf_counter() - started:.2f} s")
            finally:
                server.stop()
    stats = pstats.Stats(str(out))
    stats.sort_stats("tottime").print_stats(35)
    stats.sort_stats("cumulative").print_stats(45)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.turn", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument(
        "--before",
        type=Path,
        help="also run ours from this source tree (e.g. an export of HEAD), interleaved",
    )
    parser.add_argument("--profile", choices=SCENARIOS, help="profile our server on a scenario")
    parser.add_argument("--profile-turns", type=int, default=30)
    parser.add_argument("--profile-out", type=Path, default=Path("/tmp/toolrelay-turn.prof"))
    args = parser.parse_args(argv)
    if args.profile:
        asyncio.run(profile(args.profile, args.profile_turns, args.profile_out))
        return 0
    load = os.getloadavg()
    section = asyncio.run(measure(args.quick, args.rounds, args.before))
    print(table(section.figures))
    print(f"load average at start {load[0]:.2f}, at end {os.getloadavg()[0]:.2f}")
    with contextlib.suppress(KeyError):
        for name in ("ours", "floor", "before"):
            for scenario in SCENARIOS:
                walls = section.details[name][scenario]["wall_ms"]
                print(f"{name:5} {scenario:6} wall ms: {walls}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
