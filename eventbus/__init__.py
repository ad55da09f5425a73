"""The event bus: ordered, durable, replayable events for every client.

``EventBus`` assigns ``seq``/``session_seq``, commits each event to the
SQLite ``EventLog`` and only then fans it out to ``Subscription``s, which
replay from a cursor and continue live without gaps.

Names are imported on first use: the log's child process imports
``eventbus.log`` and must not pay for pydantic (a few hundred milliseconds).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from eventbus.bus import DEBUG_ENV, BusStats, EventBus
    from eventbus.catalog import EventType
    from eventbus.envelope import Event
    from eventbus.errors import (
        BusClosed,
        BusNotStarted,
        CursorError,
        CursorExpired,
        CursorInFuture,
        EventBusError,
        EventLogError,
        EventNotSerializable,
        InvalidEvent,
        PayloadInvalid,
        SubscriberTooSlow,
        UnknownEventType,
    )
    from eventbus.log import EventLog
    from eventbus.payloads import PAYLOAD_MODELS, Payload, payload_model, validate_payload
    from eventbus.record import EventRecord
    from eventbus.subscription import Subscription

_HOMES = {
    "eventbus.bus": ("DEBUG_ENV", "BusStats", "EventBus"),
    "eventbus.catalog": ("EventType",),
    "eventbus.envelope": ("Event",),
    "eventbus.errors": (
        "BusClosed",
        "BusNotStarted",
        "CursorError",
        "CursorExpired",
        "CursorInFuture",
        "EventBusError",
        "EventLogError",
        "EventNotSerializable",
        "InvalidEvent",
        "PayloadInvalid",
        "SubscriberTooSlow",
        "UnknownEventType",
    ),
    "eventbus.log": ("EventLog",),
    "eventbus.payloads": ("PAYLOAD_MODELS", "Payload", "payload_model", "validate_payload"),
    "eventbus.record": ("EventRecord",),
    "eventbus.subscription": ("Subscription",),
}
_MODULE_OF = {name: module for module, names in _HOMES.items() for name in names}

__all__ = [
    "DEBUG_ENV",
    "PAYLOAD_MODELS",
    "BusClosed",
    "BusNotStarted",
    "BusStats",
    "CursorError",
    "CursorExpired",
    "CursorInFuture",
    "Event",
    "EventBus",
    "EventBusError",
    "EventLog",
    "EventLogError",
    "EventNotSerializable",
    "EventRecord",
    "EventType",
    "InvalidEvent",
    "Payload",
    "PayloadInvalid",
    "SubscriberTooSlow",
    "Subscription",
    "UnknownEventType",
    "payload_model",
    "validate_payload",
]


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'eventbus' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
