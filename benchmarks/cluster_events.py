"""Events through Redis (the cluster log) vs the embedded bus.

Run: ``.venv/bin/python benchmarks/cluster_events.py [--events N] [--lag-events M]``

Starts Debian's redis-server on 127.0.0.1 (a free port, a temp dir,
appendonly with ``appendfsync everysec``, as a cluster would run it) and,
for each side, one publisher and one live subscriber in this process:

- throughput: N events published in bursts of 100 (each bus's writer
  batches what is pending: a SQLite commit, or one Redis script call) until
  the subscriber received the last one: events/s end to end;
- lag: M events published one at a time, a millisecond apart; the time from
  the publish call to the subscriber holding the event (median, p95, max);
- a confirmation answer (the AnswerArbiter script) run on the owner vs sent
  from another replica through the Forwarder (median round trip);
- through two real ``toolrelay serve`` replicas (A owns the session): the
  HTTP round trip of ``POST .../confirmations/{id}`` answered on A (the
  owner) vs on B (forwarded to A), each on its own pending request of a
  write turn (``--server-answers`` of each; 0 skips the servers).

On the Redis side the publisher and the subscriber are two ClusterBus
"replicas" with their own connections; the subscriber's events come through
its LiveFeed (XREAD BLOCK), as another replica's client would get them.
The embedded side is eventbus.EventBus with a file log (its child-process
writer). It asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis.asyncio as aioredis

from eventbus import EventBus, EventLog, Subscription
from eventbus.cluster.answers import AnswerArbiter
from eventbus.cluster.bus import ClusterBus
from eventbus.cluster.forwarding import Forwarder
from tests.harness import ServerProcess

BATCH = 100
TYPE = "message.delta"
Publish = Callable[[list[dict[str, float]]], Awaitable[None]]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def _measure(
    publish: Publish, sub: Subscription, events: int, lag_events: int
) -> dict[str, float]:
    """Throughput, then lag, through one publisher and one subscriber."""

    async def drain(count: int, lags: list[float] | None) -> None:
        got = 0
        async with asyncio.timeout(300):
            async for record in sub:
                if lags is not None:
                    lags.append(time.perf_counter() - record.event.data["t"])
                got += 1
                if got == count:
                    return

    started = time.perf_counter()
    reader = asyncio.create_task(drain(events, None))
    for start in range(0, events, BATCH):
        await publish([{"t": 0.0, "i": float(i)} for i in range(start, min(events, start + BATCH))])
    await reader
    rate = events / (time.perf_counter() - started)
    lags: list[float] = []
    reader = asyncio.create_task(drain(lag_events, lags))
    for _ in range(lag_events):
        await publish([{"t": time.perf_counter()}])
        await asyncio.sleep(0.001)
    await reader
    lags.sort()
    return {
        "events_per_s": rate,
        "lag_median_ms": statistics.median(lags) * 1000,
        "lag_p95_ms": lags[int(len(lags) * 0.95) - 1] * 1000,
        "lag_max_ms": lags[-1] * 1000,
    }


async def embedded(root: Path, events: int, lag_events: int) -> dict[str, float]:
    bus = EventBus(EventLog.open(root / "events.db"), max_queue=events + BATCH)
    await bus.start()
    try:
        sub = await bus.subscribe(session_id="s")

        async def publish(batch: list[dict[str, float]]) -> None:
            for data in batch:
                bus.publish(TYPE, data, session_id="s")
            await asyncio.sleep(0)  # the bus commits and fans out from its own task

        return await _measure(publish, sub, events, lag_events)
    finally:
        await bus.close()


async def through_redis(url: str, events: int, lag_events: int) -> dict[str, float]:
    publisher = aioredis.Redis.from_url(url, decode_responses=True)
    follower = aioredis.Redis.from_url(url, decode_responses=True)
    # Two replicas: one publishes, the other's client receives.
    a = ClusterBus(publisher)
    b = ClusterBus(follower, max_queue=events + BATCH)
    await a.start()
    await b.start()
    try:
        sub = await b.subscribe(session_id="s")

        async def publish(batch: list[dict[str, float]]) -> None:
            for data in batch:
                a.publish(TYPE, data, session_id="s")
            await asyncio.sleep(0)  # the writer appends from its own task

        return await _measure(publish, sub, events, lag_events)
    finally:
        await a.close()
        await b.close()
        await publisher.aclose()
        await follower.aclose()


async def forwarding(url: str, calls: int) -> dict[str, float]:
    """An answer handled on the owner directly vs forwarded from another replica."""
    owner_client = aioredis.Redis.from_url(url, decode_responses=True)
    caller_client = aioredis.Redis.from_url(url, decode_responses=True)
    arbiter = AnswerArbiter(owner_client)
    owner = Forwarder(owner_client, "owner")
    caller = Forwarder(caller_client, "caller")

    async def answer(op: str, payload: dict[str, Any]) -> dict[str, Any]:
        outcome = await arbiter.decide(str(payload["request_id"]), "allow", resolved_by="bench")
        return {"won": outcome.won}

    await owner.serve(answer)
    try:
        direct: list[float] = []
        forwarded: list[float] = []
        for i in range(calls):
            started = time.perf_counter()
            await answer("answer", {"request_id": f"d{i}"})
            direct.append(time.perf_counter() - started)
            started = time.perf_counter()
            await caller.call("owner", "answer", {"request_id": f"f{i}"}, timeout_s=10)
            forwarded.append(time.perf_counter() - started)
    finally:
        await owner.close()
        await owner_client.aclose()
        await caller_client.aclose()
    return {
        "on_owner_ms": statistics.median(direct) * 1000,
        "forwarded_ms": statistics.median(forwarded) * 1000,
    }


async def through_servers(root: Path, url: str, answers: int) -> dict[str, float]:
    """A confirmation answered over HTTP on the owner replica vs another one."""
    import httpx2

    token = "bench-admin-token-0123456789"
    replicas = [
        ServerProcess(root / name, token=token, extra_args=("--redis", url, "--replica-id", name))
        for name in ("A", "B")
    ]
    workspace = root / "ws"
    workspace.mkdir()
    for replica in replicas:
        replica.start()
    times: dict[str, list[float]] = {"A": [], "B": []}
    try:
        a, b = replicas
        async with a.client() as on_a, b.client() as on_b:
            created = await on_a.post("/sessions", json={"workspace": str(workspace)})
            sid = created.json()["id"]
            for i in range(answers * 2):
                name, http = ("A", on_a) if i % 2 == 0 else ("B", on_b)
                write = {
                    "id": f"w{i}",
                    "name": "write_file",
                    "input": {"path": "f", "content": "x"},
                }
                turn = await on_a.post(f"/sessions/{sid}/turns", json={"tool_uses": [write]})
                tid = turn.json()["turn_id"]
                pending: list[dict[str, Any]] = []
                for _ in range(2000):  # bounded wait for the request to be pending
                    body = (await on_a.get(f"/sessions/{sid}/confirmations")).json()
                    pending = body["confirmations"]
                    if pending:
                        break
                    await asyncio.sleep(0.005)
                rid = pending[0]["request_id"]
                url_ = f"/sessions/{sid}/turns/{tid}/confirmations/{rid}"
                started = time.perf_counter()
                answer = await http.post(url_, json={"decision": "allow"})
                times[name].append(time.perf_counter() - started)
                assert answer.status_code == 200, answer.text
                for _ in range(2000):  # the turn ends before the next starts
                    state = (await on_a.get(f"/sessions/{sid}/turns/{tid}")).json()
                    if state["status"] != "running":
                        break
                    await asyncio.sleep(0.005)
    except httpx2.HTTPError as exc:
        raise SystemExit(f"the replicas failed: {exc}") from exc
    finally:
        for replica in replicas:
            replica.stop()
    return {
        "on_owner_ms": statistics.median(times["A"]) * 1000,
        "on_other_ms": statistics.median(times["B"]) * 1000,
    }


def _start_redis(root: Path) -> tuple[subprocess.Popen[bytes], str]:
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("redis-server is missing: run scripts/bootstrap --system as root")
    port = _free_port()
    process = subprocess.Popen(
        [binary, "--bind", "127.0.0.1", "--port", str(port), "--dir", str(root), "--save", "",
         "--appendonly", "yes", "--appendfsync", "everysec"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    for _ in range(500):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return process, f"redis://127.0.0.1:{port}/0"
        except OSError:
            time.sleep(0.01)
    process.kill()
    raise SystemExit("redis-server did not start")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--lag-events", type=int, default=500)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--server-answers", type=int, default=30)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        process, url = _start_redis(root)
        try:
            figures = {
                "embedded": await embedded(root, args.events, args.lag_events),
                "redis": await through_redis(url, args.events, args.lag_events),
            }
            answers = await forwarding(url, args.calls)
            served = (
                await through_servers(root, url, args.server_answers)
                if args.server_answers > 0
                else None
            )
        finally:
            process.terminate()
            process.wait(timeout=10)
    print(f"{'':10} {'events/s':>10} {'lag p50 ms':>11} {'p95 ms':>8} {'max ms':>8}")
    for name, f in figures.items():
        print(
            f"{name:10} {f['events_per_s']:10.0f} {f['lag_median_ms']:11.3f}"
            f" {f['lag_p95_ms']:8.3f} {f['lag_max_ms']:8.3f}"
        )
    print(
        f"confirmation answer (arbiter script), median of {args.calls}: on the owner "
        f"{answers['on_owner_ms']:.3f} ms, forwarded from another replica "
        f"{answers['forwarded_ms']:.3f} ms"
    )
    if served is not None:
        print(
            f"POST confirmation through real replicas, median of {args.server_answers}: "
            f"on the owner {served['on_owner_ms']:.2f} ms, on the other replica "
            f"{served['on_other_ms']:.2f} ms"
        )


if __name__ == "__main__":
    asyncio.run(main())
