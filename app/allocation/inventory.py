"""Devices grouped per node, in the order the scheduler tries them.

Mirrors upstream's ``GatherPools`` (k8s.io/dynamic-resource-allocation/structured,
internal/incubating/pools_incubating.go) run once for every node: a slice reaches a node by
``nodeName``, ``allNodes`` or ``nodeSelector``, or, with ``perDeviceNodeSelection``, device by
device; of a pool only the newest generation counts (a pool whose newest generation lies on
slices that do not reach the node is ignored there); a pool missing slices of its generation is
incomplete and one with a duplicate device name invalid: their devices are not allocated (and
a request for ``allocationMode: All`` fails on that node).

The view holds no Node objects, so the nodes are the names the slices give (``nodeName``,
``matchFields`` on ``metadata.name``, ``kubernetes.io/hostname`` values) plus, when some devices
reach nodes beyond those, one anonymous node standing for all of them. A node selector on other
labels cannot be evaluated without the node: it is taken to match (the check must never call a
claim impossible that the scheduler could place).

Built when the cluster view has synced (:meth:`Inventory.build`), then kept current slice by
slice (:meth:`Inventory.update`: a change to a node-local slice re-gathers only its node), never
per request.
"""

from __future__ import annotations

from bisect import insort
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from app.allocation.capacity import CapacitySpec, capacity_spec, quantity_or_none
from app.allocation.nodes import ANY_NODE, named, raw_devices, reaches, slice_reaches
from app.cel.device import Device
from app.devices.index import IndexedSlice
from app.k8s.quantity import Quantity

__all__ = ["ANY_NODE", "Candidate", "Inventory", "Pool"]


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
    consumers: list[tuple[DeviceKey, tuple[tuple[str, dict[str, Quantity]], ...]]] = field(
        default_factory=list
    )
    """Every device of the pool's generation that consumes counters (on any node)."""

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
    consumes: tuple[tuple[str, dict[str, Quantity]], ...]
    capacity: Mapping[str, CapacitySpec]
    """By fully qualified name (``<domain>/<name>``)."""
    allow_multiple: bool
    usage: tuple[tuple[tuple[str, str], int | Fraction], ...] = ()
    """``consumes`` flattened to ((counter set, counter), amount), for the search."""

    @property
    def label(self) -> str:
        return "/".join(self.key)


