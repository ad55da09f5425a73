"""OpenTelemetry traces from the event stream: a real app driven in-process over
HTTP (ASGI), spans captured by the SDK's InMemorySpanExporter handed to the same
code path an OTLP exporter takes (``Observer.span_exporter_factory``)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from server.app import create_app
from server.auth import TokenRegistry
from server.config import load_config
from server.runtime import Services
from server.tracing import tracing_configured, tracing_from_env
from tests.harness import REPO_ROOT
from tests.server.support import WAIT, use

TOKEN = "test-admin-tracing-0123456789abcdef"


@dataclass
class App:
    runtime: Services
    http: httpx2.AsyncClient
    exporter: InMemorySpanExporter
    workspace: Path


@pytest.fixture
async def app(tmp_path: Path, workspace: Path) -> AsyncIterator[App]:
    config = load_config(
        None,
        env={"TOOLRELAY_TOKEN": TOKEN},
        overrides={"server.data_dir": str(tmp_path / "data"), "server.port": 0},
    )
    application = create_app(config, TokenRegistry(config.auth.tokens))
    runtime: Services = application.state.runtime
    exporter = InMemorySpanExporter()
    runtime.observer.span_exporter_factory = lambda: exporter
    (workspace / "notes.txt").write_text("hello\n", encoding="utf-8")
    await runtime.start()
    transport = httpx2.ASGITransport(app=application)
    try:
        async with httpx2.AsyncClient(
            transport=transport,
            base_url="http://toolrelay.test",
            headers={"Authorization": f"Bearer {TOKEN}", "X-Client-Name": "tracer"},
            timeout=WAIT,
        ) as http:
            yield App(runtime, http, exporter, workspace)
    finally:
        await runtime.stop()


async def _session(app: App, **body: Any) -> str:
    r = await app.http.post("/sessions", json={"workspace": str(app.workspace), **body})
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


async def _wait(app: App, sid: str, tid: str) -> dict[str, Any]:
    async with asyncio.timeout(WAIT):
        while True:
            turn: dict[str, Any] = (await app.http.get(f"/sessions/{sid}/turns/{tid}")).json()
            if turn["status"] != "running":
                return turn
            await asyncio.sleep(0.02)


async def _answer_one_confirmation(app: App, sid: str, tid: str) -> None:
    async with asyncio.timeout(WAIT):
        while True:
            pending = (await app.http.get(f"/sessions/{sid}/confirmations")).json()
            if pending["confirmations"]:
                break
            await asyncio.sleep(0.02)
    request_id = pending["confirmations"][0]["request_id"]
    await asyncio.sleep(0.05)  # a wait the span must show
    r = await app.http.post(
        f"/sessions/{sid}/turns/{tid}/confirmations/{request_id}", json={"decision": "allow"}
    )
    assert r.status_code == 200, r.text


def _spans(app: App) -> list[ReadableSpan]:
    return list(app.exporter.get_finished_spans())


async def test_a_tool_uses_turn_is_a_turn_span_with_one_child_per_tool_call(app: App) -> None:
    sid = await _session(app)
    r = await app.http.post(
        f"/sessions/{sid}/turns",
        json={
            "tool_uses": [
                use("tu_read", "read_file", path="notes.txt"),
                use("tu_write", "write_file", path="out.txt", content="x\n"),
                use("tu_ghost", "no_such_tool"),
            ]
        },
    )
    assert r.status_code == 202, r.text
    tid = r.json()["turn_id"]
    await _answer_one_confirmation(app, sid, tid)
    assert (await _wait(app, sid, tid))["status"] == "completed"
    await app.runtime.stop()  # drains the observer and exports every span

    spans = _spans(app)
    turns = [s for s in spans if s.name == "turn"]
    assert len(turns) == 1
    turn = turns[0]
    assert turn.attributes is not None
    assert turn.attributes["toolrelay.session_id"] == sid
    assert turn.attributes["toolrelay.turn_id"] == tid
    assert turn.attributes["toolrelay.turn.status"] == "completed"
    assert turn.parent is None
    tools = {
        s.attributes["toolrelay.tool_use_id"]: s
        for s in spans
        if s.attributes is not None and s.name.startswith("execute_tool ")
    }
    assert set(tools) == {"tu_read", "tu_write", "tu_ghost"}
    assert turn.context is not None
    for span in tools.values():
        # Parented by the turn, in the turn's trace, carrying the events' ids.
        assert span.parent is not None
        assert span.parent.span_id == turn.context.span_id
        assert span.context is not None
        assert span.context.trace_id == turn.context.trace_id
        assert span.attributes is not None
        assert span.attributes["toolrelay.turn_id"] == tid
        assert span.attributes["toolrelay.session_id"] == sid
        assert span.start_time is not None and span.end_time is not None
        assert turn.start_time is not None and turn.end_time is not None
        assert turn.start_time <= span.start_time <= span.end_time <= turn.end_time

    read = tools["tu_read"].attributes
    assert read is not None
    assert read["toolrelay.tool.name"] == "read_file"
    assert read["toolrelay.tool.side_effects"] == "read"
    assert "toolrelay.tool.error_class" not in read
    assert tools["tu_read"].status.status_code != StatusCode.ERROR

    write = tools["tu_write"].attributes
    assert write is not None
    assert write["toolrelay.tool.side_effects"] == "write"
    assert write["toolrelay.confirmation.decision"] == "allow"
    assert float(write["toolrelay.confirmation.wait_ms"]) >= 40.0  # type: ignore[arg-type]

    ghost = tools["tu_ghost"]
    assert ghost.attributes is not None
    assert ghost.attributes["toolrelay.tool.error_class"] == "not_found"
    assert ghost.status.status_code == StatusCode.ERROR
    # A client played the model: no model-call span.
    assert not [s for s in spans if s.name == "chat"]


async def test_a_model_turn_has_a_model_call_span_per_step(app: App) -> None:
    sid = await _session(app, model="scripted")
    # The offline model turns "read <path>" into a read_file call, then answers.
    r = await app.http.post(f"/sessions/{sid}/turns", json={"message": "read notes.txt"})
    assert r.status_code == 202, r.text
    tid = r.json()["turn_id"]
    assert (await _wait(app, sid, tid))["status"] == "completed"
    await app.runtime.stop()

    spans = _spans(app)
    (turn,) = [s for s in spans if s.name == "turn"]
    assert turn.context is not None
    chats = sorted((s for s in spans if s.name == "chat"), key=lambda s: s.start_time or 0)
    assert len(chats) == 2  # one call asks for the tool, the next answers
    tool_spans = [s for s in spans if s.name == "execute_tool read_file"]
    assert len(tool_spans) == 1
    for span in [*chats, *tool_spans]:
        assert span.parent is not None and span.parent.span_id == turn.context.span_id
        assert span.attributes is not None
        assert span.attributes["toolrelay.turn_id"] == tid
    first, second = chats
    assert first.attributes is not None
    assert first.attributes["toolrelay.model.tool_calls"] == 1
    # In order: model call, its tool call, the next model call.
    tool = tool_spans[0]
    assert first.end_time is not None and tool.start_time is not None
    assert tool.end_time is not None and second.start_time is not None
    assert first.end_time <= tool.start_time <= tool.end_time <= second.start_time
    assert turn.attributes is not None
    assert turn.attributes["gen_ai.request.model"] == "scripted"


def test_without_configuration_there_is_no_tracing_handler() -> None:
    assert tracing_from_env({}) is None
    assert not tracing_configured({"OTEL_SERVICE_NAME": "x"})
    assert not tracing_configured(
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_SDK_DISABLED": "true"}
    )
    assert not tracing_configured(
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_TRACES_EXPORTER": "none"}
    )
    assert tracing_configured({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"})
    assert tracing_configured({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318"})
    assert tracing_configured({"OTEL_TRACES_EXPORTER": "otlp"})
    # And the server does not even import the SDK when it is not configured.
    code = (
        "import sys, server.app, server.observer, server.metrics, server.tracing;"
        "assert 'opentelemetry.sdk.trace' not in sys.modules, 'SDK imported'"
    )
    subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, check=True, timeout=60)


def test_an_otlp_endpoint_builds_the_otlp_exporter() -> None:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    tracing = tracing_from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"})
    assert tracing is not None
    try:
        processors = tracing.provider._active_span_processor._span_processors
        exporters = [p.span_exporter for p in processors]  # type: ignore[attr-defined]
        assert any(isinstance(e, OTLPSpanExporter) for e in exporters)
    finally:
        tracing.shutdown()  # nothing was recorded, so nothing is sent
