"""The narrow publishing interface the dispatcher needs from an event bus.

``eventbus.EventBus`` satisfies it structurally; the dispatcher never imports
``eventbus``, so the two stay independent. Events are typed payloads
(protocol.payloads) handed to ``emit``; the class names the event type. The
three a tool call assembles from checked values on its hot path
(``tool.called``, ``tool.completed``, ``tool.output_delta``) go to
``publish`` as the data dict (dispatcher/call_events.py says why and names
the benchmark). Each type has exactly one publisher in our code (tests/test_event_publishers.py;
the list is in specs/event-bus-and-trace-catalog.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from protocol.payloads import Payload


class EventPublisher(Protocol):
    """Accepts one event; never blocks the caller on slow consumers or disk.

    Implementations assign ``seq``/``session_seq`` synchronously, in call order,
    and deliver the event to subscribers only after it is durably logged.
    """

    def emit(self, payload: Payload, *, session_id: str, turn_id: str | None = None) -> None:
        """Publish a typed payload; its class (``payload.event_type``) names the type."""
        ...

    def publish(
        self, type: str, data: Mapping[str, Any], *, session_id: str, turn_id: str | None = None
    ) -> None:
        """Publish ``data`` (every field of the type's payload model, values
        already checked by the caller) as an event of ``type``."""
        ...


class NullPublisher:
    """Drops every event; for tools used outside a server (scripts, tests)."""

    def emit(self, payload: Payload, *, session_id: str, turn_id: str | None = None) -> None:
        return None

    def publish(
        self, type: str, data: Mapping[str, Any], *, session_id: str, turn_id: str | None = None
    ) -> None:
        return None
