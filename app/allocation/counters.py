"""Shared counters (partitionable devices, KEP-4815): what is left of a pool's counter sets.

A whole GPU and its MIG partitions consume the same counters of the GPU's counter set, so only
one of them, or partitions that do not overlap, can be allocated. Mirrors upstream's
``checkAvailableCounters`` and ``deallocateCountersForDevice``: a pool's counters less what the
devices allocated to claims consume (wherever in the pool they are), less what this attempt has
picked; a device fits when every counter it consumes is still there.
"""

from __future__ import annotations

from fractions import Fraction

from app.allocation.inventory import Candidate, Pool
from app.allocation.state import Allocations

__all__ = ["Counters"]

Amount = int | Fraction
Slot = tuple[str, str]
"""(counter set, counter)."""


class Counters:
    """The counters of the pools one search reads, from ``allocations`` (None: as if no device
    were allocated)."""

    def __init__(self, allocations: Allocations | None) -> None:
        self.allocations = allocations
        self._available: dict[int, dict[Slot, Amount]] = {}
        """Per pool (by id()): counter -> what is left after allocated devices."""
        self._consuming: dict[int, dict[Slot, Amount]] = {}
        """Per pool (by id()): counter -> what the devices picked in this attempt consume."""

    def available(self, pool: Pool) -> dict[Slot, Amount]:
        """What is left of each counter of the pool after the devices allocated to claims
        (below zero when they overdraw it)."""
        found = self._available.get(id(pool))
        if found is None:
            found = {
                (set_name, name): _number(amount.value)
                for set_name, counters in pool.counter_sets.items()
                for name, amount in counters.items()
            }
            if self.allocations is not None:
                for key, consumes in pool.consumers:
                    if self.allocations.taken(key):
                        for set_name, counters in consumes:
                            for name, amount in counters.items():
                                if (set_name, name) in found:
                                    found[(set_name, name)] -= amount.value
            self._available[id(pool)] = found
        return found

    def take(self, candidate: Candidate) -> bool:
        """Charge the device's counters to this attempt, if they are all left."""
        available = self.available(candidate.pool)
        consuming = self._consuming.setdefault(id(candidate.pool), {})
        fits_all = True
        for slot, amount in candidate.usage:
            total = consuming.get(slot, 0) + amount
            consuming[slot] = total
            if fits_all and slot in available and total > available[slot]:
                fits_all = False
        if not fits_all:
            self.release(candidate)
        return fits_all

    def release(self, candidate: Candidate) -> None:
        consuming = self._consuming[id(candidate.pool)]
        for slot, amount in candidate.usage:
            consuming[slot] -= amount


def _number(value: Fraction) -> Amount:
    return value.numerator if value.denominator == 1 else value
