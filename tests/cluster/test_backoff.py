"""Exponential backoff with jitter (app.cluster.backoff)."""

from __future__ import annotations

import random

import pytest

from app.cluster.backoff import Backoff


def test_delays_double_up_to_the_maximum_each_drawn_from_its_upper_half() -> None:
    backoff = Backoff(0.5, 30.0, random.Random(7))
    bounds = [0.5, 1, 2, 4, 8, 16, 30, 30, 30]
    for bound in bounds:
        delay = backoff.next_delay()
        assert bound / 2 <= delay <= bound
    assert backoff.failures == len(bounds)


def test_reset_starts_over_from_the_initial_delay() -> None:
    backoff = Backoff(0.5, 30.0, random.Random(1))
    for _ in range(10):
        backoff.next_delay()
    backoff.reset()
    assert backoff.failures == 0
    assert backoff.next_delay() <= 0.5


def test_two_replicas_do_not_retry_in_lockstep() -> None:
    a, b = Backoff(1, 30, random.Random(1)), Backoff(1, 30, random.Random(2))
    assert [a.next_delay() for _ in range(5)] != [b.next_delay() for _ in range(5)]


def test_thousands_of_failures_stay_at_the_maximum() -> None:
    backoff = Backoff(0.1, 5.0)
    delays = [backoff.next_delay() for _ in range(5000)]
    assert max(delays) <= 5.0


@pytest.mark.parametrize(("initial", "maximum"), [(0, 1), (-1, 1), (2, 1)])
def test_nonsense_bounds_are_refused(initial: float, maximum: float) -> None:
    with pytest.raises(ValueError, match="0 < initial <= maximum"):
        Backoff(initial, maximum)
