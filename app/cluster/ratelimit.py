"""Bounds on the API calls admission can cause: a token bucket and a bounded negative cache.

The on-miss namespace lookup is the one read a review can trigger. Anyone who can reach the
webhook's port can send reviews naming new namespaces; these keep the API server's share of
that traffic bounded. Clocks are passed in, so tests need no sleeping.
"""

from __future__ import annotations

from app.bounded import BoundedCache, CacheName


class TokenBucket:
    """`rate` takes per second on average, `burst` at once."""

    def __init__(self, rate: float, burst: int, now: float) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError(f"a token bucket needs rate > 0 and burst >= 1, got {rate}, {burst}")
        self.rate = rate
        self.burst = burst
        self._tokens = float(burst)
        self._last = now

    def take(self, now: float) -> bool:
        """Take one token if there is one."""
        self._tokens = min(self.burst, self._tokens + (now - self._last) * self.rate)
        self._last = now
        if self._tokens < 1:
            return False
        self._tokens -= 1
        return True


class ExpiringSet:
    """Keys remembered for `ttl` seconds, at most `size` of them (oldest dropped first)."""

    def __init__(self, ttl: float, size: int) -> None:
        if size < 1:
            raise ValueError("size must be at least 1")
        self.ttl = ttl
        self.size = size
        self._until: BoundedCache[str, float] = BoundedCache(CacheName.NAMESPACE_LOOKUPS, size)

    def __len__(self) -> int:
        return len(self._until)

    def add(self, key: str, now: float) -> None:
        self._until.put(key, now + self.ttl)

    def discard(self, key: str) -> None:
        self._until.pop(key)

    def contains(self, key: str, now: float) -> bool:
        until = self._until.get(key)
        if until is None:
            return False
        if until <= now:
            self._until.pop(key)
            return False
        return True
