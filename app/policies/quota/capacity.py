"""Capacity quotas: limits on the capacity shares ask for (`memory: 160Gi` of a DeviceClass).

A claim on devices that allow multiple allocations asks each of its devices for amounts of
their capacities (`exactly.capacity.requests`). `maxCapacityPerClaim` and
`maxCapacityPerNamespace` limit the total per DeviceClass and capacity name: count x amount,
summed over the claim's requests, and over the namespace's claims plus what a workload's pods
will ask for (replicas x per pod), as the device-count quotas do.

Amounts are counted as the scheduler will consume them when every shareable device the class
selects publishes that capacity with the same `requestPolicy` (upstream's
`calculateConsumedCapacity` in k8s.io/dynamic-resource-allocation/structured): below a
`validRange`'s min, the min; between steps, rounded up to `min + n*step`; with `validValues`,
the smallest value at or above the request. Where the devices disagree, or the class is not in
the view, the amount is counted as written. A capacity the request does not name is not
counted (the share consumes the policy's default, which quota does not charge).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from app.allocation.capacity import request_policy, rounded
from app.bounded import BoundedCache, CacheName
from app.cluster.view import ClusterReader, Kind, Obj
from app.devices.index import DeviceIndex, class_selectors
from app.errors import ObjectShapeError
from app.k8s.capacity import Ask, capacity_asks
from app.k8s.claims import parse_claim_spec, template_claim_spec
from app.k8s.quantity import Quantity

Policy = Mapping[str, Any]

_MEMO_LIMIT = 4096


class ClassPolicies:
    """(DeviceClass, capacity) -> the requestPolicy its shareable devices agree on; a derived
    index of the view, forgotten whenever a DeviceClass or ResourceSlice changes."""

    def __init__(self) -> None:
        # values are wrapped in a 1-tuple: None (the devices disagree) is an answer too
        self._memo: BoundedCache[tuple[str, str], tuple[Policy | None]] = BoundedCache(
            CacheName.CAPACITY_POLICIES, _MEMO_LIMIT
        )

    def on_change(self, kind: Kind, old: Obj | None, new: Obj | None) -> None:
        if kind in (Kind.DEVICE_CLASS, Kind.RESOURCE_SLICE):
            self._memo.clear()

    def policy(
        self, view: ClusterReader, index: DeviceIndex, device_class: str, capacity: str
    ) -> Policy | None:
        key = (device_class, capacity)
        found = self._memo.get(key)
        if found is None:
            found = self._memo.put(key, (_agreed(view, index, device_class, capacity),))
        return found[0]


def _agreed(
    view: ClusterReader, index: DeviceIndex, device_class: str, capacity: str
) -> Policy | None:
    """The requestPolicy of `capacity` every shareable device of the class agrees on. `index`
    is the CEL runtime's, subscribed to the view at load: it holds the view's slices already."""
    raw_class = view.device_class(device_class)
    if raw_class is None:
        return None
    try:
        match = index.matching(device_class, class_selectors(raw_class))
    except Exception:  # a class selector the engine cannot compile or run: count as written
        return None
    slices = view.resource_slices()
    policies: list[Policy | None] = []
    for device in match.devices:
        if not device.allow_multiple_allocations:
            continue
        raw = _raw_device(slices.get(device.slice_name), device.name)
        entry = _capacity_entry(raw, capacity, device.driver) if raw is not None else None
        if entry is None:
            continue
        policy = entry.get("requestPolicy")
        policies.append(policy if isinstance(policy, Mapping) else None)
    if not policies or any(p != policies[0] for p in policies):
        return None
    return policies[0]


def _raw_device(resource_slice: Obj | None, name: str) -> Mapping[str, Any] | None:
    spec = resource_slice.get("spec") if resource_slice else None
    for raw in spec.get("devices") or () if isinstance(spec, dict) else ():
        if isinstance(raw, Mapping) and raw.get("name") == name:
            return raw
    return None


def _capacity_entry(device: Mapping[str, Any], name: str, driver: str) -> Mapping[str, Any] | None:
    """The device's capacity `name`: bare names are the driver's (`memory` is
    `<driver>/memory`), as the scheduler reads them."""
    capacity = device.get("capacity")
    if not isinstance(capacity, Mapping):
        return None
    domain, slash, bare = name.rpartition("/")
    other = f"{driver}/{name}" if not slash else (bare if domain == driver else "")
    for key in (name, other):
        entry = capacity.get(key)
        if isinstance(entry, Mapping):
            return entry
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
        return rounded(ask.amount, request_policy(policy))

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
    """The asks of a ResourceClaim or ResourceClaimTemplate object (ObjectShapeError if bad)."""
    if kind == "ResourceClaimTemplate":
        spec, path = template_claim_spec(obj)
    else:
        spec, path = obj.get("spec"), "spec"
    return capacity_asks(parse_claim_spec(spec, path))


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
