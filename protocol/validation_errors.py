"""One way to turn a pydantic ValidationError into sentences that name
their field: ``<dotted.path>: <reason>``.

Every place that reports a model's validation failure to a person (the
server's config and request checks, the event-payload check, the scripted
model's script loader, the SDK's event parser) words it through
:func:`describe_errors`, so a field is always written the same way. Inputs
are never included: a failing field may hold a token.
"""

from __future__ import annotations

from collections.abc import Callable

from pydantic import ValidationError
from pydantic_core import ErrorDetails

# What an unknown key's pydantic message ("Extra inputs are not permitted") says plainly.
UNKNOWN_KEY = "unknown key"


def dotted_location(error: ErrorDetails, *, top_level: str = "<root>") -> str:
    """The error's location as ``a.b.0.c``; ``top_level`` when it has none."""
    return ".".join(str(part) for part in error["loc"]) or top_level


def plain_message(error: ErrorDetails) -> str:
    """Pydantic's message, except an unknown key, which says so."""
    return UNKNOWN_KEY if error["type"] == "extra_forbidden" else error["msg"]


def describe_errors(
    exc: ValidationError,
    *,
    prefix: str = "",
    where: Callable[[ErrorDetails], str] = dotted_location,
    message: Callable[[ErrorDetails], str] = plain_message,
    limit: int | None = None,
) -> list[str]:
    """``<prefix><where>: <message>`` for each error (the first ``limit``)."""
    errors = exc.errors(include_url=False, include_input=False)
    if limit is not None:
        errors = errors[:limit]
    return [f"{prefix}{where(err)}: {message(err)}" for err in errors]
