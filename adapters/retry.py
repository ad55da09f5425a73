"""Retrying a model call, only while that cannot duplicate output.

The SDKs' own retries are switched off (``max_retries=0``) so that every
failure is classified by us and every retry is visible as a
:class:`~adapters.base.RetryScheduled` event.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass, field

from adapters.base import CONTENT_EVENTS, RetryScheduled, StreamEvent
from adapters.errors import ProviderError, ProviderRateLimited
from protocol.backoff import Backoff

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently a failed call is tried again.

    The n-th retry (n = 0, 1, ...) waits ``base_delay * 2**n`` scaled by a random
    factor in ``[1 - jitter, 1]``, at most ``max_delay`` (computed by the one
    :class:`protocol.backoff.Backoff`). A rate-limit error
    that names a wait (retry-after) waits exactly that long instead, also
    capped at ``max_delay``; a wait cut short that way may meet another 429,
    which then counts as one more retry.
    """

    max_retries: int = 2
    base_delay: float = 0.5
    max_delay: float = 20.0
    jitter: float = 0.5
    rng: random.Random = field(default_factory=random.Random, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {self.max_retries}")
        if self.base_delay < 0 or self.max_delay < 0:
            raise ValueError("base_delay and max_delay must be >= 0")
        if not 0.0 <= self.jitter <= 1.0:
            raise ValueError(f"jitter must be within [0, 1], got {self.jitter}")

    @property
    def backoff(self) -> Backoff:
        """The exponential part of this policy."""
        return Backoff(
            attempts=self.max_retries,
            initial=self.base_delay,
            factor=2.0,
            max_delay=self.max_delay,
            jitter=self.jitter,
        )

    def delay_for(self, retry_index: int, error: ProviderError) -> float:
        """Seconds to wait before retry number ``retry_index`` (0-based)."""
        if isinstance(error, ProviderRateLimited) and error.retry_after is not None:
            return min(error.retry_after, self.max_delay)
        return self.backoff.delay(retry_index, self.rng)


NO_RETRY = RetryPolicy(max_retries=0)

Sleep = Callable[[float], Awaitable[None]]


async def with_retries(
    attempt: Callable[[], AsyncGenerator[StreamEvent, None]],
    policy: RetryPolicy,
    *,
    sleep: Sleep = asyncio.sleep,
) -> AsyncGenerator[StreamEvent, None]:
    """Yield the events of ``attempt()``, starting it again after a retryable error.

    A retry happens only while no content event has reached the consumer; after
    that the error propagates as is, so the consumer never sees a delta twice.
    Each attempt's generator is closed before the next starts or when the
    consumer goes away, which closes its HTTP response.
    """
    retries = 0
    while True:
        produced = False
        try:
            async with aclosing(attempt()) as events:
                async for event in events:
                    if isinstance(event, CONTENT_EVENTS):
                        produced = True
                    yield event
            return
        except ProviderError as error:
            if produced or not error.retryable or retries >= policy.max_retries:
                raise
            delay = policy.delay_for(retries, error)
            retries += 1
            logger.warning(
                "model call failed (%s); retry %d of %d in %.2fs",
                error,
                retries,
                policy.max_retries,
                delay,
            )
            yield RetryScheduled(attempt=retries, delay=delay, error=error)
            await sleep(delay)
