"""JSON responses of the HTTP API: strict, compact, ASCII-only text.

Text the server hands back can hold lone surrogates: file names that are not
valid UTF-8 reach Python as surrogate escapes (``list_dir``, ``grep``), and a
client may send ``"\\ud800"`` escapes in its JSON. UTF-8 cannot encode them,
so the default JSON rendering raises and the route answers 500, and keeps
doing so for every later read of that turn or conversation. Rendering with
ASCII escapes, as the event envelope does (``eventbus.encoding``), keeps
every response valid JSON that says exactly what was stored.

It also holds what the OpenAPI document says of error answers: each error
status's meaning and ``error_responses``, which a route's decorator uses to
list the statuses its own code raises, each with the one error body.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi.responses import JSONResponse

from server.schemas import ErrorBody


class AsciiJSONResponse(JSONResponse):
    """``application/json`` rendered as pure ASCII (non-ASCII as ``\\uXXXX``)."""

    def render(self, content: Any) -> bytes:
        return json.dumps(
            content, ensure_ascii=True, allow_nan=False, separators=(",", ":")
        ).encode("ascii")


# What each error status means in this API, for the OpenAPI document. A route
# lists the statuses its own code raises (``error_responses``); those every
# route can answer (401, 413, 422, 503) are added by server.routes.docs.
STATUS_MEANINGS: dict[int, str] = {
    401: "No token, or one the server does not know",
    403: "The token may not do this",
    404: "No such resource, or one this token may not see",
    409: "The resource's state forbids this now",
    413: "The request body exceeds server.max_body_bytes",
    422: "A parameter or the body is invalid; `fields` names each wrong part",
    501: "Not provided by this server",
    503: "Storage unavailable or shutting down; in a cluster, the session's owner or Redis "
    "unreachable. Nothing happened: retry later",
}


def error_responses(*statuses: int, **meanings: str) -> dict[int | str, dict[str, Any]]:
    """``responses=`` for a route: each status with the error body schema and
    its meaning (``meanings`` overrides it per status: ``s409="..."``)."""
    return {
        status: {
            "model": ErrorBody,
            "description": meanings.get(f"s{status}", STATUS_MEANINGS[status]),
        }
        for status in statuses
    }
