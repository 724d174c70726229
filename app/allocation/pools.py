"""The pools of one node, as upstream's ``GatherPools`` gathers them.

Mirrors k8s.io/dynamic-resource-allocation/structured/internal/incubating/pools_incubating.go
at v1.36 (the allocator kube-scheduler runs with its 1.36 defaults), node by node:

- the slices considered are those naming the node in ``nodeName`` and those naming none; of
  them a slice is relevant when it defines counter sets (whatever its node selection says), or
  its node selection matches the node (per device with ``perDeviceNodeSelection``: one device's);
- per pool only the newest generation among the relevant slices counts (``addSlice``): the node's
  own view. A node whose relevant slices are as many as the pool's ``resourceSliceCount`` uses
  them, even when another node already sees a newer generation's slice;
- otherwise every slice of the pool is looked at (``checkSlicesInPool``): a newer generation
  anywhere makes this one obsolete (the pool is ignored on the node); the slices of the
  generation, counted across the cluster, must be exactly ``resourceSliceCount`` (more slices
  than declared, as fewer, is incomplete), and the node's devices are then checked against
  the pool's other slices too;
- a pool is invalid (``buildPool``) when a device name repeats among its device slices, a
  counter set is defined twice, a device consumes a counter set the pool does not define (one
  defined only in another pool included) or a counter its set does not have.

Incomplete and invalid pools are gathered (their devices are listed, flagged, for the nearest
miss) but never allocated from: the search skips them. A failed allocation on a node with an
invalid pool is, upstream, "invalid resource pools were encountered" for that node only
(``ErrFailedAllocationOnNode``): not fatal to the pod, so here the pool's devices are simply not
there. A request for ``allocationMode: All`` on a node that gathered one (of any driver) is
another matter: ``validateDeviceRequest`` fails the whole pod ("asks for all devices, but
resource pool ... is currently being updated", or "invalid":
:class:`~app.allocation.plans.UnusablePool`).

Where upstream takes the first slice its lister returns (``slicesForPool[0]``: its generation's
``resourceSliceCount``), the slice first by name is taken. The API server refuses a slice with
both counter sets and devices; one in a static file is taken as both (its devices allocatable).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from app.allocation.capacity import CapacitySpec
from app.allocation.slices import Consumes, PoolId, SliceFacts
from app.cel.device import Device
from app.devices.index import IndexedSlice
from app.k8s.quantity import Quantity

__all__ = ["Candidate", "DeviceKey", "Gathered", "Pool", "gather"]

DeviceKey = tuple[str, str, str]
"""(driver, pool, device): how allocation results name a device."""


@dataclass(slots=True)
class Pool:
    driver: str
    name: str
    generation: int
    incomplete: bool = False
    invalid: str | None = None
    counter_sets: dict[str, dict[str, Quantity]] = field(default_factory=dict)
    consumers: list[tuple[DeviceKey, Consumes]] = field(default_factory=list)
    """The devices whose allocation is charged to the pool's counters (``checkAvailableCounters``:
    those of the slices gathered for the node, and of the generation's other slices when the
    node does not see all of them)."""

    @property
    def label(self) -> str:
        return f"{self.driver}/{self.name}"


@dataclass(frozen=True, slots=True)
class Candidate:
    """One device as the allocator sees it on one node."""

    device: Device
    key: DeviceKey
    pool: Pool
    taints: tuple[Mapping[str, Any], ...]
    consumes: Consumes
    capacity: Mapping[str, CapacitySpec]
    """By fully qualified name (``<domain>/<name>``)."""
    allow_multiple: bool
    usage: tuple[tuple[tuple[str, str], int | Fraction], ...] = ()
    """``consumes`` flattened to ((counter set, counter), amount), for the search."""
    reaches: bool = True
    """False for a device of a ``perDeviceNodeSelection`` slice that does not reach the node
    (:meth:`app.allocation.inventory.Inventory.ordered`): upstream's ``isSelectable`` runs its
    selectors before it checks its node selection, so it is tried, never taken."""

    @property
    def label(self) -> str:
        return "/".join(self.key)


@dataclass(frozen=True, slots=True)
class Gathered:
    """What one node sees."""

    candidates: tuple[Candidate, ...]
    """Its devices, pool by pool and slice by slice in name order."""
    pools: list[Pool]
    relevant: frozenset[PoolId]
    """The pools with a slice relevant to the node (gathered, or obsolete there)."""


EMPTY = Gathered((), [], frozenset())


Built = dict[Any, tuple[Pool | None, tuple[Candidate, ...]]]
"""Pools already built in one pass, by pool and what the node sees of each member slice: nodes
that see a pool alike (a rack's nodes, every node under an allNodes slice) share its Pool and
candidates."""


def gather(
    node: str,
    labels: Mapping[str, str] | None,
    relevant: Iterable[IndexedSlice],
    pool_slices: Mapping[PoolId, Mapping[str, IndexedSlice]],
    facts: Mapping[str, SliceFacts],
    *,
    built: Built | None = None,
) -> Gathered:
    """``GatherPools`` for one node. ``relevant``: of the slices naming the node and those
    naming none, the ones relevant to it (:meth:`SliceFacts.reaches`), by name;
    ``pool_slices``: every slice of every pool, by pool; ``built``: the pools of this pass."""
    pools: dict[PoolId, list[IndexedSlice]] = {}
    for indexed in relevant:
        found = facts[indexed.name]
        members = pools.get(found.pool)
        if members is None:
            pools[found.pool] = [indexed]
        elif found.generation > facts[members[0].name].generation:
            pools[found.pool] = [indexed]  # newer: replaces the older ones
        elif found.generation == facts[members[0].name].generation:
            members.append(indexed)
    if not pools:
        return EMPTY
    built = {} if built is None else built
    candidates: list[Candidate] = []
    gathered: list[Pool] = []
    for pool_id in sorted(pools):
        members = pools[pool_id]
        reaching = [_reaching(facts[i.name], node, labels) for i in members]
        key = (pool_id, tuple(i.serial for i in members), tuple(reaching))
        found_pool = built.get(key)
        if found_pool is None:
            found_pool = built[key] = _pool(pool_id, members, reaching, pool_slices, facts)
        pool, devices = found_pool
        if pool is not None:
            candidates.extend(devices)
            gathered.append(pool)
    return Gathered(tuple(candidates), gathered, frozenset(pools))


def _reaching(facts: SliceFacts, node: str, labels: Mapping[str, str] | None) -> Any:
    """What the node sees of a relevant slice: all its devices (None), or the names of
    those that reach it."""
    if facts.whole(node, labels):
        return None
    return tuple(n for n, d in facts.devices.items() if facts.device_reaches(d, node, labels))


def _pool(
    pool_id: PoolId,
    members: list[IndexedSlice],
    reaching: list[Any],
    pool_slices: Mapping[PoolId, Mapping[str, IndexedSlice]],
    facts: Mapping[str, SliceFacts],
) -> tuple[Pool | None, tuple[Candidate, ...]]:
    """One pool of a node and its candidates; no pool when it is obsolete there."""
    first = facts[members[0].name]
    pool = Pool(pool_id[0], pool_id[1], first.generation)
    everything: Sequence[IndexedSlice] | None = None
    if first.count is not None and len(members) != first.count:
        everything = _generation(pool_slices.get(pool_id, {}), first.generation, facts)
        if everything is None:
            return None, ()  # obsolete: the driver is replacing this generation
        pool.incomplete = len(everything) != first.count
    if not pool.incomplete:
        _build(pool, members, everything, facts)
    devices: list[Candidate] = []
    for indexed, names in zip(members, reaching, strict=True):
        devices.extend(_candidates(indexed, facts[indexed.name], pool, names))
    return pool, tuple(devices)


def _generation(
    slices: Mapping[str, IndexedSlice], generation: int, facts: Mapping[str, SliceFacts]
) -> list[IndexedSlice] | None:
    """``checkSlicesInPool``: the pool's slices of ``generation``, or None when a newer one
    exists."""
    out = []
    for indexed in slices.values():
        found = facts[indexed.name].generation
        if found > generation:
            return None
        if found == generation:
            out.append(indexed)
    return out


def _build(
    pool: Pool,
    members: list[IndexedSlice],
    everything: Sequence[IndexedSlice] | None,
    facts: Mapping[str, SliceFacts],
) -> None:
    """``buildPool``: the counter sets, the devices charged to them, and whether it is
    invalid."""
    names: set[str] = set()
    for indexed in members:
        found = facts[indexed.name]
        if found.has_counters and not found.devices:
            continue
        for name in found.device_names:
            if name in names:
                pool.invalid = f"duplicate device name {name}"
                return
            names.add(name)
    for indexed in members:
        for name in facts[indexed.name].set_names:
            if name in pool.counter_sets:
                pool.invalid = f"duplicate counter set name {name}"
                return
            pool.counter_sets[name] = facts[indexed.name].counter_sets[name]
    charged = list(members)
    if everything is not None and len(everything) != len(members):
        seen = {i.name for i in members}
        charged += [i for i in everything if i.name not in seen]
    for indexed in charged:
        found = facts[indexed.name]
        for device, device_facts in found.devices.items():
            problem = _unknown_counter(device_facts.consumes, pool.counter_sets)
            if problem is not None:
                pool.invalid = problem
                return
            if device_facts.consumes:
                pool.consumers.append(((pool.driver, pool.name, device), device_facts.consumes))


def _unknown_counter(
    consumes: Consumes, counter_sets: Mapping[str, Mapping[str, Quantity]]
) -> str | None:
    """``validateDeviceCounterConsumption`` for one device."""
    for set_name, counters in consumes:
        known = counter_sets.get(set_name)
        if known is None:
            return f"counter set {set_name} not found"
        for counter in counters:
            if counter not in known:
                return f"counter {counter} not found in counter set {set_name}"
    return None


def _candidates(
    indexed: IndexedSlice, facts: SliceFacts, pool: Pool, names: tuple[str, ...] | None
) -> Iterable[Candidate]:
    """The devices of a member slice the node sees (``names``; None: all of them)."""
    for device in indexed.devices:
        found = facts.devices.get(device.name)
        if found is None or (names is not None and device.name not in names):
            continue
        yield Candidate(
            device,
            (pool.driver, pool.name, device.name),
            pool,
            found.taints,
            found.consumes,
            found.capacity,
            found.allow_multiple,
            found.usage,
        )
