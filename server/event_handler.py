"""What a handler of the observed event stream is (server/observer.py feeds
them): metrics, traces and tool-call log lines each implement
``EventHandler``.

Kept apart from the observer so that the handlers and the observer that
routes events to them import this module, not each other.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, Protocol

from eventbus.record import EventRecord

Load = Callable[[EventRecord], dict[str, Any]]
"""Gives a record's ``data``, parsed once however many handlers ask for it."""


class EventHandler(Protocol):
    """Something built from events: ``types`` names the event types it wants;
    ``handle`` calls ``load(record)`` only if it needs the payload."""

    types: frozenset[str]

    def handle(self, record: EventRecord, load: Load) -> None: ...


def event_time(ts: str) -> float:
    """An envelope's ``ts`` (RFC 3339, UTC, ending in ``Z``) as epoch seconds."""
    return datetime.fromisoformat(ts).timestamp()
