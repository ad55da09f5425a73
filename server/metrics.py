"""Prometheus metrics, built from the event stream (see server.observer).

Each app has its own CollectorRegistry (never prometheus_client's global
one), so several servers in one process (tests) do not share counters.
Counters and histograms move as the observer reads events; gauges that are
state rather than history (attached clients, running turns, the bus's
counters, the log's size) are read at scrape time by ``_RuntimeCollector``,
so they cost nothing between scrapes.

Label values are bounded: tool names come from the registry, but a model may
call a tool that does not exist, so past ``MAX_TOOL_LABELS`` distinct names
(and for every ``not_found`` call) the tool label is ``_other``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Histogram,
    disable_created_metrics,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector

from eventbus import Bus
from eventbus.record import EventRecord
from protocol.catalog import EventType
from server.event_handler import Load, event_time

# No "<name>_created" series beside every counter and histogram: they double
# the output and Prometheus does not use them from the text format.
disable_created_metrics()  # type: ignore[no-untyped-call]

PREFIX = "toolrelay_"
MAX_TOOL_LABELS = 256
OTHER = "_other"
TURN_ENDS: dict[str, str] = {
    EventType.TURN_COMPLETED: "completed",
    EventType.TURN_FAILED: "failed",
    EventType.TURN_CANCELLED: "cancelled",
}

# Seconds. Tools range from a file read (ms) to a test suite (minutes); a turn
# or a confirmation waits on people.
TOOL_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 600)
TURN_BUCKETS = (0.05, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800)
MODEL_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120)
WAIT_BUCKETS = (0.1, 0.5, 1, 5, 10, 30, 60, 120, 300, 600, 1800)
# The delivery lag is observed for one event in LAG_SAMPLE (by seq), and for
# any event coming LAG_IDLE_S after the last observation: every event of a
# quiet server, a sixteenth of a busy one's (enough for the distribution).
LAG_SAMPLE = 16
LAG_IDLE_S = 0.1
LAG_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


@dataclass(slots=True)
class _Turn:
    started: float
    source: str
    # Start of the model call in progress (a message turn between its user or
    # tool message and the assistant's reply), or None.
    model_since: float | None = None


class _Counters(Collector):
    """Counters kept as plain numbers and exported at scrape time.

    The observer is their only writer, on the event loop, and a scrape reads
    them on the loop too; a prometheus_client Counter would take a lock and
    look up its labels on every increment, which made up most of the
    observer's cost per event."""

    def __init__(self) -> None:
        self._families: list[tuple[str, str, tuple[str, ...], dict[tuple[str, ...], float]]] = []

    def family(self, name: str, help_: str, *labels: str) -> dict[tuple[str, ...], float]:
        values: dict[tuple[str, ...], float] = {}
        self._families.append((name, help_, labels, values))
        return values

    def collect(self) -> Iterator[Metric]:
        for name, help_, labels, values in self._families:
            family = CounterMetricFamily(name, help_, labels=labels)
            for key, value in values.items():
                family.add_metric(key, value)
            yield family


def _inc(values: dict[tuple[str, ...], float], *key: str) -> None:
    values[key] = values.get(key, 0) + 1


