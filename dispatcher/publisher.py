"""The narrow publishing interface the dispatcher needs from an event bus.

``eventbus.EventBus`` satisfies it structurally; the dispatcher never imports
``eventbus``, so the two stay independent. Events are typed payloads
(protocol.payloads) handed to ``emit``, except the ones a tool call builds
field by field from objects it has already checked (``tool.called``,
``tool.completed``, ``tool.output_delta``): those go to ``publish`` as the
data dict itself, which is what the bus encodes either way. Building their
payload model only for the bus to take it apart again cost ~1 us an event
in the dispatch overhead benchmark (two events every call); the bus's debug
mode checks such data against the same model. Each type has exactly one
publisher in our code (tests/test_event_publishers.py; the list is in
specs/event-bus-and-trace-catalog.md).
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
