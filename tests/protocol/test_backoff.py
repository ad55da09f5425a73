"""protocol.backoff: the one backoff every retry uses."""

from __future__ import annotations

import random

import pytest

from protocol.backoff import Backoff


def test_delays_grow_to_the_cap_and_jitter_only_shortens() -> None:
    policy = Backoff(attempts=6, initial=0.1, factor=2, max_delay=0.5, jitter=0)
    assert list(policy.delays()) == [0.1, 0.2, 0.4, 0.5, 0.5, 0.5]
    jittered = Backoff(attempts=5, initial=1, factor=2, max_delay=4, jitter=0.5)
    rng = random.Random(3)
    for index, ceiling in enumerate([1, 2, 4, 4, 4]):
        waits = [jittered.delay(index, rng) for _ in range(40)]
        assert all(ceiling * 0.5 <= w <= ceiling for w in waits)
        assert len(set(waits)) > 1
    assert jittered.total_budget == pytest.approx(15)


def test_an_endless_retrier_stays_at_the_cap() -> None:
    # A supervised server restarting for days: 2**5000 overflows a float.
    assert Backoff(initial=0.5, max_delay=30, jitter=0).delay(5000) == 30
