"""Bounded exponential backoff shared by HTTP retries and stream reconnects."""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Backoff:
    """How often and how long to retry.

    ``attempts`` bounds the number of retries (not counting the first try);
    delays grow from ``initial`` by ``factor`` up to ``max_delay``, each
    spread by up to ``jitter`` (a fraction) so that many clients reconnecting
    after a server restart do not arrive in lockstep.
    """

    attempts: int = 8
    initial: float = 0.1
    factor: float = 2.0
    max_delay: float = 2.0
    jitter: float = 0.2

    def __post_init__(self) -> None:
        if self.attempts < 0:
            raise ValueError(f"Backoff.attempts must be >= 0, got {self.attempts}")
        if self.initial < 0 or self.max_delay < 0:
            raise ValueError("Backoff delays must be >= 0")
        if self.factor < 1:
            raise ValueError(f"Backoff.factor must be >= 1, got {self.factor}")
        if not 0 <= self.jitter <= 1:
            raise ValueError(f"Backoff.jitter must be within [0, 1], got {self.jitter}")

    def delays(self) -> Iterator[float]:
        """The delay before each retry, ``attempts`` of them."""
        delay = self.initial
        for _ in range(self.attempts):
            spread = delay * self.jitter
            yield max(0.0, delay + random.uniform(-spread, spread))
            delay = min(self.max_delay, delay * self.factor)

    @property
    def total_budget(self) -> float:
        """The longest the whole sequence can wait (jitter included)."""
        total, delay = 0.0, self.initial
        for _ in range(self.attempts):
            total += delay * (1 + self.jitter)
            delay = min(self.max_delay, delay * self.factor)
        return total


NO_RETRY = Backoff(attempts=0)
