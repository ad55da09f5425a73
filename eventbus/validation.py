"""Checking what is published: its type and ids (always), its payload
against its model (the bus's debug mode).

The models live in the shared vocabulary (``protocol.payloads``); the errors
are the bus's, so the checks live here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from eventbus.errors import InvalidEvent, PayloadInvalid, UnknownEventType
from protocol.catalog import EventType
from protocol.payloads import PAYLOAD_MODELS, Payload
from protocol.validation_errors import describe_errors, dotted_location

# Maps each catalog name (and so each EventType member, which hashes as its
# value) to the plain str: one lookup both checks and normalises the type.
TYPE_NAMES: dict[str, str] = {t.value: t.value for t in EventType}
# Payload class -> its catalog type, filled on each class's first emit.
_CLASS_NAMES: dict[type[Payload], str] = {}


def payload_model(event_type: str) -> type[Payload]:
    """The payload model of ``event_type``; UnknownEventType if it is not in the catalog."""
    try:
        return PAYLOAD_MODELS[EventType(event_type)]
    except ValueError:
        raise UnknownEventType(event_type) from None


def validate_payload(event_type: str, data: Mapping[str, Any]) -> Payload:
    """Check ``data`` against the model of ``event_type`` and return the typed payload.

    Raises UnknownEventType or PayloadInvalid; the latter lists every problem
    as ``<field path>: <reason>``.
    """
    model = payload_model(event_type)
    if not isinstance(data, Mapping):
        raise PayloadInvalid(event_type, [f"data must be an object, got {type(data).__name__}"])
    try:
        return model.model_validate(dict(data))
    except ValidationError as exc:
        errors = describe_errors(exc, where=lambda err: dotted_location(err, top_level="<data>"))
        raise PayloadInvalid(event_type, errors) from None


def check_ids(session_id: str, turn_id: str | None) -> None:
    if session_id.__class__ is not str or not session_id:
        raise InvalidEvent(f"session_id must be a non-empty string, got {session_id!r}")
    if turn_id is not None and turn_id.__class__ is not str:
        raise InvalidEvent(f"turn_id must be a string or None, got {turn_id!r}")


def payload_type(payload: Payload) -> str:
    """The catalog type a payload's class names (cached per class)."""
    cls = payload.__class__
    name = _CLASS_NAMES.get(cls)
    if name is None:
        event_type = getattr(cls, "event_type", None)
        name = TYPE_NAMES.get(event_type) if isinstance(event_type, str) else None
        if name is None:
            raise UnknownEventType(f"{cls.__name__} (no catalog event_type)")
        _CLASS_NAMES[cls] = name
    return name
