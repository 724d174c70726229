"""What is already allocated.

:class:`Allocations` mirrors upstream's allocated state (k8s.io/dynamic-resource-allocation/
structured/internal/allocatedstate.go): a result without ``shareID`` takes its device whole; a
result with one takes its ``consumedCapacity`` of a shareable device; an ``adminAccess`` result
takes nothing. It is a derived index of the cluster view, kept current by claim events.
What a request consumes of a shareable device, and whether it fits, is app.allocation.capacity.
"""

from __future__ import annotations

from typing import Any

from app.allocation.inventory import DeviceKey
from app.cluster.view import Kind
from app.k8s.quantity import Quantity, QuantityError, parse_quantity

__all__ = ["Allocations"]

Obj = dict[str, Any]
ZERO = Quantity.from_int(0)


class Allocations:
    """Devices held by allocated claims (a derived index: ``view.derived(Allocations)``)."""

    def __init__(self) -> None:
        self.whole: dict[DeviceKey, int] = {}
        """Device -> number of claims holding it whole (more than one only mid-update)."""
        self.shared: dict[DeviceKey, dict[str, Quantity]] = {}
        """Device -> capacity consumed by its shares (fully qualified names)."""
        self.generation = 0

    def taken(self, key: DeviceKey) -> bool:
        """Whether the device counts as allocated (``IsDeviceAllocated``)."""
        return key in self.whole or key in self.shared

    def on_change(self, kind: Kind, old: Obj | None, new: Obj | None) -> None:
        if kind is not Kind.RESOURCE_CLAIM:
            return
        changed = False
        for obj, sign in ((old, -1), (new, 1)):
            for key, capacity in _results(obj):
                changed = True
                if capacity is None:
                    count = self.whole.get(key, 0) + sign
                    if count > 0:
                        self.whole[key] = count
                    else:
                        self.whole.pop(key, None)
                    continue
                totals = self.shared.setdefault(key, {})
                for name, amount in capacity.items():
                    totals[name] = totals.get(name, ZERO) + (amount if sign > 0 else -amount)
                if sign < 0 and all(v.sign() <= 0 for v in totals.values()):
                    del self.shared[key]
        if changed:
            self.generation += 1


def _results(claim: Obj | None) -> list[tuple[DeviceKey, dict[str, Quantity] | None]]:
    if claim is None:
        return []
    status = claim.get("status")
    allocation = status.get("allocation") if isinstance(status, dict) else None
    devices = allocation.get("devices") if isinstance(allocation, dict) else None
    results = devices.get("results") if isinstance(devices, dict) else None
    out: list[tuple[DeviceKey, dict[str, Quantity] | None]] = []
    for result in results if isinstance(results, list) else ():
        if not isinstance(result, dict) or result.get("adminAccess") is True:
            continue
        driver = str(result.get("driver", ""))
        key = (driver, str(result.get("pool", "")), str(result.get("device", "")))
        if not result.get("shareID"):
            out.append((key, None))
            continue
        capacity: dict[str, Quantity] = {}
        raw = result.get("consumedCapacity")
        for name, amount in raw.items() if isinstance(raw, dict) else ():
            try:
                quantity = parse_quantity(amount)
            except (QuantityError, TypeError):
                continue
            capacity[name if "/" in name else f"{driver}/{name}"] = quantity
        out.append((key, capacity))
    return out
