"""GET /metrics on a real server subprocess, scraped over HTTP and read with
prometheus_client's own text parser."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from eventbus import EventBus, EventLog, SubscriberTooSlow
from server.metrics import LiveCounts
from server.observer import Observer
from server.presence import Presence
from tests.harness import ServerProcess
from tests.server.support import WAIT, Stream, new_session, start_turn, use, wait_turn

USER_TOKEN = "test-user-metrics-0123456789abcdef"
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@pytest.fixture(scope="module")
def metrics_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("metrics")
    (root / "users").mkdir()
    config = {
        "auth": {
            "tokens": [
                {
                    "name": "viewer",
                    "token": USER_TOKEN,
                    "role": "user",
                    "allowed_roots": [str((root / "users").resolve())],
                }
            ]
        }
    }
    srv = ServerProcess(root / "srv", config=config)
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


async def scrape(http: httpx2.AsyncClient) -> Samples:
    r = await http.get("/metrics")
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain")
    samples: Samples = {}
    for family in text_string_to_metric_families(r.text):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


async def scrape_until(
    http: httpx2.AsyncClient, name: str, at_least: float, **labels: str
) -> Samples:
    """Scrape until a sample reaches a value: the observer reads events just after
    they are committed, so a scrape right after an HTTP answer may be early."""
    async with asyncio.timeout(WAIT):
        while True:
            samples = await scrape(http)
            if value(samples, name, **labels) >= at_least:
                return samples
            await asyncio.sleep(0.05)


async def test_metrics_need_an_admin_token(metrics_server: ServerProcess) -> None:
    async with httpx2.AsyncClient(base_url=metrics_server.base_url, timeout=WAIT) as anon:
        assert (await anon.get("/metrics")).status_code == 401
    async with metrics_server.client(token=USER_TOKEN) as user:
        r = await user.get("/metrics")
        assert r.status_code == 403
        assert r.json()["error"]["code"] == "forbidden"
    async with metrics_server.client() as admin:
        r = await admin.get("/metrics", headers={"Accept": "application/openmetrics-text"})
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("application/openmetrics-text")
        assert r.text.rstrip().endswith("# EOF")


async def test_turns_tool_calls_and_confirmations_are_counted(
    metrics_server: ServerProcess, workspace: Path
) -> None:
    (workspace / "notes.txt").write_text("hello\n", encoding="utf-8")
    async with metrics_server.client("scraper") as http:
        before = await scrape(http)
        sid = await new_session(http, workspace)
        url = metrics_server.ws_url(f"/sessions/{sid}/events", after=0)
        async with await Stream.open(url, after=0) as stream:
            tid = await start_turn(
                http,
                sid,
                use("tu_read", "read_file", path="notes.txt"),
                use("tu_ghost", "no_such_tool"),
                use("tu_write", "write_file", path="out.txt", content="x\n"),
            )
            requested = await stream.until("tool.confirmation_requested")
            # The confirmation waits: the gauge shows it.
            pending = await scrape_until(http, "toolrelay_confirmations_pending", 1)
            assert value(pending, "toolrelay_clients_attached") >= 1
            assert value(pending, "toolrelay_turns_running") >= 1
            request_id = requested["data"]["request_id"]
            r = await http.post(
                f"/sessions/{sid}/turns/{tid}/confirmations/{request_id}",
                json={"decision": "deny", "message": "not now"},
            )
            assert r.status_code == 200, r.text
            assert (await wait_turn(http, sid, tid))["status"] == "completed"
            await stream.until("turn.completed")
        after = await scrape_until(
            http,
            "toolrelay_turns_total",
            value(before, "toolrelay_turns_total", status="completed") + 1,
            status="completed",
        )

    def grew(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert grew("toolrelay_turns_started_total", source="tool_uses") == 1
    assert grew("toolrelay_turns_total", status="completed") == 1
    assert grew("toolrelay_turn_duration_seconds_count", status="completed") == 1
    ok = {"tool": "read_file", "outcome": "completed", "error_class": ""}
    assert grew("toolrelay_tool_calls_total", **ok) == 1
    # A tool the model made up is not a label of its own.
    ghost = {"tool": "_other", "outcome": "failed", "error_class": "not_found"}
    assert grew("toolrelay_tool_calls_total", **ghost) == 1
    denied = {"tool": "write_file", "outcome": "failed", "error_class": "user_denied"}
    assert grew("toolrelay_tool_calls_total", **denied) == 1
    assert grew("toolrelay_tool_duration_seconds_count", tool="read_file", outcome="completed") == 1
    assert grew("toolrelay_confirmations_total", decision="deny") == 1
    assert grew("toolrelay_confirmation_wait_seconds_count", decision="deny") == 1
    assert value(after, "toolrelay_confirmations_pending") == 0
    # The event log and the bus.
    assert value(after, "toolrelay_event_bus_published_total") > 0
    assert value(after, "toolrelay_event_bus_committed_total") > 0
    assert (
        0
        < value(after, "toolrelay_event_log_events")
        <= value(after, "toolrelay_event_log_last_seq")
    )
    assert value(after, "toolrelay_event_log_bytes") > 0
    assert grew("toolrelay_event_delivery_lag_seconds_count") > 0
    assert grew("toolrelay_events_observed_total", type="tool.confirmation_resolved") == 1


async def test_attached_clients_follow_presence(
    metrics_server: ServerProcess, workspace: Path
) -> None:
    async with metrics_server.client("scraper") as http:
        sid = await new_session(http, workspace)
        base = value(await scrape(http), "toolrelay_clients_attached")
        url = metrics_server.ws_url(f"/sessions/{sid}/events", after=0, client="watcher")
        async with await Stream.open(url, after=0) as stream:
            await stream.until("client.attached")
            assert value(await scrape(http), "toolrelay_clients_attached") == base + 1
        async with asyncio.timeout(WAIT):
            while True:
                if value(await scrape(http), "toolrelay_clients_attached") == base:
                    break
                await asyncio.sleep(0.05)


async def test_model_calls_and_provider_errors(
    metrics_server: ServerProcess, workspace: Path
) -> None:
    script = workspace / "script.yaml"
    # One reply only: the second turn asks the model for a reply it does not have.
    script.write_text(yaml.safe_dump(["Hello."]), encoding="utf-8")
    async with metrics_server.client("scraper") as http:
        before = await scrape(http)
        sid = await new_session(http, workspace, model=f"scripted:{script}")
        statuses = []
        for text in ("hi", "again"):
            r = await http.post(f"/sessions/{sid}/turns", json={"message": text})
            assert r.status_code == 202, r.text
            statuses.append((await wait_turn(http, sid, r.json()["turn_id"]))["status"])
        assert statuses == ["completed", "failed"]
        failed = value(before, "toolrelay_turns_total", status="failed")
        after = await scrape_until(http, "toolrelay_turns_total", failed + 1, status="failed")

    def grew(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert grew("toolrelay_turns_started_total", source="message") == 2
    assert grew("toolrelay_model_calls_total") == 1
    assert grew("toolrelay_model_call_duration_seconds_count") == 1
    assert grew("toolrelay_turn_failures_total", reason="model_error") == 1
    errors = {
        labels: v
        for (name, labels), v in after.items()
        if name == "toolrelay_provider_errors_total"
    }
    assert len(errors) == 1
    (labels,) = errors
    assert dict(labels)["provider"] == "scripted"
    assert dict(labels)["error_kind"] == "bad_request"


async def test_the_observer_resumes_from_the_log_without_losing_or_repeating() -> None:
    """A real bus and log; the observer's subscription is cut off as a too-slow
    subscriber would be, while events keep coming: it resumes from its cursor."""
    log = EventLog.open(":memory:")
    bus = EventBus(log)
    await bus.start()
    observer = Observer(LiveCounts(clients=Presence().count, turns_running=lambda: 0))
    await observer.start(bus)
    try:

        def publish_turns(first: int, count: int) -> None:
            for n in range(first, first + count):
                bus.publish(
                    "turn.started", {"source": "tool_uses"}, session_id="s", turn_id=f"t{n}"
                )
                bus.publish("turn.completed", {"usage": None}, session_id="s", turn_id=f"t{n}")

        async def observed(count: int) -> None:
            async with asyncio.timeout(WAIT):
                while True:
                    if observer.metrics.turns.get(("completed",), 0) >= count:
                        return
                    await asyncio.sleep(0.01)

        publish_turns(0, 50)
        await bus.flush()
        await observed(50)
        first = observer.subscription
        assert first is not None
        first._finish(
            SubscriberTooSlow(last_cursor=first.last_cursor, session_id=None, max_queue=1)
        )
        publish_turns(50, 50)  # published while the observer is cut off
        await bus.flush()
        await observed(100)
        assert observer.subscription is not first
        metrics = observer.metrics
        assert metrics.observer_resumes == {(): 1}
        assert metrics.turns == {("completed",): 100}  # none lost, none twice
        assert metrics.turns_started == {("tool_uses",): 100}
        assert metrics.events == {("turn.started",): 100, ("turn.completed",): 100}
        text = metrics.render()[0].decode()
        assert 'toolrelay_turns_total{status="completed"} 100.0' in text
        assert "toolrelay_observer_resumes_total 1.0" in text
    finally:
        await bus.close()
        await observer.stop()
        log.close()
