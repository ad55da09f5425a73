"""The narrow publishing interface the dispatcher needs from an event bus.

``eventbus.EventBus`` satisfies it structurally; the dispatcher never imports
``eventbus``, so the two stay independent.
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

    def publish(
        self,
        type: str,
        data: Mapping[str, Any],
        *,
        session_id: str,
        turn_id: str | None = None,
    ) -> None: ...

    def emit(self, payload: Payload, *, session_id: str, turn_id: str | None = None) -> None:
        """Publish a typed payload; its class (``payload.event_type``) names the type."""
        ...


class NullPublisher:
    """Drops every event; for tools used outside a server (scripts, tests)."""

    def publish(
        self,
        type: str,
        data: Mapping[str, Any],
        *,
        session_id: str,
        turn_id: str | None = None,
    ) -> None:
        return None

    def emit(self, payload: Payload, *, session_id: str, turn_id: str | None = None) -> None:
        return None
