"""OpenTelemetry traces, built from the event stream (see server.observer).

On only when configured through the standard variables: an OTLP endpoint
(``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``),
or ``OTEL_TRACES_EXPORTER`` naming ``otlp`` or ``console``; never when
``OTEL_SDK_DISABLED=true`` or ``OTEL_TRACES_EXPORTER=none``. Unconfigured,
nothing is imported and no handler runs. The exporter (OTLP over HTTP/protobuf)
reads the rest of its settings (headers, timeout, compression) from the
``OTEL_EXPORTER_OTLP_*`` variables itself; the resource from
``OTEL_SERVICE_NAME`` / ``OTEL_RESOURCE_ATTRIBUTES`` (service name default:
``toolrelay``). The SDK and exporter are the ``otel`` extra.

One trace per turn: a ``turn`` span, and under it a ``chat`` span per model
call and an ``execute_tool <name>`` span per tool call. Spans carry the ids
the events carry (``toolrelay.session_id``, ``toolrelay.turn_id``,
``toolrelay.tool_use_id``), so a trace leads back to the event log. Start and
end times are the events' own timestamps. The tracer provider is private to
the app (never the global one), so several apps in one process do not mix.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from eventbus.record import EventRecord
from protocol.catalog import EventType
from protocol.extras import require
from server.event_handler import Load, event_time

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.trace import Span, Tracer

log = logging.getLogger("toolrelay.tracing")

SERVICE_NAME = "toolrelay"
_NS = 1_000_000_000
# Which model a turn used is known at its end; its spans may outlive a
# never-ended turn only until this many turns are open (then the oldest go).
MAX_OPEN_TURNS = 10_000


def tracing_configured(environ: Mapping[str, str]) -> bool:
    """Whether the ``OTEL_*`` variables ask for traces."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporters = {
        e.strip().lower() for e in environ.get("OTEL_TRACES_EXPORTER", "").split(",") if e.strip()
    }
    if "none" in exporters:
        return False
    if exporters & {"otlp", "console"}:
        return True
    return bool(
        environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
        or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
    )


def tracing_from_env(
    environ: Mapping[str, str] | None = None,
    *,
    exporter_factory: Callable[[], SpanExporter] | None = None,
) -> Tracing | None:
    """A Tracing handler if traces are configured (or an exporter is handed in),
    else None, without importing OpenTelemetry at all. Configured without the
    ``otel`` extra: ``protocol.extras.MissingExtra``."""
    env = os.environ if environ is None else environ
    if exporter_factory is None:
        if not tracing_configured(env):
            return None
        require("otel")
        exporter_factory = _exporter_factory(env)
    from opentelemetry.sdk.resources import OTELResourceDetector, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    # Resource.create() reads OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES.
    resource = Resource.create({"service.name": SERVICE_NAME}).merge(
        OTELResourceDetector().detect()
    )
    provider = TracerProvider(resource=resource, shutdown_on_exit=False)
    # Batched, exported from the processor's own thread: the event loop never
    # waits on the collector.
    provider.add_span_processor(BatchSpanProcessor(exporter_factory()))
    return Tracing(provider)


def _exporter_factory(environ: Mapping[str, str]) -> Callable[[], SpanExporter]:
    exporters = {e.strip().lower() for e in environ.get("OTEL_TRACES_EXPORTER", "").split(",")}
    if "console" in exporters and "otlp" not in exporters:
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter


@dataclass(slots=True)
class _Turn:
    span: Span
    context: Any
    source: str
    model: Span | None = None
    tools: dict[str, Span] = field(default_factory=dict)
    # tool_use_id -> epoch seconds the confirmation was requested at
    asked: dict[str, float] = field(default_factory=dict)


