"""What is already allocated, and what consumable capacity a request takes of a device.

:class:`Allocations` mirrors upstream's allocated state (k8s.io/dynamic-resource-allocation/
structured/internal/allocatedstate.go): a result without ``shareID`` takes its device whole; a
result with one takes its ``consumedCapacity`` of a shareable device; an ``adminAccess`` result
takes nothing. It is a derived index of the cluster view, kept current by claim events.

:func:`consumed` and :func:`fits` mirror ``calculateConsumedCapacity`` and
``cmpRequestOverCapacity`` (consumable_capacity.go): a requested capacity is rounded up by the
device's request policy (``validRange``: to ``min + n*step``, at least ``min``; ``validValues``:
the smallest value at or above the request), a capacity not requested consumes the policy's
``default`` or, without a policy, the whole value; over ``max``, outside the valid values, or
over what is left, the device does not fit.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from app.allocation.inventory import Candidate, CapacitySpec, DeviceKey
from app.cluster.view import Kind
from app.k8s.quantity import Quantity, QuantityError, parse_quantity

__all__ = ["Allocations", "consumed", "fits", "resolve_requests"]

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


# -- consumable capacity --------------------------------------------------------------------


def resolve_requests(
    requests: Mapping[str, Quantity], candidate: Candidate
) -> dict[str, Quantity] | None:
    """The requested amounts by the device's capacity names, or None when the device lacks
    one of them (``resolveCapacityRequests``: a bare name is in the driver's domain)."""
    out: dict[str, Quantity] = {}
    driver = candidate.key[0]
    for name, amount in requests.items():
        qualified = name if "/" in name else f"{driver}/{name}"
        if qualified not in candidate.capacity:
            return None
        out[qualified] = amount
    return out


def consumed(requested: Quantity | None, spec: CapacitySpec) -> Quantity:
    """What a request takes of one capacity (``calculateConsumedQuantity``)."""
    if requested is None:
        return spec.default if spec.default is not None else spec.value
    if not spec.has_policy:
        return requested
    if spec.minimum is not None:
        if requested.value <= spec.minimum.value:
            return spec.minimum
        if spec.step is None or spec.step.value <= 0:
            return requested
        steps = math.ceil((requested.value - spec.minimum.value) / spec.step.value)
        return Quantity(spec.minimum.value + steps * spec.step.value, spec.minimum.format)
    if spec.valid_values:
        for value in sorted(spec.valid_values):
            if value.value >= requested.value:
                return value
    return requested


def _violates_policy(amount: Quantity, spec: CapacitySpec) -> bool:
    if not spec.has_policy:
        return False
    if spec.minimum is not None:
        if amount.value < spec.minimum.value:
            return True
        return spec.maximum is not None and amount.value > spec.maximum.value
    if spec.valid_values:
        return amount not in spec.valid_values
    return False


def fits(
    candidate: Candidate,
    requests: Mapping[str, Quantity],
    taken: Mapping[str, Quantity] | None,
    allocating: Mapping[str, Quantity] | None,
) -> dict[str, Quantity] | None:
    """The capacity the request would consume of the device, or None when it does not fit
    (``cmpRequestOverCapacity``): a capacity the device lacks, a policy violated, or more than
    is left after ``taken`` (allocated claims) and ``allocating`` (this attempt)."""
    resolved = resolve_requests(requests, candidate)
    if resolved is None:
        return None
    out: dict[str, Quantity] = {}
    for name, spec in candidate.capacity.items():
        amount = consumed(resolved.get(name), spec)
        if _violates_policy(amount, spec):
            return None
        total = amount.value
        if taken is not None and name in taken:
            total += taken[name].value
        if allocating is not None and name in allocating:
            total += allocating[name].value
        if total > spec.value.value:
            return None
        out[name] = amount
    return out
