"""Error classification, retry-after parsing and the retry policy's arithmetic."""

from __future__ import annotations

import random

import pytest

from adapters.errors import (
    AdapterError,
    ProviderAuthFailed,
    ProviderError,
    ProviderRateLimited,
    ProviderRejectedRequest,
    ProviderTimeout,
    ProviderUnavailable,
    error_for_status,
    parse_retry_after,
)
from adapters.retry import RetryPolicy
from adapters.tool_args import parse_tool_arguments


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({}, None),
        ({"retry-after": "3"}, 3.0),
        ({"Retry-After": "0.25"}, 0.25),
        ({"retry-after-ms": "1500", "retry-after": "9"}, 1.5),
        ({"retry-after": "-4"}, 0.0),
        ({"retry-after": "soon"}, None),
        ({"retry-after": "Wed, 21 Oct 2015 07:28:10 GMT"}, 10.0),
    ],
)
def test_parse_retry_after(headers: dict[str, str], expected: float | None) -> None:
    # The HTTP date case is measured from a fixed "now" ten seconds earlier.
    now = 1445412480.0
    assert parse_retry_after(headers, now=now) == expected


@pytest.mark.parametrize(
    ("status", "body_type", "cls", "retryable"),
    [
        (401, None, ProviderAuthFailed, False),
        (403, None, ProviderAuthFailed, False),
        (429, None, ProviderRateLimited, True),
        (408, None, ProviderTimeout, True),
        (500, None, ProviderUnavailable, True),
        (529, "overloaded_error", ProviderUnavailable, True),
        (400, None, ProviderRejectedRequest, False),
        (404, None, ProviderRejectedRequest, False),
        (200, "overloaded_error", ProviderUnavailable, True),
        (200, "rate_limit_error", ProviderRateLimited, True),
        (200, "invalid_request_error", ProviderRejectedRequest, False),
        (200, "authentication_error", ProviderAuthFailed, False),
        (200, "something_new", ProviderUnavailable, True),
    ],
)
def test_error_for_status(
    status: int, body_type: str | None, cls: type[ProviderError], retryable: bool
) -> None:
    error = error_for_status(status, "boom", provider="p", body_type=body_type)
    assert type(error) is cls
    assert error.retryable is retryable
    assert isinstance(error, AdapterError)
    assert "boom" in str(error) and "p:" in str(error)


def test_rate_limit_carries_retry_after() -> None:
    error = error_for_status(429, "slow down", provider="p", headers={"retry-after": "7"})
    assert isinstance(error, ProviderRateLimited)
    assert error.retry_after == 7.0
    assert error.status_code == 429


def test_backoff_grows_is_capped_and_jittered_downwards() -> None:
    policy = RetryPolicy(base_delay=1.0, max_delay=5.0, jitter=0.5, rng=random.Random(7))
    error = ProviderUnavailable("x", provider="p")
    for index, ceiling in enumerate([1.0, 2.0, 4.0, 5.0, 5.0]):
        delays = [policy.delay_for(index, error) for _ in range(50)]
        assert all(ceiling * 0.5 <= d <= ceiling for d in delays)
        assert len(set(delays)) > 1


def test_retry_after_replaces_backoff_up_to_the_cap() -> None:
    policy = RetryPolicy(base_delay=1.0, max_delay=5.0)
    assert policy.delay_for(3, ProviderRateLimited("x", provider="p", retry_after=0.5)) == 0.5
    assert policy.delay_for(0, ProviderRateLimited("x", provider="p", retry_after=60)) == 5.0


@pytest.mark.parametrize("kwargs", [{"max_retries": -1}, {"base_delay": -1.0}, {"jitter": 1.5}])
def test_bad_policies_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        RetryPolicy(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("raw", "value", "problem"),
    [
        ("", {}, None),
        ("  ", {}, None),
        ('{"a": [1, 2]}', {"a": [1, 2]}, None),
        ("{", {}, "not valid JSON"),
        ("[1]", {}, "got an array"),
        ("null", {}, "got null"),
        ("12", {}, "got a number"),
        ("true", {}, "got a boolean"),
        ('{"x": "' + "y" * 500 + '"', {}, "..."),
    ],
)
def test_parse_tool_arguments(raw: str, value: dict[str, object], problem: str | None) -> None:
    parsed, why = parse_tool_arguments(raw)
    assert parsed == value
    if problem is None:
        assert why is None
    else:
        assert why is not None and problem in why
        assert len(why) < 400