class Metrics:
    """The metrics registry of one app, and the event handler that feeds it."""

    types: frozenset[str] = frozenset(
        {
            EventType.TURN_STARTED,
            EventType.TURN_COMPLETED,
            EventType.TURN_FAILED,
            EventType.TURN_CANCELLED,
            EventType.MESSAGE_COMPLETED,
            EventType.MODEL_RETRY,
            EventType.TOOL_COMPLETED,
            EventType.TOOL_FAILED,
            EventType.TOOL_INPUT_INVALID,
            EventType.TOOL_CONFIRMATION_REQUESTED,
            EventType.TOOL_CONFIRMATION_RESOLVED,
        }
    )

    def __init__(self, live: LiveCounts | None = None) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        counters = _Counters()
        self._add_counters(counters)
        r.register(counters)
        self._add_histograms(r)
        self._runtime_collector = _RuntimeCollector(self, live) if live is not None else None
        if self._runtime_collector is not None:
            r.register(self._runtime_collector)
        self._turns: dict[str, _Turn] = {}
        self.pending: dict[str, float] = {}  # confirmation request_id -> requested at
        self._tools: set[str] = set()
        # Histogram children by label values: labels() takes a lock and validates.
        self._tool_hist: dict[tuple[str, str], Any] = {}
        self._lag_at = 0.0  # monotonic time of the last lag observation

    def _add_counters(self, counters: _Counters) -> None:
        """The counter families, each under PREFIX, collected by ``counters``."""
        p = PREFIX
        self.turns_started = counters.family(
            p + "turns_started", "Turns started, by source (message or tool_uses).", "source"
        )
        self.turns = counters.family(
            p + "turns", "Turns ended, by status (completed, failed, cancelled).", "status"
        )
        self.turn_failures = counters.family(
            p + "turn_failures", "Failed turns, by reason (model_error, step_limit, ...).", "reason"
        )
        self.model_calls = counters.family(
            p + "model_calls", "Model calls that returned an assistant message."
        )
        self.provider_errors = counters.family(
            p + "provider_errors",
            "Turns ended by a model or provider error, by provider, error kind and whether "
            "the error was retryable (the adapter retried those before giving up).",
            "provider",
            "error_kind",
            "retryable",
        )
        self.provider_retries = counters.family(
            p + "provider_retries",
            "Model calls retried after a retryable provider error (model.retry events), "
            "by provider and error kind.",
            "provider",
            "error_kind",
        )
        self.tool_calls = counters.family(
            p + "tool_calls",
            "Tool calls ended, by tool, outcome (completed, failed) and error class.",
            "tool",
            "outcome",
            "error_class",
        )
        self.confirmations = counters.family(
            p + "confirmations", "Confirmations resolved, by decision.", "decision"
        )
        self.events = counters.family(
            p + "events_observed", "Events seen by the metrics observer, by type.", "type"
        )
        self.observer_resumes = counters.family(
            p + "observer_resumes", "Times the observer fell behind and resumed from the log."
        )
        self.observer_gaps = counters.family(
            p + "observer_gaps",
            "Times the observer resumed past pruned events (their metrics are missing).",
        )

    def _add_histograms(self, r: CollectorRegistry) -> None:
        """The histograms, each under PREFIX, in registry ``r``."""
        p = PREFIX

        def histogram(name: str, help_: str, buckets: Sequence[float], *labels: str) -> Histogram:
            # Every histogram: named under PREFIX, in this registry.
            return Histogram(p + name, help_, labels, buckets=buckets, registry=r)

        self.turn_duration = histogram(
            "turn_duration_seconds",
            "Turn duration from turn.started to its end.",
            TURN_BUCKETS,
            "status",
        )
        self.model_call_duration = histogram(
            "model_call_duration_seconds",
            "Model call duration: from the message it answers to its reply.",
            MODEL_BUCKETS,
        )
        self.tool_duration = histogram(
            "tool_duration_seconds",
            "Tool call duration as the dispatcher measured it.",
            TOOL_BUCKETS,
            "tool",
            "outcome",
        )
        self.confirmation_wait = histogram(
            "confirmation_wait_seconds",
            "Time from a confirmation request to its answer.",
            WAIT_BUCKETS,
            "decision",
        )
        self.event_lag = histogram(
            "event_delivery_lag_seconds",
            f"Publish to delivery: from an event's ts to the observer receiving it (includes "
            f"the commit to the log); under load sampled, one event in {LAG_SAMPLE}.",
            LAG_BUCKETS,
        )

    # -- the hot path: every event ------------------------------------------------------

    def count_event(self, record: EventRecord) -> None:
        key = (record.type,)
        events = self.events
        events[key] = events.get(key, 0) + 1
        now = time.monotonic()
        if record.seq % LAG_SAMPLE == 0 or now - self._lag_at >= LAG_IDLE_S:
            self._lag_at = now
            self.event_lag.observe(max(0.0, time.time() - event_time(record.ts)))

    # -- events -------------------------------------------------------------------------

    def handle(self, record: EventRecord, load: Load) -> None:
        type_ = record.type
        turn_id = record.turn_id
        if type_ == EventType.TOOL_COMPLETED or type_ == EventType.TOOL_FAILED:
            data = load(record)
            error_class = str(data.get("error_class", "")) if type_ == EventType.TOOL_FAILED else ""
            outcome = "completed" if type_ == EventType.TOOL_COMPLETED else "failed"
            tool = self._tool_label(data.get("tool_name"), error_class)
            _inc(self.tool_calls, tool, outcome, error_class)
            duration = data.get("duration_ms")
            if isinstance(duration, int | float):
                hist = self._tool_hist.get((tool, outcome))
                if hist is None:
                    hist = self._tool_hist[tool, outcome] = self.tool_duration.labels(tool, outcome)
                hist.observe(duration / 1000.0)
        elif type_ == EventType.MESSAGE_COMPLETED:
            turn = self._turns.get(turn_id or "")
            if turn is not None and turn.source == "message":
                self._message(turn, record, load(record))
        elif type_ == EventType.MODEL_RETRY:
            data = load(record)
            _inc(
                self.provider_retries,
                str(data.get("provider") or "unknown"),
                str(data.get("error_kind") or "unknown"),
            )
        elif type_ == EventType.TURN_STARTED:
            source = str(load(record).get("source") or "unknown")
            _inc(self.turns_started, source)
            if turn_id is not None:
                self._turns[turn_id] = _Turn(event_time(record.ts), source)
        elif type_ == EventType.TOOL_INPUT_INVALID:
            tool = self._tool_label(load(record).get("tool_name"), "")
            _inc(self.tool_calls, tool, "failed", "validation_error")
        elif type_ == EventType.TOOL_CONFIRMATION_REQUESTED:
            self.pending[str(load(record).get("request_id"))] = event_time(record.ts)
        elif type_ == EventType.TOOL_CONFIRMATION_RESOLVED:
            data = load(record)
            decision = str(data.get("decision"))
            _inc(self.confirmations, decision)
            asked = self.pending.pop(str(data.get("request_id")), None)
            if asked is not None:
                wait = max(0.0, event_time(record.ts) - asked)
                self.confirmation_wait.labels(decision).observe(wait)
        else:
            self._turn_ended(record, load)

    def _message(self, turn: _Turn, record: EventRecord, data: dict[str, Any]) -> None:
        message = data.get("message")
        role = message.get("role") if isinstance(message, dict) else None
        at = event_time(record.ts)
        if role == "assistant":
            _inc(self.model_calls)
            if turn.model_since is not None:
                self.model_call_duration.observe(max(0.0, at - turn.model_since))
            turn.model_since = None
        elif role in ("user", "tool"):
            turn.model_since = at

    def _turn_ended(self, record: EventRecord, load: Load) -> None:
        status = TURN_ENDS.get(record.type)
        if status is None:
            return
        _inc(self.turns, status)
        turn = self._turns.pop(record.turn_id or "", None)
        if turn is not None:
            duration = max(0.0, event_time(record.ts) - turn.started)
            self.turn_duration.labels(status).observe(duration)
        if status == "failed":
            data = load(record)  # only a failure's payload says anything more
            reason = str(data.get("reason") or "unknown")
            _inc(self.turn_failures, reason)
            if reason == "model_error":
                _inc(
                    self.provider_errors,
                    str(data.get("provider") or "unknown"),
                    str(data.get("error_kind") or "unknown"),
                    str(bool(data.get("retryable"))).lower(),
                )

    def _tool_label(self, name: Any, error_class: str) -> str:
        if not isinstance(name, str) or not name or error_class == "not_found":
            return OTHER
        if name in self._tools:
            return name
        if len(self._tools) >= MAX_TOOL_LABELS:
            return OTHER
        self._tools.add(name)
        return name

    # -- scraping -----------------------------------------------------------------------

    def attach(self, bus: Bus) -> None:
        """The bus whose counters a scrape reports (called once it started)."""
        if self._runtime_collector is not None:
            self._runtime_collector.bus = bus

    async def refresh(self) -> None:
        """Read what must come from the log (off the loop) before a scrape."""
        if self._runtime_collector is not None:
            await self._runtime_collector.refresh()

    def render(self, accept: str | None = None) -> tuple[bytes, str]:
        """The registry in the format ``accept`` prefers (Prometheus text by
        default, OpenMetrics on request), and its content type."""
        encoder, content_type = choose_encoder(accept or "")
        return encoder(self.registry), content_type


