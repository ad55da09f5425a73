"""Durations as the events and results report them: milliseconds since a
``time.perf_counter()`` reading, to the microsecond.

``round(seconds * 1000, 3)`` gives the same float (the double nearest the
decimal) but costs ~0.6 us, as float rounding to digits goes through a
decimal conversion; it ran once per tool call on the dispatch path.
"""

from __future__ import annotations

import time


def elapsed_ms(since: float) -> float:
    """Milliseconds from ``since`` (a ``perf_counter`` reading) to now, rounded
    to whole microseconds (half up); never negative."""
    micros = int((time.perf_counter() - since) * 1_000_000 + 0.5)
    return micros / 1000 if micros > 0 else 0.0
