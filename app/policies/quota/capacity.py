"""Capacity quotas: limits on the capacity shares ask for (`memory: 160Gi` of a DeviceClass).

A claim on devices that allow multiple allocations asks each of its devices for amounts of
their capacities (`exactly.capacity.requests`). `maxCapacityPerClaim` and
`maxCapacityPerNamespace` limit the total per DeviceClass and capacity name: count x amount,
summed over the claim's requests, and over the namespace's claims plus what a workload's pods
will ask for (replicas x per pod), as the device-count quotas do.

Amounts are counted as the scheduler will consume them when every shareable device the class
selects publishes that capacity with the same `requestPolicy`: what the allocation model's
arithmetic (`app.allocation.capacity`, upstream's `calculateConsumedCapacity`) says a request
consumes. Where the devices disagree, or the class is not in the view, the amount is counted as
written. A capacity the request does not name is not counted (the share consumes the policy's
default, which quota does not charge). Nothing here reads a quantity or a request policy: the
claim model reads the amounts, the allocation layer the devices' capacities.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from app.allocation.capacity import (
    CapacitySpec,
    capacity_named,
    device_capacity,
    policy_of,
    rounded,
)
from app.bounded import BoundedCache, CacheName
from app.cluster.view import ClusterReader, Kind, Obj
from app.devices.index import DeviceIndex, class_selectors
from app.errors import ObjectShapeError
from app.k8s.capacity import Ask, capacity_asks
from app.k8s.claims import ClaimSpec, parse_claim_spec, template_claim_spec
from app.k8s.quantity import Quantity

_NO_POLICY = CapacitySpec(Quantity.from_int(0))

_MEMO_LIMIT = 4096


class ClassPolicies:
    """(DeviceClass, capacity) -> the requestPolicy its shareable devices agree on; a derived
    index of the view, forgotten whenever a DeviceClass or ResourceSlice changes."""

    def __init__(self) -> None:
        # values are wrapped in a 1-tuple: None (the devices disagree) is an answer too
        self._memo: BoundedCache[tuple[str, str], tuple[CapacitySpec | None]] = BoundedCache(
            CacheName.CAPACITY_POLICIES, _MEMO_LIMIT
        )

    def on_change(self, kind: Kind, old: Obj | None, new: Obj | None) -> None:
        if kind in (Kind.DEVICE_CLASS, Kind.RESOURCE_SLICE):
            self._memo.clear()

    def policy(
        self, view: ClusterReader, index: DeviceIndex, device_class: str, capacity: str
    ) -> CapacitySpec | None:
        key = (device_class, capacity)
        found = self._memo.get(key)
        if found is None:
            found = self._memo.put(key, (_agreed(view, index, device_class, capacity),))
        return found[0]


def _agreed(
    view: ClusterReader, index: DeviceIndex, device_class: str, capacity: str
) -> CapacitySpec | None:
    """The request policy of `capacity` every shareable device of the class agrees on. `index`
    is the CEL runtime's, subscribed to the view at load: it holds the view's slices already."""
    raw_class = view.device_class(device_class)
    if raw_class is None:
        return None
    try:
        match = index.matching(device_class, class_selectors(raw_class))
    except Exception:  # a class selector the engine cannot compile or run: count as written
        return None
    slices = view.resource_slices()
    policies: list[CapacitySpec] = []
    for device in match.devices:
        if not device.allow_multiple_allocations:
            continue
        raw = _raw_device(slices.get(device.slice_name), device.name)
        spec = (
            capacity_named(device_capacity(raw, device.driver), capacity, device.driver)
            if raw is not None
            else None
        )
        if spec is not None:
            policies.append(policy_of(spec))
    if not policies or any(p != policies[0] for p in policies):
        return None
    return policies[0]


def _raw_device(resource_slice: Obj | None, name: str) -> Mapping[str, Any] | None:
    spec = resource_slice.get("spec") if resource_slice else None
    for raw in spec.get("devices") or () if isinstance(spec, dict) else ():
        if isinstance(raw, Mapping) and raw.get("name") == name:
            return raw
    return None


@dataclass(frozen=True, slots=True)
class Counted:
    """A claim's (or a pod's) capacity: (class, capacity) -> total after rounding."""

    totals: Mapping[tuple[str, str], Quantity]
    unbounded: frozenset[tuple[str, str]]
    asks: tuple[Ask, ...]


class Counter:
    """Rounds and sums asks for one review (a few classes, memoized per review)."""

    def __init__(self, view: ClusterReader, index: DeviceIndex) -> None:
        self._view = view
        self._index = index
        self._policies = view.index(ClassPolicies)

    def rounded(self, ask: Ask) -> Quantity:
        policy = self._policies.policy(self._view, self._index, ask.device_class, ask.capacity)
        return rounded(ask.amount, policy or _NO_POLICY)

    def count(self, asks: Iterable[Ask], times: int = 1) -> Counted:
        totals: dict[tuple[str, str], Quantity] = {}
        unbounded: set[tuple[str, str]] = set()
        kept = tuple(asks)
        for ask in kept:
            key = (ask.device_class, ask.capacity)
            if ask.unbounded:
                unbounded.add(key)
                continue
            amount = self.rounded(ask).mul(ask.count * times)
            totals[key] = totals[key] + amount if key in totals else amount
        return Counted(totals, frozenset(unbounded), kept)


def claim_asks(obj: Obj, kind: str) -> tuple[Ask, ...]:
    """The asks of a stored ResourceClaim or ResourceClaimTemplate (ObjectShapeError if bad);
    the one under review is decoded already (`asks_of`)."""
    if kind == "ResourceClaimTemplate":
        spec, path = template_claim_spec(obj)
    else:
        spec, path = obj.get("spec"), "spec"
    return asks_of(parse_claim_spec(spec, path))


def asks_of(claim: ClaimSpec) -> tuple[Ask, ...]:
    """The asks of a claim spec already read (ObjectShapeError at a bad amount)."""
    return capacity_asks(claim)


def namespace_asks(view: ClusterReader, namespace: str) -> list[Ask]:
    """The asks of the namespace's ResourceClaims that are not being deleted (malformed ones,
    only possible in a hand-written cluster file, count as nothing)."""
    found: list[Ask] = []
    for claim in view.in_namespace(Kind.RESOURCE_CLAIM, namespace).values():
        meta = claim.get("metadata")
        if isinstance(meta, dict) and meta.get("deletionTimestamp"):
            continue
        try:
            found += claim_asks(claim, "ResourceClaim")
        except ObjectShapeError:
            continue
    return found


def template_asks(view: ClusterReader, name: str, namespace: str) -> tuple[Ask, ...]:
    template = view.get(Kind.RESOURCE_CLAIM_TEMPLATE, name, namespace)
    if template is None:
        return ()
    try:
        return claim_asks(template, "ResourceClaimTemplate")
    except ObjectShapeError:
        return ()
