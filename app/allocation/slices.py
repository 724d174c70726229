"""What the allocator reads of one ResourceSlice version, besides the CEL view of its devices.

Read once per slice version (:func:`read`, cached by the inventory between builds): its pool and
generation, how it selects its nodes (parsed), its counter sets, and per device the taints,
counter consumption, capacities with their request policies and ``allowMultipleAllocations``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from app.allocation.capacity import CapacitySpec, device_capacity, quantity_or_none
from app.allocation.nodes import LabelIndex, Reach, raw_devices, reach_of
from app.devices.index import IndexedSlice
from app.k8s.quantity import Quantity

__all__ = ["DeviceFacts", "PoolId", "SliceFacts", "read", "spec_of"]

PoolId = tuple[str, str]
"""(driver, pool name)."""
Consumes = tuple[tuple[str, dict[str, Quantity]], ...]
"""(counter set, counters) of each ``consumesCounters`` entry of a device."""


@dataclass(frozen=True, slots=True)
class DeviceFacts:
    raw: Mapping[str, Any]
    taints: tuple[Mapping[str, Any], ...]
    consumes: Consumes
    capacity: Mapping[str, CapacitySpec]
    allow_multiple: bool
    usage: tuple[tuple[tuple[str, str], int | Fraction], ...]
    reach: Reach | None
    """The device's own node selection (read with ``perDeviceNodeSelection``)."""


@dataclass(frozen=True, slots=True)
class SliceFacts:
    """One slice version as the allocator reads it."""

    pool: PoolId
    generation: int
    count: int | None
    """``pool.resourceSliceCount``; None when unset or not a positive number (the API server
    requires one: a file without it is taken as complete)."""
    reach: Reach | None
    """The slice's node selection; None with ``perDeviceNodeSelection`` (or none known)."""
    per_device: bool
    counter_sets: dict[str, dict[str, Quantity]]
    set_names: tuple[str, ...]
    """Every counter set's name, in order, repeats included (a repeat makes the pool invalid)."""
    devices: dict[str, DeviceFacts]
    device_names: tuple[str, ...]
    """Every device's name, in order, repeats included."""

    @property
    def has_counters(self) -> bool:
        """Whether the slice defines counter sets (upstream gathers it for every node its
        ``nodeName`` allows, whatever its node selection says)."""
        return bool(self.set_names)

    def reaches(self, node: str, labels: Mapping[str, str] | None) -> bool:
        """Whether the slice is relevant to the node (``GatherPools``): it defines counter
        sets, or its node selection (or, per device, one device's) matches."""
        if self.has_counters:
            return True
        if self.reach is not None:
            return self.reach.matches(node, labels)
        if self.per_device:
            return any(
                d.reach is not None and d.reach.matches(node, labels) for d in self.devices.values()
            )
        return False

    def reached(self, index: LabelIndex) -> set[str]:
        """The indexed nodes the slice is relevant to: :meth:`reaches` for all of them at once
        (for a slice naming no node)."""
        if self.has_counters:
            return set(index.nodes)
        if self.reach is not None:
            return index.reached(self.reach)
        found: set[str] = set()
        if self.per_device:
            for device in self.devices.values():
                if device.reach is not None:
                    found |= index.reached(device.reach)
        return found

    def whole(self, node: str, labels: Mapping[str, str] | None) -> bool:
        """Whether every device of this relevant slice may be allocated on the node (it is
        relevant through its own node selection); else :meth:`device_reaches`, device by
        device."""
        if self.per_device or self.reach is None:
            return False
        return not self.has_counters or self.reach.matches(node, labels)

    def device_reaches(
        self, device: DeviceFacts, node: str, labels: Mapping[str, str] | None
    ) -> bool:
        """Whether a device of this (relevant) slice may be allocated on the node."""
        if self.per_device:
            return device.reach is not None and device.reach.matches(node, labels)
        # (a slice with counter sets is relevant through them alone: its devices, which only a
        # static file can put beside them, still need the slice's own node selection)
        return self.reach is not None and self.reach.matches(node, labels)


def spec_of(indexed: IndexedSlice) -> Mapping[str, Any]:
    spec = indexed.raw.get("spec")
    return spec if isinstance(spec, Mapping) else {}


def read(indexed: IndexedSlice) -> SliceFacts:
    spec = spec_of(indexed)
    driver = str(spec.get("driver", ""))
    pool = spec.get("pool")
    pool = pool if isinstance(pool, Mapping) else {}
    generation = pool.get("generation")
    count = pool.get("resourceSliceCount")
    sets: dict[str, dict[str, Quantity]] = {}
    set_names: list[str] = []
    shared = spec.get("sharedCounters")
    for entry in shared if isinstance(shared, list) else ():
        if isinstance(entry, Mapping) and isinstance(entry.get("name"), str):
            set_names.append(entry["name"])
            sets.setdefault(entry["name"], _counters(entry.get("counters")))
    per_device = spec.get("perDeviceNodeSelection") is True
    devices: dict[str, DeviceFacts] = {}
    names: list[str] = []
    for raw in raw_devices(spec):
        taints = raw.get("taints")
        consumes = _consumes(raw)
        name = str(raw.get("name"))
        names.append(name)
        devices[name] = DeviceFacts(
            raw,
            tuple(t for t in taints if isinstance(t, Mapping)) if isinstance(taints, list) else (),
            consumes,
            device_capacity(raw, driver),
            raw.get("allowMultipleAllocations") is True,
            tuple(
                ((set_name, counter), _number(amount))
                for set_name, counters in consumes
                for counter, amount in counters.items()
            ),
            reach_of(raw) if per_device else None,
        )
    return SliceFacts(
        (driver, str(pool.get("name", ""))),
        generation if isinstance(generation, int) else 0,
        count if isinstance(count, int) and count > 0 else None,
        None if per_device else reach_of(spec),
        per_device,
        sets,
        tuple(set_names),
        devices,
        tuple(names),
    )


def _counters(value: Any) -> dict[str, Quantity]:
    out: dict[str, Quantity] = {}
    if isinstance(value, Mapping):
        for name, counter in value.items():
            amount = (
                quantity_or_none(counter.get("value")) if isinstance(counter, Mapping) else None
            )
            if amount is not None:
                out[str(name)] = amount
    return out


def _consumes(device: Mapping[str, Any]) -> Consumes:
    value = device.get("consumesCounters")
    if not isinstance(value, list):
        return ()
    return tuple(
        (str(entry.get("counterSet", "")), _counters(entry.get("counters")))
        for entry in value
        if isinstance(entry, Mapping)
    )


def _number(quantity: Quantity) -> int | Fraction:
    value = quantity.value
    return value.numerator if value.denominator == 1 else value