@dataclass(slots=True)
class Inventory:
    generation: int
    nodes: dict[str, tuple[Candidate, ...]]
    """Node name -> devices reaching it, pool by pool and slice by slice in name order."""
    pools: dict[str, list[Pool]]
    """Node name -> the pools gathered for it (incomplete and invalid ones included)."""

    local: dict[str, list[IndexedSlice]] = field(default_factory=dict)
    """Node name -> the slices naming it in ``nodeName``, by name."""
    shared: list[IndexedSlice] = field(default_factory=list)
    """The slices without a ``nodeName`` (they may reach any node), by name."""
    pool_slices: dict[tuple[str, str], dict[str, IndexedSlice]] = field(default_factory=dict)
    """(driver, pool) -> its slices (every generation), by slice name."""

    @classmethod
    def build(
        cls,
        slices: Iterable[IndexedSlice],
        generation: int,
        cache: dict[str, tuple[IndexedSlice, SliceFacts]] | None = None,
    ) -> Inventory:
        """Group the devices per node. ``cache`` keeps what was read of each slice version
        (taints, counters, capacities) between builds: after a slice change only that slice
        is read again, the rest is grouping."""
        ordered = sorted(slices, key=lambda s: s.name)
        facts = _read_all(ordered, {} if cache is None else cache)
        names = _node_names(ordered)
        has_shared = any(_reaches_beyond(s, names) for s in ordered)
        nodes = sorted(names) + ([ANY_NODE] if has_shared or not names else [])
        inventory = cls(generation, {}, {})
        for indexed in ordered:
            inventory._add(indexed)
        inventory._gather(nodes, ordered, facts)
        return inventory

    def update(
        self,
        slices: Mapping[str, IndexedSlice],
        generation: int,
        cache: dict[str, tuple[IndexedSlice, SliceFacts]],
        changed: Iterable[str],
    ) -> set[str] | None:
        """Take the changes of the named slices (``slices`` is every current slice by name)
        in place, re-gathering only the nodes they reach; returns those nodes. Returns None,
        having changed nothing, when the change is not local to nodes that stay (a slice
        without ``nodeName``, a node added or emptied, a pool spanning other nodes): then
        :meth:`build` anew."""
        olds = {n: cache[n][0] for n in changed if n in cache}
        news = {n: slices[n] for n in changed if n in slices}
        nodes: set[str] = set()
        pools: set[tuple[str, str]] = set()
        for indexed in (*olds.values(), *news.values()):
            spec = _spec(indexed)
            node = spec.get("nodeName")
            if not isinstance(node, str) or not node or node not in self.nodes:
                return None
            if spec.get("perDeviceNodeSelection") is True:
                return None
            nodes.add(node)
            pools.add(_pool_id(spec)[0])
        for pool_id in pools:
            for indexed in self.pool_slices.get(pool_id, {}).values():
                if indexed.name not in olds and _spec(indexed).get("nodeName") not in nodes:
                    return None
        for name, indexed in olds.items():
            self._remove(indexed)
            del cache[name]
        for indexed in news.values():
            self._add(indexed)
        if any(not self.local.get(node) for node in nodes):
            for indexed in news.values():
                self._remove(indexed)
            for indexed in olds.values():
                self._add(indexed)
                cache[indexed.name] = (indexed, _read(indexed))
            return None
        involved = {
            _pool_id(_spec(i))[0] for node in nodes for i in (*self.local[node], *self.shared)
        }
        members = sorted(
            (i for p in involved for i in self.pool_slices.get(p, {}).values()),
            key=lambda s: s.name,
        )
        facts = {}
        for indexed in members:
            known = cache.get(indexed.name)
            if known is None or known[0] is not indexed:
                known = cache[indexed.name] = (indexed, _read(indexed))
            facts[indexed.name] = known[1]
        self.generation = generation
        self._gather(sorted(nodes), members, facts)
        return nodes

    def _add(self, indexed: IndexedSlice) -> None:
        spec = _spec(indexed)
        node = spec.get("nodeName")
        if isinstance(node, str) and node:
            insort(self.local.setdefault(node, []), indexed, key=_by_name)
        else:
            insort(self.shared, indexed, key=_by_name)
        self.pool_slices.setdefault(_pool_id(spec)[0], {})[indexed.name] = indexed

    def _remove(self, indexed: IndexedSlice) -> None:
        spec = _spec(indexed)
        node = spec.get("nodeName")
        held = self.local.get(node, []) if isinstance(node, str) and node else self.shared
        for i, known in enumerate(held):
            if known is indexed:
                del held[i]
                break
        pool = self.pool_slices.get(_pool_id(spec)[0], {})
        pool.pop(indexed.name, None)

    def _gather(
        self, nodes: Iterable[str], pooled: list[IndexedSlice], facts: Mapping[str, SliceFacts]
    ) -> None:
        """Gather the pools of ``nodes`` (``pooled``: at least every slice of every pool
        reaching them, by name)."""
        newest = _newest_generations(pooled)
        counts = _slice_counts(pooled)
        shared = _pool_counters(pooled, newest, facts)
        for node in nodes:
            pools: dict[tuple[str, str], tuple[Pool, list[IndexedSlice]]] = {}
            reaching = sorted([*self.local.get(node, ()), *self.shared], key=_by_name)
            for indexed in reaching:
                spec = _spec(indexed)
                if not slice_reaches(spec, node):
                    continue
                pool_id, generation_ = _pool_id(spec)
                found = pools.get(pool_id)
                if found is not None and generation_ < found[0].generation:
                    continue
                if found is None or generation_ > found[0].generation:
                    pool = Pool(pool_id[0], pool_id[1], generation_)
                    found = (pool, [])
                    pools[pool_id] = found
                found[1].append(indexed)
            candidates: list[Candidate] = []
            gathered: list[Pool] = []
            for pool_id in sorted(pools):
                pool, members = pools[pool_id]
                if newest.get(pool_id, pool.generation) > pool.generation:
                    continue  # obsolete: the driver is replacing this generation
                wanted = _slice_count(_spec(members[0]))
                pool.incomplete = (
                    wanted is not None and counts.get((pool_id, pool.generation), 0) < wanted
                )
                pool.counter_sets, pool.consumers = shared.get(pool_id, ({}, []))
                seen: set[str] = set()
                for indexed in members:
                    for candidate in _candidates(indexed, facts[indexed.name], pool, node):
                        if candidate.device.name in seen:
                            pool.invalid = f"duplicate device name {candidate.device.name}"
                        seen.add(candidate.device.name)
                        candidates.append(candidate)
                gathered.append(pool)
            self.nodes[node] = tuple(candidates)
            self.pools[node] = gathered


def _by_name(indexed: IndexedSlice) -> str:
    return indexed.name


# -- reading slices ---------------------------------------------------------------------------


def _spec(indexed: IndexedSlice) -> Mapping[str, Any]:
    spec = indexed.raw.get("spec")
    return spec if isinstance(spec, Mapping) else {}


def _pool_id(spec: Mapping[str, Any]) -> tuple[tuple[str, str], int]:
    pool = spec.get("pool")
    pool = pool if isinstance(pool, Mapping) else {}
    generation = pool.get("generation")
    return (
        (str(spec.get("driver", "")), str(pool.get("name", ""))),
        generation if isinstance(generation, int) else 0,
    )


def _slice_count(spec: Mapping[str, Any]) -> int | None:
    pool = spec.get("pool")
    count = pool.get("resourceSliceCount") if isinstance(pool, Mapping) else None
    return count if isinstance(count, int) and count > 0 else None


def _newest_generations(slices: list[IndexedSlice]) -> dict[tuple[str, str], int]:
    newest: dict[tuple[str, str], int] = {}
    for indexed in slices:
        pool_id, generation = _pool_id(_spec(indexed))
        newest[pool_id] = max(newest.get(pool_id, generation), generation)
    return newest


