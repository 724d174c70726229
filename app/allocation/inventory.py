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

Built once per generation of the device index (:meth:`Inventory.build`), never per request.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Final

from app.cel.device import Device
from app.cel.index import IndexedSlice
from app.k8s.quantity import Quantity, QuantityError, parse_quantity

__all__ = ["ANY_NODE", "Candidate", "CapacitySpec", "Inventory", "Pool"]

ANY_NODE: Final = ""
"""The anonymous node: any node no slice names (it sees allNodes and unevaluable selectors)."""
HOSTNAME: Final = "kubernetes.io/hostname"

DeviceKey = tuple[str, str, str]
"""(driver, pool, device): how allocation results name a device."""


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
        newest = _newest_generations(ordered)
        counts = _slice_counts(ordered)
        shared = _pool_counters(ordered, newest, facts)
        by_node: dict[str, tuple[Candidate, ...]] = {}
        pools_by_node: dict[str, list[Pool]] = {}
        local: dict[str, list[IndexedSlice]] = {}
        shared_slices: list[IndexedSlice] = []
        for indexed in ordered:
            name = _spec(indexed).get("nodeName")
            if isinstance(name, str) and name:
                local.setdefault(name, []).append(indexed)
            else:
                shared_slices.append(indexed)
        for node in nodes:
            pools: dict[tuple[str, str], tuple[Pool, list[IndexedSlice]]] = {}
            reaching = sorted([*local.get(node, ()), *shared_slices], key=lambda s: s.name)
            for indexed in reaching:
                spec = _spec(indexed)
                if not _slice_reaches(spec, node):
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
            by_node[node] = tuple(candidates)
            pools_by_node[node] = gathered
        return cls(generation, by_node, pools_by_node)


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


def _quantity(value: Any) -> Quantity | None:
    if isinstance(value, (str, int)) and not isinstance(value, bool):
        try:
            return parse_quantity(value)
        except QuantityError:
            return None
    return None


def _counters(value: Any) -> dict[str, Quantity]:
    out: dict[str, Quantity] = {}
    if isinstance(value, Mapping):
        for name, counter in value.items():
            amount = _quantity(counter.get("value")) if isinstance(counter, Mapping) else None
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
    for raw in _raw_devices(spec):
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


def _raw_devices(spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    devices = spec.get("devices")
    if not isinstance(devices, list):
        return []
    return [
        d.get("basic", d) if isinstance(d.get("basic"), Mapping) else d
        for d in devices
        if isinstance(d, Mapping)
    ]


def _capacity(device: Mapping[str, Any], driver: str) -> dict[str, CapacitySpec]:
    out: dict[str, CapacitySpec] = {}
    raw = device.get("capacity")
    if not isinstance(raw, Mapping):
        return out
    for name, entry in raw.items():
        if not isinstance(entry, Mapping) or (value := _quantity(entry.get("value"))) is None:
            continue
        qualified = str(name) if "/" in str(name) else f"{driver}/{name}"
        policy = entry.get("requestPolicy")
        if not isinstance(policy, Mapping):
            out.setdefault(qualified, CapacitySpec(value))
            continue
        valid_range = policy.get("validRange")
        valid_range = valid_range if isinstance(valid_range, Mapping) else {}
        values = policy.get("validValues")
        out[qualified] = CapacitySpec(
            value,
            _quantity(policy.get("default")),
            tuple(q for v in values if (q := _quantity(v)) is not None)
            if isinstance(values, list)
            else (),
            _quantity(valid_range.get("min")),
            _quantity(valid_range.get("max")),
            _quantity(valid_range.get("step")),
            True,
        )
    return out


def _candidates(
    indexed: IndexedSlice, facts: SliceFacts, pool: Pool, node: str
) -> Iterable[Candidate]:
    per_device = _spec(indexed).get("perDeviceNodeSelection") is True
    for device in indexed.devices:
        found = facts.devices.get(device.name)
        if found is None:
            continue
        if per_device and not _reaches(found.raw, node):
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


# -- node selection ---------------------------------------------------------------------------


def _slice_reaches(spec: Mapping[str, Any], node: str) -> bool:
    if spec.get("perDeviceNodeSelection") is True:
        return any(_reaches(d, node) for d in _raw_devices(spec))
    return _reaches(spec, node)


def _reaches(holder: Mapping[str, Any], node: str) -> bool:
    """``NodeMatches`` for a slice or a device, without the Node's labels (see the module)."""
    name = holder.get("nodeName")
    if isinstance(name, str) and name:
        return name == node
    if holder.get("allNodes") is True:
        return True
    selector = holder.get("nodeSelector")
    if isinstance(selector, Mapping):
        return _selector_matches(selector, node) is not False
    return False


def _selector_matches(selector: Mapping[str, Any], node: str) -> bool | None:
    """True, False, or None when it depends on labels the view does not have."""
    terms = selector.get("nodeSelectorTerms")
    if not isinstance(terms, list) or not terms:
        return False
    results = [_term_matches(t, node) for t in terms if isinstance(t, Mapping)]
    if True in results:
        return True
    return None if None in results else False


def _term_matches(term: Mapping[str, Any], node: str) -> bool | None:
    outcome: bool | None = True
    for group, known in (("matchFields", "metadata.name"), ("matchExpressions", HOSTNAME)):
        for requirement in term.get(group) or ():
            if not isinstance(requirement, Mapping):
                continue
            operator = requirement.get("operator")
            if requirement.get("key") != known or operator not in ("In", "NotIn"):
                outcome = None
                continue
            # the anonymous node is none of the named ones
            found = node != ANY_NODE and node in (requirement.get("values") or ())
            if found != (operator == "In"):
                return False
    return outcome


def _named(holder: Mapping[str, Any]) -> Iterable[str]:
    name = holder.get("nodeName")
    if isinstance(name, str) and name:
        yield name
    selector = holder.get("nodeSelector")
    terms = selector.get("nodeSelectorTerms") if isinstance(selector, Mapping) else None
    for term in terms if isinstance(terms, list) else ():
        if not isinstance(term, Mapping):
            continue
        for group, known in (("matchFields", "metadata.name"), ("matchExpressions", HOSTNAME)):
            for requirement in term.get(group) or ():
                if (
                    isinstance(requirement, Mapping)
                    and requirement.get("key") == known
                    and requirement.get("operator") == "In"
                ):
                    yield from (v for v in requirement.get("values") or () if isinstance(v, str))


def _node_names(slices: list[IndexedSlice]) -> set[str]:
    names: set[str] = set()
    for indexed in slices:
        spec = _spec(indexed)
        names.update(_named(spec))
        if spec.get("perDeviceNodeSelection") is True:
            for device in _raw_devices(spec):
                names.update(_named(device))
    return names


def _reaches_beyond(indexed: IndexedSlice, names: set[str]) -> bool:
    """Whether the slice has devices for a node no slice names (allNodes, label selectors)."""
    spec = _spec(indexed)
    holders = _raw_devices(spec) if spec.get("perDeviceNodeSelection") is True else [spec]
    return any(_reaches(h, ANY_NODE) for h in holders)
