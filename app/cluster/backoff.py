"""Exponential backoff with jitter, for reconnecting to the API server.

Every replica of the webhook loses its watches at the same moment when the API server restarts;
without jitter they would all reconnect in lockstep. Delay n is drawn uniformly from [b/2, b]
where b = min(maximum, initial * 2**n): it grows like plain exponential backoff while no two
replicas keep the same schedule. A small loop object rather than a retry decorator library:
the watch loop decides per error whether to wait, relist or resume, which decorators do not fit.
"""

from __future__ import annotations

import random


class Backoff:
    """The delays before successive retries; `reset()` after a success."""

    def __init__(self, initial: float, maximum: float, rng: random.Random | None = None) -> None:
        if initial <= 0 or maximum < initial:
            raise ValueError(f"backoff needs 0 < initial <= maximum, got {initial}, {maximum}")
        self.initial = initial
        self.maximum = maximum
        self._rng = rng if rng is not None else random.Random()
        self._failures = 0

    @property
    def failures(self) -> int:
        """Retries since the last success."""
        return self._failures

    def next_delay(self) -> float:
        """The delay before the next retry; each call counts one more failure."""
        bound = min(self.maximum, self.initial * 2.0 ** min(self._failures, 62))
        self._failures += 1
        return self._rng.uniform(bound / 2, bound)

    def reset(self) -> None:
        self._failures = 0
