"""The closed set of errors the HTTP API answers with, and their JSON shape::

    ApiError                  (base; code and status)
    ├── InvalidRequest        422      the request names what was wrong
    ├── Unauthorized          401
    ├── Forbidden             403
    ├── NotFound              404
    ├── Conflict              409      e.g. a turn already running, an answered
    │                                  confirmation (with the winning decision)
    ├── PayloadTooLarge       413
    ├── NotImplementedYet     501
    └── StorageUnavailable    503      the event log cannot commit

Every error response, whatever raised it (our routes, FastAPI's request
validation, Starlette's routing or body limit), has the same body::

    {"error": {"code": "<machine code>", "message": "<what was wrong>", ...}}

Extra keys (``fields``, ``resolution``, ``turn_id`` ...) add detail where a
client can act on it.

Naming rule, the same in every package's ``errors`` module: a base class
(one that exists to be caught as a family) ends in ``Error``; a concrete
exception is named for the condition it reports, without ``Error``. A
condition refined by a narrower one keeps its condition name.

Here every answer is a condition, named for its HTTP status. Outside this
module the server raises ``ConfigInvalid`` (server.config),
``StartupFailed`` (server.startup), ``StoreUnavailable`` (server.store),
``InputLimitExceeded`` (server.schemas), ``UnknownAgent`` (server.agents)
and ``InvalidTurnTransition`` (server.turn_state, a bug, never a client's).
"""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """Base of every error a route raises on purpose."""

    status: int = 500
    code: str = "internal_error"

    def __init__(self, message: str, *, code: str | None = None, **extra: Any) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.extra = extra

    def body(self) -> dict[str, Any]:
        return error_body(self.code, self.message, **self.extra)


class InvalidRequest(ApiError):
    """The request is well-formed HTTP but its content is wrong (422)."""

    status = 422
    code = "invalid_request"


class Unauthorized(ApiError):
    """No token, or a token the server does not know (401)."""

    status = 401
    code = "unauthorized"


class Forbidden(ApiError):
    """The caller is known but may not do this (403)."""

    status = 403
    code = "forbidden"


class NotFound(ApiError):
    """No such resource, or one the caller may not see (404)."""

    status = 404
    code = "not_found"


class Conflict(ApiError):
    """The resource is in a state that forbids the request (409)."""

    status = 409
    code = "conflict"


class PayloadTooLarge(ApiError):
    """The request body exceeds the configured limit (413)."""

    status = 413
    code = "payload_too_large"


class NotImplementedYet(ApiError):
    """A documented feature this build does not provide yet (501)."""

    status = 501
    code = "not_implemented"


def error_body(code: str, message: str, **extra: Any) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, **extra}}


class StorageUnavailable(ApiError):
    """The data dir's storage failed (disk full, I/O error, read-only): the
    request needed a write that could not be made (503). ``cause`` names it;
    the server retries by itself and answers again once the fault clears."""

    status = 503
    code = "storage_unavailable"
