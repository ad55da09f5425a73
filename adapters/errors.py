"""The closed set of errors the adapter layer raises::

    AdapterError
    ├── AdapterMisconfigured(ValueError)   the adapter could not be set up: a bad
    │                                      model string, a missing key or base_url,
    │                                      an unreadable script
    ├── RequestNotConvertible(ValueError)  the canonical request holds something a
    │                                      provider's wire format cannot carry
    └── ProviderError                      talking to the provider failed (kind)
        ├── ProviderAuthFailed             auth                never retried
        ├── ProviderRateLimited            rate_limit          retried (retry-after)
        ├── ProviderUnavailable            unavailable         retried
        ├── ProviderTimeout                timeout             retried
        ├── ProviderUnreachable            connection          retried
        ├── StreamInterrupted              stream_interrupted
        ├── ProviderRejectedRequest        bad_request         never retried
        └── ProviderResponseInvalid        bad_response

Each ProviderError says whether trying again may help (``retryable``); the
retry loop in :mod:`adapters.retry` only ever retries those, and only before
any content reached the consumer.

Naming rule, the same in every package's ``errors`` module: a base class
(one that exists to be caught as a family) ends in ``Error``; a concrete
exception is named for the condition it reports, without ``Error``. A
condition refined by a narrower one keeps its condition name.

The agent loop catches ``AdapterError`` and fails the turn with ``kind`` and
the message; nothing else escapes an adapter's stream.
"""

from __future__ import annotations

import email.utils
import time
from collections.abc import Mapping
from typing import ClassVar, Literal

ProviderErrorKind = Literal[
    "auth",
    "rate_limit",
    "unavailable",
    "timeout",
    "connection",
    "stream_interrupted",
    "bad_request",
    "bad_response",
]


class AdapterError(Exception):
    """Base of every error raised by the adapter layer."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class AdapterMisconfigured(AdapterError, ValueError):
    """The adapter cannot be built: bad model string, missing key, bad script."""


class RequestNotConvertible(AdapterError, ValueError):
    """The canonical request cannot be expressed in a provider's wire format."""


class ProviderError(AdapterError):
    """A call to a model provider failed.

    ``retryable`` says whether the same request may succeed later; ``provider``
    names the adapter (``"anthropic"``, ``"openai"``, ...); ``status_code`` is the
    HTTP status when there was one.
    """

    kind: ClassVar[ProviderErrorKind] = "unavailable"
    default_retryable: ClassVar[bool] = False

    def __init__(
        self,
        message: str,
        *,
        provider: str,
        status_code: int | None = None,
        retryable: bool | None = None,
    ) -> None:
        super().__init__(message)
        self.provider = provider
        self.status_code = status_code
        self.retryable = self.default_retryable if retryable is None else retryable

    def __str__(self) -> str:
        status = f" (HTTP {self.status_code})" if self.status_code is not None else ""
        return f"{self.provider}: {self.kind}{status}: {self.message}"


class ProviderAuthFailed(ProviderError):
    """The provider refused the credentials (HTTP 401/403). Never retried."""

    kind = "auth"


class ProviderRateLimited(ProviderError):
    """HTTP 429. ``retry_after`` is the provider's requested wait in seconds."""

    kind = "rate_limit"
    default_retryable = True

    def __init__(
        self,
        message: str,
        *,
        provider: str,
        status_code: int | None = 429,
        retry_after: float | None = None,
        retryable: bool | None = None,
    ) -> None:
        super().__init__(message, provider=provider, status_code=status_code, retryable=retryable)
        self.retry_after = retry_after


class ProviderUnavailable(ProviderError):
    """The provider is down or overloaded (HTTP 5xx, 529, an overloaded event)."""

    kind = "unavailable"
    default_retryable = True


class ProviderTimeout(ProviderError):
    """The request or the stream took longer than the configured timeout."""

    kind = "timeout"
    default_retryable = True


class ProviderUnreachable(ProviderError):
    """The provider could not be reached (refused, DNS, TLS, reset before a reply)."""

    kind = "connection"
    default_retryable = True


class StreamInterrupted(ProviderError):
    """The reply stream was cut before the provider said it was complete."""

    kind = "stream_interrupted"
    default_retryable = True


class ProviderRejectedRequest(ProviderError):
    """The provider rejected the request (other 4xx: bad model, too large ...)."""

    kind = "bad_request"


class ProviderResponseInvalid(ProviderError):
    """The provider answered with something that is not its documented format."""

    kind = "bad_response"


def parse_retry_after(headers: Mapping[str, str], *, now: float | None = None) -> float | None:
    """The wait a response asks for, in seconds, or None when it names none.

    Reads ``retry-after-ms`` (sent by both providers) before ``retry-after``,
    which may be seconds or an HTTP date. Negative waits become 0.
    """
    lowered = {k.lower(): v for k, v in headers.items()}
    raw_ms = lowered.get("retry-after-ms")
    if raw_ms is not None:
        try:
            return max(0.0, float(raw_ms) / 1000.0)
        except ValueError:
            pass
    raw = lowered.get("retry-after")
    if raw is None:
        return None
    try:
        return max(0.0, float(raw))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    current = time.time() if now is None else now
    return max(0.0, when.timestamp() - current)


# Error "type" strings both providers put in error bodies, mapped to our classes.
# Used when the HTTP status alone does not tell (errors sent inside a 200 stream).
_BODY_TYPE_CLASSES: dict[str, type[ProviderError]] = {
    "authentication_error": ProviderAuthFailed,
    "permission_error": ProviderAuthFailed,
    "invalid_api_key": ProviderAuthFailed,
    "rate_limit_error": ProviderRateLimited,
    "rate_limit_exceeded": ProviderRateLimited,
    "overloaded_error": ProviderUnavailable,
    "api_error": ProviderUnavailable,
    "server_error": ProviderUnavailable,
    "timeout_error": ProviderTimeout,
    "invalid_request_error": ProviderRejectedRequest,
    "not_found_error": ProviderRejectedRequest,
}


def error_for_status(
    status: int,
    message: str,
    *,
    provider: str,
    headers: Mapping[str, str] | None = None,
    body_type: str | None = None,
) -> ProviderError:
    """Classify an HTTP error status (or an in-stream error body type)."""
    if status in (401, 403):
        return ProviderAuthFailed(message, provider=provider, status_code=status)
    if status == 429:
        retry_after = parse_retry_after(headers or {})
        return ProviderRateLimited(
            message, provider=provider, status_code=status, retry_after=retry_after
        )
    if status == 408:
        return ProviderTimeout(message, provider=provider, status_code=status)
    if status >= 500:
        return ProviderUnavailable(message, provider=provider, status_code=status)
    if status >= 400:
        return ProviderRejectedRequest(message, provider=provider, status_code=status)
    # A 2xx/3xx carrying an error: an error event inside a stream. Its body type decides.
    cls = _BODY_TYPE_CLASSES.get(body_type or "", ProviderUnavailable)
    if cls is ProviderRateLimited:
        return ProviderRateLimited(
            message,
            provider=provider,
            status_code=None,
            retry_after=parse_retry_after(headers or {}),
        )
    return cls(message, provider=provider, status_code=None)