class Tracing:
    """The event handler that turns a turn's events into spans."""

    types: frozenset[str] = frozenset(
        {
            EventType.TURN_STARTED,
            EventType.TURN_COMPLETED,
            EventType.TURN_FAILED,
            EventType.TURN_CANCELLED,
            EventType.MESSAGE_COMPLETED,
            EventType.TOOL_CALLED,
            EventType.TOOL_INPUT_INVALID,
            EventType.TOOL_CONFIRMATION_REQUESTED,
            EventType.TOOL_CONFIRMATION_RESOLVED,
            EventType.TOOL_COMPLETED,
            EventType.TOOL_FAILED,
        }
    )

    def __init__(self, provider: TracerProvider) -> None:
        from opentelemetry import trace
        from opentelemetry.trace import Status, StatusCode

        self.provider = provider
        self.tracer: Tracer = provider.get_tracer("toolrelay")
        self._trace = trace
        self._error = Status(StatusCode.ERROR)
        self._status = Status
        self._error_code = StatusCode.ERROR
        self._turns: dict[str, _Turn] = {}

    def shutdown(self) -> None:
        """End what is still open, export everything (blocking: call off the loop)."""
        for turn in list(self._turns.values()):
            turn.span.end()
        self._turns.clear()
        self.provider.shutdown()

    def force_flush(self) -> bool:
        return self.provider.force_flush()

    # -- events -------------------------------------------------------------------------

    def handle(self, record: EventRecord, load: Load) -> None:
        type_ = record.type
        if type_ == EventType.TURN_STARTED:
            self._turn_started(record, load(record))
            return
        turn = self._turns.get(record.turn_id or "")
        if turn is None:
            return  # a turn that began before the observer: no parent to hang it on
        data = load(record)
        at = _ns(record.ts)
        if type_ == EventType.MESSAGE_COMPLETED:
            self._message(turn, record, data, at)
        elif type_.startswith("tool."):
            self._tool(turn, record, data, at)
        else:
            self._turn_ended(turn, record, data, at)

    def _ids(self, record: EventRecord) -> dict[str, Any]:
        return {"toolrelay.session_id": record.session_id, "toolrelay.turn_id": record.turn_id}

    def _turn_started(self, record: EventRecord, data: dict[str, Any]) -> None:
        if record.turn_id is None:
            return
        source = str(data.get("source") or "unknown")
        attributes = self._ids(record)
        attributes["toolrelay.turn.source"] = source
        if isinstance(data.get("number"), int):
            attributes["toolrelay.turn.number"] = data["number"]
        span = self.tracer.start_span("turn", attributes=attributes, start_time=_ns(record.ts))
        if len(self._turns) >= MAX_OPEN_TURNS:
            oldest = next(iter(self._turns))
            self._turns.pop(oldest).span.end()
        self._turns[record.turn_id] = _Turn(span, self._trace.set_span_in_context(span), source)

    def _message(self, turn: _Turn, record: EventRecord, data: dict[str, Any], at: int) -> None:
        if turn.source != "message":
            return  # a client played the model: there is no model call
        message = data.get("message")
        role = message.get("role") if isinstance(message, dict) else None
        if role in ("user", "tool"):
            attributes = self._ids(record)
            attributes["gen_ai.operation.name"] = "chat"
            turn.model = self.tracer.start_span(
                "chat", context=turn.context, attributes=attributes, start_time=at
            )
        elif role == "assistant" and turn.model is not None:
            content = message.get("content") if isinstance(message, dict) else None
            blocks = content if isinstance(content, list) else []
            uses = sum(1 for b in blocks if isinstance(b, dict) and b.get("type") == "tool_use")
            turn.model.set_attribute("toolrelay.model.tool_calls", uses)
            turn.model.end(end_time=at)
            turn.model = None

    def _tool(self, turn: _Turn, record: EventRecord, data: dict[str, Any], at: int) -> None:
        type_ = record.type
        tool_use_id = str(data.get("tool_use_id") or "")
        span = turn.tools.get(tool_use_id)
        if span is None and type_ in (EventType.TOOL_COMPLETED, EventType.TOOL_FAILED):
            # Ended before it ran (denied, unknown tool...): a span of its duration.
            duration = data.get("duration_ms")
            ms = duration if isinstance(duration, int | float) else 0
            span = self._tool_span(turn, record, data, at - int(ms * 1_000_000))
        elif span is None:
            span = self._tool_span(turn, record, data, at)
        if type_ == EventType.TOOL_CALLED:
            span.set_attribute("toolrelay.tool.side_effects", str(data.get("side_effects")))
            if data.get("rating") is not None:
                span.set_attribute("toolrelay.tool.rating", str(data["rating"]))
            span.add_event(EventType.TOOL_CALLED, timestamp=at)
        elif type_ == EventType.TOOL_CONFIRMATION_REQUESTED:
            span.set_attribute("toolrelay.tool.side_effects", str(data.get("side_effects")))
            span.set_attribute("toolrelay.confirmation.request_id", str(data.get("request_id")))
            turn.asked[tool_use_id] = at / _NS
            span.add_event(EventType.TOOL_CONFIRMATION_REQUESTED, timestamp=at)
        elif type_ == EventType.TOOL_CONFIRMATION_RESOLVED:
            span.set_attribute("toolrelay.confirmation.decision", str(data.get("decision")))
            span.set_attribute("toolrelay.confirmation.resolved_by", str(data.get("resolved_by")))
            asked = turn.asked.pop(tool_use_id, None)
            if asked is not None:
                wait_ms = max(0.0, at / _NS - asked) * 1000.0
                span.set_attribute("toolrelay.confirmation.wait_ms", round(wait_ms, 3))
            span.add_event(EventType.TOOL_CONFIRMATION_RESOLVED, timestamp=at)
        elif type_ == EventType.TOOL_COMPLETED:
            self._end_tool(turn, tool_use_id, span, data, None, None, at)
        elif type_ == EventType.TOOL_FAILED:
            error_class = str(data.get("error_class"))
            self._end_tool(turn, tool_use_id, span, data, error_class, data.get("message"), at)
        elif type_ == EventType.TOOL_INPUT_INVALID:
            self._end_tool(turn, tool_use_id, span, data, "validation_error", None, at)

    def _tool_span(self, turn: _Turn, record: EventRecord, data: dict[str, Any], at: int) -> Span:
        name = str(data.get("tool_name") or "unknown")
        tool_use_id = str(data.get("tool_use_id") or "")
        attributes = self._ids(record)
        attributes.update(
            {
                "toolrelay.tool_use_id": tool_use_id,
                "toolrelay.tool.name": name,
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": name,
                "gen_ai.tool.call.id": tool_use_id,
            }
        )
        span = self.tracer.start_span(
            f"execute_tool {name}", context=turn.context, attributes=attributes, start_time=at
        )
        turn.tools[tool_use_id] = span
        return span

    def _end_tool(
        self,
        turn: _Turn,
        tool_use_id: str,
        span: Span,
        data: dict[str, Any],
        error_class: str | None,
        message: Any,
        at: int,
    ) -> None:
        duration = data.get("duration_ms")
        if isinstance(duration, int | float):
            span.set_attribute("toolrelay.tool.duration_ms", duration)
        if error_class is not None:
            span.set_attribute("toolrelay.tool.error_class", error_class)
            span.set_attribute("error.type", error_class)
            text = message if isinstance(message, str) else error_class
            span.set_status(self._status(self._error_code, text[:500]))
        span.end(end_time=at)
        turn.tools.pop(tool_use_id, None)
        turn.asked.pop(tool_use_id, None)

    def _turn_ended(self, turn: _Turn, record: EventRecord, data: dict[str, Any], at: int) -> None:
        status = record.type.partition(".")[2]  # completed | failed | cancelled
        self._turns.pop(record.turn_id or "", None)
        span = turn.span
        span.set_attribute("toolrelay.turn.status", status)
        model = data.get("model")
        if isinstance(model, str):
            span.set_attribute("gen_ai.request.model", model)
        usage = data.get("usage")
        if isinstance(usage, dict):
            for key in ("input_tokens", "output_tokens"):
                if isinstance(usage.get(key), int):
                    span.set_attribute(f"gen_ai.usage.{key}", usage[key])
        reason = data.get("reason")
        failed = status == "failed"
        if isinstance(reason, str):
            span.set_attribute("toolrelay.turn.reason", reason)
        # Whatever is still open ends with the turn (a cancelled or failed turn).
        if turn.model is not None:
            if isinstance(model, str):
                turn.model.set_attribute("gen_ai.request.model", model)
            if failed and reason == "model_error":
                kind = str(data.get("error_kind") or "model_error")
                turn.model.set_attribute("error.type", kind)
                turn.model.set_status(self._status(self._error_code, str(data.get("message", ""))))
            turn.model.end(end_time=at)
        for tool_span in turn.tools.values():
            tool_span.end(end_time=at)
        if failed:
            span.set_status(self._status(self._error_code, str(data.get("message") or reason)))
        span.end(end_time=at)


def _ns(ts: str) -> int:
    return int(event_time(ts) * _NS)