@dataclass(frozen=True, slots=True)
class LiveCounts:
    """The server's state the scrape reads beside the bus: clients attached to
    event streams and turns running now (the services hand these in)."""

    clients: Callable[[], int]
    turns_running: Callable[[], int]


def _gauge(name: str, help_: str, *, value: float) -> GaugeMetricFamily:
    """One scrape-time gauge, named under PREFIX."""
    return GaugeMetricFamily(PREFIX + name, help_, value=value)


class _RuntimeCollector(Collector):
    """State read at scrape time: the bus's counters, the log's size, presence."""

    def __init__(self, metrics: Metrics, live: LiveCounts) -> None:
        self.metrics = metrics
        self.live = live
        self.bus: Bus | None = None  # set once the bus started
        self._retained: int | None = None

    async def refresh(self) -> None:
        bus = self.bus
        log = bus.local_log if bus is not None else None
        if log is None or log.closed:
            return

        def retained() -> int:
            # Two index look-ups; COUNT(*) would scan the whole table.
            oldest = log.oldest_retained_seq()
            return 0 if oldest is None else log.last_seq() - oldest + 1

        try:
            self._retained = await asyncio.to_thread(retained)
        except Exception:
            self._retained = None  # the log is failing: /healthz says why

    def collect(self) -> Iterator[Metric]:
        live = self.live
        yield _gauge(
            "confirmations_pending",
            "Confirmation requests waiting for an answer.",
            value=len(self.metrics.pending),
        )
        yield _gauge(
            "clients_attached",
            "Clients attached to event streams (presence).",
            value=live.clients(),
        )
        bus = self.bus
        if bus is None:
            return
        # The services made the turn supervisor right after the bus.
        yield _gauge("turns_running", "Turns running now.", value=live.turns_running())
        yield from self._bus_metrics(bus)

    def _bus_metrics(self, bus: Bus) -> Iterator[Metric]:
        """The bus's counters and queue, and the event log's size."""
        p = PREFIX
        stats = bus.stats()
        for name, help_, value in (
            ("event_bus_published", "Events published since start.", stats.published),
            ("event_bus_committed", "Events committed to the log since start.", stats.committed),
            ("event_bus_delivered", "Events handed to subscribers (summed).", stats.delivered),
            ("event_bus_commits", "Group commits to the log since start.", stats.batches),
            (
                "event_bus_subscribers_dropped",
                "Subscribers cut off as too slow.",
                stats.dropped_subscribers,
            ),
            ("event_bus_replay_records", "Events replayed from the log.", stats.replay_records),
        ):
            yield CounterMetricFamily(p + name, help_, value=value)
        yield _gauge(
            "event_bus_pending",
            "Events published but not yet committed: the log's lag, in events.",
            value=stats.pending,
        )
        yield _gauge("event_bus_subscribers", "Live bus subscriptions.", value=stats.subscribers)
        yield _gauge(
            "event_bus_degraded",
            "1 while a storage fault stops commits (the bus retries).",
            value=0 if bus.fault is None else 1,
        )
        yield _gauge(
            "event_log_last_seq", "The seq of the newest event published.", value=bus.last_seq
        )
        if self._retained is not None:
            yield _gauge(
                "event_log_events",
                "Events the log holds (after pruning).",
                value=self._retained,
            )
        log = bus.local_log
        if log is not None and log.path != ":memory:":
            size = 0
            for suffix in ("", "-wal"):
                with contextlib.suppress(OSError):  # no WAL right after a checkpoint
                    size += os.stat(log.path + suffix).st_size
            yield _gauge(
                "event_log_bytes",
                "Size of the event log's files (database and WAL).",
                value=size,
            )
