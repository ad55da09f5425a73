"""Checking a published payload against its model (the bus's debug mode).

The models live in the shared vocabulary (``protocol.payloads``); the errors
are the bus's, so the check lives here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from eventbus.errors import PayloadInvalid, UnknownEventType
from protocol.catalog import EventType
from protocol.payloads import PAYLOAD_MODELS, Payload
from protocol.validation_errors import describe_errors, dotted_location


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
