"""The event bus: ordered, durable, replayable events for every client.

``EventBus`` assigns ``seq``/``session_seq``, makes each event durable (the
event ring or the SQLite ``EventLog``) and only then fans it out to
``Subscription``s, which replay from a cursor and continue live without gaps.
Every bus (this one, and the cluster's) implements ``Bus``; the invariants
they keep are written in eventbus.bus.

Names are imported on first use: the log's child process imports
``eventbus.log`` and must not pay for pydantic (a few hundred milliseconds).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from eventbus.bus import DEBUG_ENV, EventBus
    from eventbus.delivery import InvariantBroken
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
    from eventbus.interface import Bus, BusStats
    from eventbus.log import EventLog
    from eventbus.record import EventRecord
    from eventbus.subscription import Subscription
    from eventbus.validation import payload_model, validate_payload

_HOMES = {
    "eventbus.bus": ("DEBUG_ENV", "EventBus"),
    "eventbus.delivery": ("InvariantBroken",),
    "eventbus.interface": ("Bus", "BusStats"),
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
    "eventbus.validation": ("payload_model", "validate_payload"),
    "eventbus.record": ("EventRecord",),
    "eventbus.subscription": ("Subscription",),
}
_MODULE_OF = {name: module for module, names in _HOMES.items() for name in names}

__all__ = [
    "DEBUG_ENV",
    "Bus",
    "BusClosed",
    "BusNotStarted",
    "BusStats",
    "CursorError",
    "CursorExpired",
    "CursorInFuture",
    "EventBus",
    "EventBusError",
    "EventLog",
    "EventLogError",
    "EventNotSerializable",
    "EventRecord",
    "InvalidEvent",
    "InvariantBroken",
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
