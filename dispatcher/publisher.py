"""The narrow publishing interface the dispatcher needs from an event bus.

``eventbus.EventBus`` satisfies it structurally; the dispatcher never imports
``eventbus``, so the two stay independent. Every event is a typed payload
(protocol.payloads) handed to ``emit``; its class names the event type. Each
type has exactly one publisher in our code (tests/test_event_publishers.py;
the list is in specs/event-bus-and-trace-catalog.md).
"""

from __future__ import annotations

from typing import Protocol

from protocol.payloads import Payload


class EventPublisher(Protocol):
    """Accepts one event; never blocks the caller on slow consumers or disk.

    Implementations assign ``seq``/``session_seq`` synchronously, in call order,
    and deliver the event to subscribers only after it is durably logged.
    """

    def emit(self, payload: Payload, *, session_id: str, turn_id: str | None = None) -> None:
        """Publish a typed payload; its class (``payload.event_type``) names the type."""
        ...


class NullPublisher:
    """Drops every event; for tools used outside a server (scripts, tests)."""

    def emit(self, payload: Payload, *, session_id: str, turn_id: str | None = None) -> None:
        return None
