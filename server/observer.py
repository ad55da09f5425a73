"""The operator's view as one observer of the event bus.

Every fact an operator needs (turns, model calls, tool calls, confirmations,
presence) is already an event, so metrics, traces and tool-call log lines are
built here from the all-sessions stream instead of calls sprinkled through
the dispatcher and the agent loop. One subscription feeds every handler; a
record is decoded at most once, and only when some handler wants its type
(``message.delta`` and ``tool.output_delta``, the bulk of a busy stream, are
skipped without being parsed unless a handler asks for them).

The subscription starts with a cursor, so the bus treats it as catching up
(an overflow is repaired from the log) and, once cut off as too slow, it
resubscribes from its last cursor: nothing is counted twice or lost, unless
the log pruned the events meanwhile (counted in
``toolrelay_observer_gaps_total``).

Timing comes from the events' own ``ts`` (publish time), not from when the
observer sees them: commits batch events, so arrival time would blur spans.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from eventbus import Bus, BusClosed, CursorExpired, EventBusError, SubscriberTooSlow
from eventbus.record import EventRecord
from eventbus.subscription import Subscription
from server.event_handler import EventHandler
from server.logs import ToolCallLog
from server.metrics import LiveCounts, Metrics
from server.subagents import SUBAGENT_SESSION_ID, is_mirrored
from server.tracing import Tracing, tracing_from_env

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export import SpanExporter

log = logging.getLogger("toolrelay.observer")

# Looked for in the text first: most events are no copies and stay unparsed.
_MIRROR_MARK = f'"{SUBAGENT_SESSION_ID}"'

# The observer's own queue: far above a WebSocket client's, since it never
# waits on a network; a cut-off still loses nothing (it resumes from the log).
OBSERVER_QUEUE = 65536
OBSERVER_QUEUE_BYTES = 256 * 1024 * 1024


class Observer:
    """The one bus subscriber behind ``/metrics``, OpenTelemetry traces and the
        tool-call log lines. Create it with what the scrape-time gauges count
    (``live``; none in tools and benchmarks), ``start(bus)`` after the
        bus started, ``stop()`` after the bus closed (it drains what it holds).

        ``span_exporter_factory`` turns tracing on with that exporter, whatever
        the ``OTEL_*`` variables say: tests hand in the SDK's InMemorySpanExporter
        and go through the same code path as an OTLP exporter would.
    """

    def __init__(self, live: LiveCounts | None = None) -> None:
        self.metrics = Metrics(live)
        self.tracing: Tracing | None = None
        self.span_exporter_factory: Callable[[], SpanExporter] | None = None
        self._handlers: list[EventHandler] = []
        # Event type -> the handlers that want it (missing: nobody; skip unparsed).
        self._routes: dict[str, list[EventHandler]] = {}
        self._task: asyncio.Task[None] | None = None
        self._bus: Bus | None = None
        # The bus subscription being read (a new one after each resume).
        self.subscription: Subscription | None = None
        # The record parsed last and its data (see load()).
        self._loaded: EventRecord | None = None
        self._data: dict[str, Any] = {}

    async def start(self, bus: Bus) -> None:
        """Subscribe (from the bus's newest event on) and start the reading task."""
        self._bus = bus
        self.metrics.attach(bus)
        handlers: list[EventHandler] = [self.metrics]
        self.tracing = tracing_from_env(exporter_factory=self.span_exporter_factory)
        if self.tracing is not None:
            handlers.append(self.tracing)
        if ToolCallLog.enabled():
            handlers.append(ToolCallLog())
        self._handlers = handlers
        routes: dict[str, list[EventHandler]] = {}
        for handler in handlers:
            for type_ in handler.types:
                routes.setdefault(type_, []).append(handler)
        self._routes = routes
        sub = await bus.subscribe(
            after=bus.last_seq, max_queue=OBSERVER_QUEUE, max_queue_bytes=OBSERVER_QUEUE_BYTES
        )
        self.subscription = sub
        self._task = asyncio.create_task(self._run(bus, sub), name="toolrelay-observer")

    async def stop(self) -> None:
        """Wait for the reader to drain (the bus is closed by now), then flush traces."""
        task = self._task
        if task is not None:
            if not self._bus_closed():
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            self._task = None
        if self.tracing is not None:
            await asyncio.to_thread(self.tracing.shutdown)

    def _bus_closed(self) -> bool:
        return self._bus is None or not self._bus.running

    def load(self, record: EventRecord) -> dict[str, Any]:
        """``record``'s data: parsed on the first request, reused by the next handler."""
        if record is not self._loaded:
            data = json.loads(record.text)["data"]
            self._loaded, self._data = record, data
            return data  # type: ignore[no-any-return]
        return self._data

    async def _run(self, bus: Bus, sub: Subscription | None) -> None:
        routes = self._routes
        count_event = self.metrics.count_event
        load = self.load
        while sub is not None:
            self.subscription = sub
            try:
                async for record in sub:
                    count_event(record)
                    handlers = routes.get(record.type)
                    if handlers is None:
                        continue
                    if _MIRROR_MARK in record.text and is_mirrored(load(record)):
                        # A sub-agent's event copied onto its parent's stream
                        # (server/subagents.py): measured once, on the child's.
                        continue
                    for handler in handlers:
                        try:
                            handler.handle(record, load)
                        except Exception:
                            # An observer must never take the server down with it.
                            log.exception("observer handler failed on %r", record)
                return
            except SubscriberTooSlow as exc:
                self._count(self.metrics.observer_resumes)
                after = exc.last_cursor if exc.last_cursor is not None else bus.last_seq
                sub = await self._resubscribe(bus, after)
            except CursorExpired as exc:
                self._count(self.metrics.observer_gaps)
                sub = await self._resubscribe(bus, exc.oldest_cursor)
            except BusClosed:
                return
            except EventBusError as exc:
                log.warning("the observer stopped: %s", exc)
                return

    @staticmethod
    def _count(counter: dict[tuple[str, ...], float]) -> None:
        counter[()] = counter.get((), 0) + 1

    async def _resubscribe(self, bus: Bus, after: int) -> Subscription | None:
        try:
            return await bus.subscribe(
                after=after, max_queue=OBSERVER_QUEUE, max_queue_bytes=OBSERVER_QUEUE_BYTES
            )
        except CursorExpired as exc:
            self._count(self.metrics.observer_gaps)
            return await bus.subscribe(
                after=exc.oldest_cursor,
                max_queue=OBSERVER_QUEUE,
                max_queue_bytes=OBSERVER_QUEUE_BYTES,
            )
        except EventBusError as exc:
            log.warning("the observer stopped: %s", exc)
            return None
