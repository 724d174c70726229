"""Consumable capacity (KEP-5075): a device capacity's request policy, what a request consumes
of it, and whether a request fits what is left. The one copy: the allocation model and the
capacity quotas (app.policies.quota.capacity) both read it, from a device's raw `capacity`
(:func:`device_capacity`) to what a request consumes (:func:`consumed`, :func:`rounded`); the
amounts a claim asks for are read by the claim model (`app.k8s.claims.capacity_requests`).

Mirrors upstream's consumable_capacity.go (k8s.io/dynamic-resource-allocation/structured):
:func:`consumed` is ``calculateConsumedQuantity`` — a requested capacity is rounded up by the
device's request policy (``validRange``: to ``min + n*step``, at least ``min``; ``validValues``:
the smallest value at or above the request), a capacity not requested consumes the policy's
``default`` or, without a policy, the whole value; :func:`fits` is ``cmpRequestOverCapacity`` —
over ``max``, outside the valid values, or over what is left, the device does not fit.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from app.k8s.quantity import Quantity, QuantityError, parse_quantity

__all__ = [
    "CapacitySpec",
    "capacity_named",
    "capacity_spec",
    "consumed",
    "device_capacity",
    "fits",
    "policy_of",
    "quantity_or_none",
    "request_policy",
    "resolve_requests",
    "rounded",
]

ZERO = Quantity.from_int(0)


@dataclass(frozen=True, slots=True)
class CapacitySpec:
    """A device capacity with its request policy (consumable capacity, KEP-5075)."""

    value: Quantity
    default: Quantity | None = None
    valid_values: tuple[Quantity, ...] = ()
    minimum: Quantity | None = None
    maximum: Quantity | None = None
    step: Quantity | None = None
    has_policy: bool = False


def quantity_or_none(raw: Any) -> Quantity | None:
    """A quantity from a string or an integer of the API's JSON; None for anything else."""
    if not isinstance(raw, str | int) or isinstance(raw, bool):
        return None
    try:
        return parse_quantity(raw)
    except QuantityError:
        return None


def request_policy(policy: Any, value: Quantity = ZERO) -> CapacitySpec:
    """A device capacity of ``value`` under the raw ``requestPolicy`` (None or not a mapping:
    no policy)."""
    if not isinstance(policy, Mapping):
        return CapacitySpec(value)
    valid_range = policy.get("validRange")
    valid_range = valid_range if isinstance(valid_range, Mapping) else {}
    values = policy.get("validValues")
    return CapacitySpec(
        value,
        quantity_or_none(policy.get("default")),
        tuple(q for v in values if (q := quantity_or_none(v)) is not None)
        if isinstance(values, list)
        else (),
        quantity_or_none(valid_range.get("min")),
        quantity_or_none(valid_range.get("max")),
        quantity_or_none(valid_range.get("step")),
        True,
    )


def capacity_spec(entry: Any) -> CapacitySpec | None:
    """A raw device ``capacity`` entry (``value`` and an optional ``requestPolicy``); None
    without a readable value."""
    if not isinstance(entry, Mapping) or (value := quantity_or_none(entry.get("value"))) is None:
        return None
    return request_policy(entry.get("requestPolicy"), value)


def device_capacity(device: Mapping[str, Any], driver: str) -> dict[str, CapacitySpec]:
    """A raw ResourceSlice device's capacities by qualified name (a bare name is in the
    driver's domain: `memory` is `<driver>/memory`), as the scheduler reads them; of two
    entries that qualify alike, the one with a request policy."""
    out: dict[str, CapacitySpec] = {}
    raw = device.get("capacity")
    if not isinstance(raw, Mapping):
        return out
    for name, entry in raw.items():
        spec = capacity_spec(entry)
        if spec is None:
            continue
        qualified = str(name) if "/" in str(name) else f"{driver}/{name}"
        if spec.has_policy:
            out[qualified] = spec
        else:
            out.setdefault(qualified, spec)
    return out


def capacity_named(
    capacity: Mapping[str, CapacitySpec], name: str, driver: str
) -> CapacitySpec | None:
    """The capacity a request names, bare names in the driver's domain
    (``resolveCapacityRequests``), or None when the device lacks it."""
    return capacity.get(name if "/" in name else f"{driver}/{name}")


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


def rounded(amount: Quantity, spec: CapacitySpec) -> Quantity:
    """What quota counts for a request of ``amount``: what it consumes, except that an amount
    whose rounding passes the policy's ``max`` is counted as written (it never fits anyway)."""
    result = consumed(amount, spec)
    if spec.maximum is not None and result.value > spec.maximum.value:
        return amount
    return result


def violates_policy(amount: Quantity, spec: CapacitySpec) -> bool:
    if not spec.has_policy:
        return False
    if spec.minimum is not None:
        if amount.value < spec.minimum.value:
            return True
        return spec.maximum is not None and amount.value > spec.maximum.value
    if spec.valid_values:
        return amount not in spec.valid_values
    return False


def resolve_requests(
    requests: Mapping[str, Quantity], driver: str, capacity: Mapping[str, CapacitySpec]
) -> dict[str, Quantity] | None:
    """The requested amounts by the device's capacity names, or None when the device lacks
    one of them (``resolveCapacityRequests``: a bare name is in the driver's domain)."""
    out: dict[str, Quantity] = {}
    for name, amount in requests.items():
        qualified = name if "/" in name else f"{driver}/{name}"
        if qualified not in capacity:
            return None
        out[qualified] = amount
    return out


def policy_of(spec: CapacitySpec) -> CapacitySpec:
    """The request policy of a capacity, without its value: what two devices must agree on for
    a request to consume the same of either."""
    return replace(spec, value=ZERO)


def fits(
    driver: str,
    capacity: Mapping[str, CapacitySpec],
    requests: Mapping[str, Quantity],
    taken: Mapping[str, Quantity] | None,
    allocating: Mapping[str, Quantity] | None,
) -> dict[str, Quantity] | None:
    """The capacity the request would consume of a device of ``driver`` with ``capacity``, or
    None when it does not fit (``cmpRequestOverCapacity``): a capacity the device lacks, a
    policy violated, or more than is left after ``taken`` (allocated claims) and
    ``allocating`` (this attempt)."""
    resolved = resolve_requests(requests, driver, capacity)
    if resolved is None:
        return None
    out: dict[str, Quantity] = {}
    for name, spec in capacity.items():
        amount = consumed(resolved.get(name), spec)
        if violates_policy(amount, spec):
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
