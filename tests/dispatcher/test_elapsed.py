"""``elapsed_ms``: milliseconds rounded to the microsecond, never negative."""

from __future__ import annotations

import random
import time

import pytest

from dispatcher.elapsed import elapsed_ms


@pytest.mark.parametrize("seed", range(3))
def test_elapsed_ms_equals_rounding_to_the_microsecond(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(seed)
    for _ in range(20_000):
        seconds = rng.random() * rng.choice([1e-6, 1e-4, 1e-2, 1.0, 60.0, 7200.0])
        since = rng.uniform(0, 1e6)
        monkeypatch.setattr(time, "perf_counter", lambda s=since, d=seconds: s + d)
        expected = round(((since + seconds) - since) * 1000, 3)
        assert elapsed_ms(since) == expected


def test_elapsed_ms_is_never_negative(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(time, "perf_counter", lambda: 10.0)
    assert elapsed_ms(10.5) == 0.0
    assert elapsed_ms(10.0) == 0.0
