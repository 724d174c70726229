"""What is already allocated.

:class:`Allocations` mirrors upstream's allocated state (k8s.io/dynamic-resource-allocation/
structured/internal/allocatedstate.go): a result without ``shareID`` takes its device whole; a
result with one takes its ``consumedCapacity`` of a shareable device; an ``adminAccess`` result
takes nothing. It is a derived index of the cluster view, kept current by claim events.
What a request consumes of a shareable device, and whether it fits, is app.allocation.capacity.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from app.allocation.inventory import DeviceKey
from app.cluster.view import Kind
from app.k8s.quantity import Quantity, QuantityError, parse_quantity

__all__ = ["Allocations", "Holders"]

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


class Holders:
    """Which allocated claims hold each device (a derived index: ``view.derived(Holders)``).

    Allocations counts; this names, for the one question that needs names: who would have to
    give a device up for a pod that waits on it ("not now", app.policies.preemption). One entry
    per allocated device, kept current by claim events, so the answer costs a lookup per
    device rather than a scan of the claims."""

    def __init__(self) -> None:
        self._by_device: dict[DeviceKey, set[tuple[str, str]]] = {}

    def of(self, devices: Iterable[DeviceKey]) -> set[tuple[str, str]]:
        """The claims (namespace, name) holding any of `devices`."""
        found: set[tuple[str, str]] = set()
        for device in devices:
            found |= self._by_device.get(device, set())
        return found

    def on_change(self, kind: Kind, old: Obj | None, new: Obj | None) -> None:
        if kind is not Kind.RESOURCE_CLAIM:
            return
        for obj, adding in ((old, False), (new, True)):
            if obj is None:
                continue
            meta = obj.get("metadata") or {}
            claim = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
            for key, _ in _results(obj):
                if adding:
                    self._by_device.setdefault(key, set()).add(claim)
                elif (held := self._by_device.get(key)) is not None:
                    held.discard(claim)
                    if not held:
                        del self._by_device[key]


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