def _slice_counts(slices: list[IndexedSlice]) -> dict[tuple[tuple[str, str], int], int]:
    counts: dict[tuple[tuple[str, str], int], int] = {}
    for indexed in slices:
        key = _pool_id(_spec(indexed))
        counts[key] = counts.get(key, 0) + 1
    return counts


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


def _consumes(device: Mapping[str, Any]) -> tuple[tuple[str, dict[str, Quantity]], ...]:
    value = device.get("consumesCounters")
    if not isinstance(value, list):
        return ()
    return tuple(
        (str(entry.get("counterSet", "")), _counters(entry.get("counters")))
        for entry in value
        if isinstance(entry, Mapping)
    )


@dataclass(frozen=True, slots=True)
class DeviceFacts:
    raw: Mapping[str, Any]
    taints: tuple[Mapping[str, Any], ...]
    consumes: tuple[tuple[str, dict[str, Quantity]], ...]
    capacity: Mapping[str, CapacitySpec]
    allow_multiple: bool
    usage: tuple[tuple[tuple[str, str], int | Fraction], ...]


@dataclass(frozen=True, slots=True)
class SliceFacts:
    """What the allocator reads of one slice version besides the CEL view of its devices."""

    counter_sets: dict[str, dict[str, Quantity]]
    devices: dict[str, DeviceFacts]


def _read_all(
    slices: list[IndexedSlice], cache: dict[str, tuple[IndexedSlice, SliceFacts]]
) -> dict[str, SliceFacts]:
    out = {}
    for indexed in slices:
        known = cache.get(indexed.name)
        if known is None or known[0] is not indexed:
            known = (indexed, _read(indexed))
            cache[indexed.name] = known
        out[indexed.name] = known[1]
    for name in [n for n in cache if n not in out]:
        del cache[name]
    return out


def _read(indexed: IndexedSlice) -> SliceFacts:
    spec = _spec(indexed)
    driver = str(spec.get("driver", ""))
    sets = {}
    shared = spec.get("sharedCounters")
    if isinstance(shared, list):
        for entry in shared:
            if isinstance(entry, Mapping) and isinstance(entry.get("name"), str):
                sets[entry["name"]] = _counters(entry.get("counters"))
    devices = {}
    for raw in raw_devices(spec):
        taints = raw.get("taints")
        consumes = _consumes(raw)
        devices[str(raw.get("name"))] = DeviceFacts(
            raw,
            tuple(t for t in taints if isinstance(t, Mapping)) if isinstance(taints, list) else (),
            consumes,
            _capacity(raw, driver),
            raw.get("allowMultipleAllocations") is True,
            tuple(
                ((set_name, name), _number(amount))
                for set_name, counters in consumes
                for name, amount in counters.items()
            ),
        )
    return SliceFacts(sets, devices)


def _pool_counters(
    slices: list[IndexedSlice],
    newest: Mapping[tuple[str, str], int],
    facts: Mapping[str, SliceFacts],
) -> dict[tuple[str, str], tuple[dict[str, dict[str, Quantity]], list[Any]]]:
    """Per pool (its newest generation): the counter sets of all its slices, and the devices
    that consume counters (so allocated ones can be charged whatever node they are on)."""
    out: dict[tuple[str, str], tuple[dict[str, dict[str, Quantity]], list[Any]]] = {}
    for indexed in slices:
        pool_id, generation = _pool_id(_spec(indexed))
        if generation != newest.get(pool_id):
            continue
        sets, consumers = out.setdefault(pool_id, ({}, []))
        found = facts[indexed.name]
        sets.update(found.counter_sets)
        for name, device in found.devices.items():
            if device.consumes:
                consumers.append(((pool_id[0], pool_id[1], name), device.consumes))
    return out


def _capacity(device: Mapping[str, Any], driver: str) -> dict[str, CapacitySpec]:
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


def _candidates(
    indexed: IndexedSlice, facts: SliceFacts, pool: Pool, node: str
) -> Iterable[Candidate]:
    per_device = _spec(indexed).get("perDeviceNodeSelection") is True
    for device in indexed.devices:
        found = facts.devices.get(device.name)
        if found is None:
            continue
        if per_device and not reaches(found.raw, node):
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


def _number(quantity: Quantity) -> int | Fraction:
    value = quantity.value
    return value.numerator if value.denominator == 1 else value


def _node_names(slices: list[IndexedSlice]) -> set[str]:
    names: set[str] = set()
    for indexed in slices:
        spec = _spec(indexed)
        names.update(named(spec))
        if spec.get("perDeviceNodeSelection") is True:
            for device in raw_devices(spec):
                names.update(named(device))
    return names


def _reaches_beyond(indexed: IndexedSlice, names: set[str]) -> bool:
    """Whether the slice has devices for a node no slice names (allNodes, label selectors)."""
    spec = _spec(indexed)
    holders = raw_devices(spec) if spec.get("perDeviceNodeSelection") is True else [spec]
    return any(reaches(h, ANY_NODE) for h in holders)
