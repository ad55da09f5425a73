"""Bounded exponential backoff: the one implementation every retry uses.

Model-call retries (adapters.retry), MCP server restarts (dispatcher.mcp)
and the Python SDK's HTTP retries and stream reconnects
(clients.sdk.backoff re-exports this class) all wait by it. It lives in
``protocol`` because that package imports nothing of ours, so the server's
packages and the clients alike may use it.

The n-th retry (n = 0, 1, ...) waits ``initial * factor**n``, capped at
``max_delay``, scaled by a random factor in ``[1 - jitter, 1]``. Jitter only
shortens a wait, so the cap is a real cap and :attr:`Backoff.total_budget`
is an upper bound; it spreads clients that retry after the same event (a
server restart) so they do not arrive in lockstep.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Backoff:
    """How often and how long to retry.

    ``attempts`` bounds the retries :meth:`delays` yields (not counting the
    first try); :meth:`delay` answers for any retry number, for callers that
    retry without end (a supervised server restarting).
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

    def ceiling(self, retry_index: int) -> float:
        """The un-jittered wait before retry number ``retry_index`` (0-based)."""
        try:
            grown = self.initial * self.factor**retry_index
        except OverflowError:  # a long-failing server: the cap was reached long ago
            return self.max_delay
        return min(self.max_delay, grown)

    def delay(self, retry_index: int, rng: random.Random | None = None) -> float:
        """The wait before retry number ``retry_index``, jitter applied."""
        spread = self.jitter * (rng or random).random()
        return self.ceiling(retry_index) * (1.0 - spread)

    def delays(self, rng: random.Random | None = None) -> Iterator[float]:
        """The wait before each retry, ``attempts`` of them."""
        for index in range(self.attempts):
            yield self.delay(index, rng)

    @property
    def total_budget(self) -> float:
        """The longest the whole sequence can wait."""
        return sum(self.ceiling(index) for index in range(self.attempts))


NO_RETRY = Backoff(attempts=0)
