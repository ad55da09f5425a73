"""Durations as the events and results report them: milliseconds since a
``time.perf_counter()`` reading, to the microsecond."""

from __future__ import annotations

import time


def elapsed_ms(since: float) -> float:
    """Milliseconds from ``since`` (a ``perf_counter`` reading) to now, rounded
    to whole microseconds; never negative."""
    return max(round((time.perf_counter() - since) * 1000, 3), 0.0)
