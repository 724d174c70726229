"""Devices grouped per node, in the order the scheduler tries them.

Mirrors upstream's allocator (k8s.io/dynamic-resource-allocation/structured, internal/incubating)
run once for every node: the slices naming the node and those naming none are gathered into
pools by :func:`app.allocation.pools.gather` (``GatherPools``: node selection, the node's own
newest generation, incomplete and invalid pools).

The nodes are the cluster's Node objects when the view holds them (a metadata-only watch: names
and labels), so a slice's ``nodeSelector`` is evaluated against real labels. Without them (no
permission to list Nodes, or a static file that lists none) the nodes are the names the slices
give (``nodeName``, ``matchFields`` on ``metadata.name``, ``kubernetes.io/hostname`` values) plus,
when some devices reach nodes beyond those, one anonymous node standing for all of them, and a
selector on labels is taken to match (:mod:`app.allocation.nodes`).

Built when the cluster view has synced (:meth:`Inventory.build`), then kept current
(:meth:`Inventory.update`): a slice change re-gathers the nodes it reaches and the nodes that
gathered its pool, a Node's new labels re-gather that node, never per request. Nodes that see a
pool alike share its Pool and devices (a rack's 40 nodes hold one copy of the rack pool), and
nodes with no slice of their own that see the same slices share all they see (a thousand CPU
nodes under one rack-level slice hold one tuple of its devices, not a thousand).
"""

from __future__ import annotations

from bisect import insort
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from heapq import merge
from typing import Any

from app.allocation.nodes import ANY_NODE, LabelIndex, named, raw_devices, reach_of
from app.allocation.pools import Built, Candidate, DeviceKey, Gathered, Pool, gather
from app.allocation.slices import PoolId, SliceFacts, read, spec_of
from app.devices.index import IndexedSlice

__all__ = ["ANY_NODE", "Candidate", "DeviceKey", "Inventory", "Labels", "Pool"]

BULK = 50_000
"""Nodes x shared slices above which a build finds each slice's nodes through a label index."""
Labels = Mapping[str, Mapping[str, str]]
"""Node name -> its labels: the cluster's Nodes."""
Cache = dict[str, tuple[IndexedSlice, SliceFacts]]
"""Slice name -> the version read last and what was read of it (kept between builds)."""


class _Facts(Mapping[str, SliceFacts]):
    """The read facts of the cached slices, by slice name."""

    def __init__(self, cache: Cache) -> None:
        self._cache = cache

    def __getitem__(self, name: str) -> SliceFacts:
        return self._cache[name][1]

    def __iter__(self) -> Iterator[str]:
        return iter(self._cache)

    def __len__(self) -> int:
        return len(self._cache)


@dataclass(slots=True)
class Inventory:
    generation: int
    """The device index's generation it was gathered at."""
    nodes: dict[str, tuple[Candidate, ...]]
    """Node name -> devices reaching it, pool by pool and slice by slice in name order."""
    pools: dict[str, list[Pool]]
    """Node name -> the pools gathered for it (incomplete and invalid ones included)."""
    labels: Labels | None = None
    """The Nodes' labels; None: no Node objects (nodes named by the slices, see the module)."""
    node_generation: int = 0
    """The model's count of Node changes it was gathered at."""

    local: dict[str, list[IndexedSlice]] = field(default_factory=dict)
    """Node name -> the slices naming it in ``nodeName``, by name."""
    shared: list[IndexedSlice] = field(default_factory=list)
    """The slices without a ``nodeName`` (they may reach any node), by name."""
    pool_slices: dict[PoolId, dict[str, IndexedSlice]] = field(default_factory=dict)
    """(driver, pool) -> its slices (every generation), by slice name."""
    relevant: dict[str, frozenset[PoolId]] = field(default_factory=dict)
    """Node name -> the pools with a slice relevant to it."""
    by_pool: dict[PoolId, set[str]] = field(default_factory=dict)
    """The reverse of ``relevant``: which nodes a change to the pool's slices may touch."""
    named: Counter[str] = field(default_factory=Counter)
    """Without Node objects: how many slices name each node."""
    beyond: set[str] = field(default_factory=set)
    """Without Node objects: the slices with devices for nodes no slice names."""
    crossed: set[str] = field(default_factory=set)
    """Without Node objects: the names that slices began or stopped giving since the last
    update (the nodes that may come or go)."""
    broken: set[str] = field(default_factory=set)
    """The nodes that gathered an incomplete or invalid pool (an ``All`` request fails the pod
    there)."""
    cache: Cache = field(default_factory=dict)
    """What was read of each slice version (the cache :meth:`build` and :meth:`update` keep)."""

    @classmethod
    def build(
        cls,
        slices: Iterable[IndexedSlice],
        generation: int,
        cache: Cache | None = None,
        labels: Labels | None = None,
    ) -> Inventory:
        """Group the devices per node. ``cache`` keeps what was read of each slice version
        (taints, counters, capacities, node selection) between builds: after a slice change
        only that slice is read again, the rest is grouping."""
        cache = {} if cache is None else cache
        ordered = sorted(slices, key=_by_name)
        _read_all(ordered, cache)
        inventory = cls(generation, {}, {}, labels, cache=cache)
        for indexed in ordered:
            inventory._add(indexed, cache[indexed.name][1])
        inventory.crossed.clear()
        inventory._gather(inventory._node_set(), _Facts(cache))
        return inventory

    def update(
        self,
        slices: Mapping[str, IndexedSlice],
        generation: int,
        cache: Cache,
        changed: Iterable[str],
        *,
        nodes_changed: Iterable[str] = (),
        labels: Labels | None = None,
    ) -> set[str] | None:
        """Take the changes of the named slices (``slices`` is every current slice by name)
        and of the named Nodes in place, re-gathering only the nodes they may touch: those a
        changed slice reaches, those that gathered a changed slice's pool, the changed Nodes.
        Returns the nodes re-gathered, added or removed; None when that is every node.

        ``labels`` must be None exactly when the inventory was built without Node objects
        (:meth:`build` anew when Nodes appear or all go away)."""
        assert (labels is None) == (self.labels is None), "the nodes changed kind: build anew"
        self.cache = cache
        pools: set[PoolId] = set()
        fresh: list[SliceFacts] = []
        for name in set(changed):
            known = cache.pop(name, None)
            if known is not None:
                self._remove(known[0], known[1])
                pools.add(known[1].pool)
            indexed = slices.get(name)
            if indexed is not None:
                facts = read(indexed)
                cache[name] = (indexed, facts)
                self._add(indexed, facts)
                pools.add(facts.pool)
                fresh.append(facts)
        self.labels = labels
        added, removed = self._node_changes(nodes_changed)
        for node in removed:
            self._drop(node)
        affected = set(added)
        affected.update(n for n in nodes_changed if n in self.nodes)
        for pool_id in pools:
            affected.update(self.by_pool.get(pool_id, ()))
        for facts in fresh:
            affected.update(self._reached(facts, added))
        affected.difference_update(removed)
        self.generation = generation
        self._gather(sorted(affected), _Facts(cache))
        every = len(self.nodes)
        if len(affected) == every and every > 1:
            return None
        return affected | set(removed)

    def _node_changes(self, nodes_changed: Iterable[str]) -> tuple[list[str], list[str]]:
        """The nodes to add and to drop: the Nodes added or deleted, or, without Node objects,
        the names the changed slices gave or took last (and the anonymous node)."""
        if self.labels is not None:
            changed = set(nodes_changed)
            added = [n for n in changed if n in self.labels and n not in self.nodes]
            return added, [n for n in changed if n not in self.labels and n in self.nodes]
        crossed, self.crossed = self.crossed, set()
        added = [n for n in crossed if n in self.named and n not in self.nodes]
        removed = [n for n in crossed if n not in self.named and n in self.nodes]
        anonymous = bool(self.beyond) or not self.named
        if anonymous and ANY_NODE not in self.nodes:
            added.append(ANY_NODE)
        if not anonymous and ANY_NODE in self.nodes:
            removed.append(ANY_NODE)
        return added, removed

    # -- the slices ------------------------------------------------------------------------

    def _add(self, indexed: IndexedSlice, facts: SliceFacts) -> None:
        node = facts.reach.node_name if facts.reach is not None else ""
        if node:
            insort(self.local.setdefault(node, []), indexed, key=_by_name)
        else:
            insort(self.shared, indexed, key=_by_name)
        self.pool_slices.setdefault(facts.pool, {})[indexed.name] = indexed
        names, beyond = _names(indexed)
        self.crossed.update(n for n in names if n not in self.named)
        self.named.update(names)
        if beyond:
            self.beyond.add(indexed.name)

    def _remove(self, indexed: IndexedSlice, facts: SliceFacts) -> None:
        node = facts.reach.node_name if facts.reach is not None else ""
        held = self.local.get(node, []) if node else self.shared
        for i, known in enumerate(held):
            if known is indexed:
                del held[i]
                break
        if node and not held:
            self.local.pop(node, None)
        pool = self.pool_slices.get(facts.pool, {})
        pool.pop(indexed.name, None)
        if not pool:
            self.pool_slices.pop(facts.pool, None)
        names, _ = _names(indexed)
        self.named.subtract(names)
        for name in names:
            if self.named[name] <= 0:
                del self.named[name]
                self.crossed.add(name)
        self.beyond.discard(indexed.name)

    # -- the nodes -------------------------------------------------------------------------

    def _node_set(self) -> list[str]:
        if self.labels is not None:
            return sorted(self.labels)
        names = sorted(self.named)
        return names + ([ANY_NODE] if self.beyond or not names else [])

    def _labels_of(self, node: str) -> Mapping[str, str] | None:
        return self.labels.get(node) if self.labels is not None else None

    def _reached(self, facts: SliceFacts, added: list[str]) -> Iterable[str]:
        """The nodes a slice is relevant to (its devices, or its counter sets, reach them),
        of the inventory's and the ``added`` ones."""
        if facts.reach is not None and facts.reach.node_name:
            return (facts.reach.node_name,)
        nodes = [*self.nodes, *added]
        if facts.has_counters or (facts.reach is not None and facts.reach.all_nodes):
            return nodes
        return [n for n in nodes if facts.reaches(n, self._labels_of(n))]

    def _drop(self, node: str) -> None:
        self.nodes.pop(node, None)
        self.pools.pop(node, None)
        self.broken.discard(node)
        for pool_id in self.relevant.pop(node, ()):
            holders = self.by_pool.get(pool_id)
            if holders is not None:
                holders.discard(node)
                if not holders:
                    del self.by_pool[pool_id]

    def _gather(self, nodes: list[str], facts: Mapping[str, SliceFacts]) -> None:
        """Gather the pools of ``nodes``. Nodes naming no slice of their own that see the
        same shared slices (the same devices of each) share one result."""
        shared = self._shared_for(nodes, facts)
        alike: dict[tuple[Any, ...], Gathered] = {}
        built: Built = {}
        for node in nodes:
            labels = self._labels_of(node)
            own = self.local.get(node)
            seen = shared.get(node, [])
            key = None if own else _sees(seen, facts, node, labels)
            found = alike.get(key) if key is not None else None
            if found is None:
                relevant = merge(own, seen, key=_by_name) if own else seen
                found = gather(node, labels, relevant, self.pool_slices, facts, built=built)
                if key is not None:
                    alike[key] = found
            self._keep(node, found)

    def _shared_for(
        self, nodes: list[str], facts: Mapping[str, SliceFacts]
    ) -> dict[str, list[IndexedSlice]]:
        """The shared slices relevant to each node, by name: asked node by node, or, over many
        nodes and slices, selector by selector against an index of the nodes' labels."""
        out: dict[str, list[IndexedSlice]] = {}
        if self.labels is not None and len(nodes) * len(self.shared) > BULK:
            index = LabelIndex(self.labels, nodes)
            for indexed in self.shared:
                for node in facts[indexed.name].reached(index):
                    out.setdefault(node, []).append(indexed)
            return out
        for node in nodes:
            labels = self._labels_of(node)
            found = [i for i in self.shared if facts[i.name].reaches(node, labels)]
            if found:
                out[node] = found
        return out

    def _keep(self, node: str, found: Gathered) -> None:
        before = self.relevant.get(node, frozenset())
        for pool_id in before - found.relevant:
            holders = self.by_pool.get(pool_id)
            if holders is not None:
                holders.discard(node)
                if not holders:
                    del self.by_pool[pool_id]
        for pool_id in found.relevant - before:
            self.by_pool.setdefault(pool_id, set()).add(node)
        if found.relevant:
            self.relevant[node] = found.relevant
        else:
            self.relevant.pop(node, None)
        self.nodes[node] = found.candidates
        self.pools[node] = found.pools
        if any(p.incomplete or p.invalid is not None for p in found.pools):
            self.broken.add(node)
        else:
            self.broken.discard(node)

    # -- the search's order ----------------------------------------------------------------

    def ordered(self, node: str) -> tuple[Candidate, ...]:
        """The node's devices as the search tries them: :attr:`nodes`, with the devices of its
        ``perDeviceNodeSelection`` slices that do not reach it in their places (``reaches``
        False). Upstream's ``isSelectable`` runs a device's selectors before it checks the
        device's node selection, so a CEL runtime error on such a device aborts the pod as on
        any other. Built when asked (only a selector that errs somewhere makes it matter)."""
        found = self.nodes.get(node, ())
        out: list[Candidate] = []
        at = 0
        while at < len(found):
            first = found[at]
            name = first.device.slice_name
            end = at + 1
            while end < len(found) and found[end].device.slice_name == name:
                end += 1
            run = found[at:end]
            known = self.cache.get(name)
            pool = first.pool
            if known is None or not known[1].per_device or pool.incomplete or pool.invalid:
                out.extend(run)  # (an unusable pool's devices are never tried)
            else:
                out.extend(_in_place(known[0], known[1], run))
            at = end
        return tuple(out)


def _by_name(indexed: IndexedSlice) -> str:
    return indexed.name


def _sees(
    relevant: Iterable[IndexedSlice],
    facts: Mapping[str, SliceFacts],
    node: str,
    labels: Mapping[str, str] | None,
) -> tuple[Any, ...]:
    """What a node without slices of its own sees: each relevant shared slice, with the names
    of its devices that reach the node where that is decided per device."""
    seen: list[Any] = []
    for indexed in relevant:
        found = facts[indexed.name]
        if found.per_device or (found.has_counters and found.devices):
            reaching = tuple(
                name for name, d in found.devices.items() if found.device_reaches(d, node, labels)
            )
            seen.append((indexed.serial, reaching))
        else:
            seen.append(indexed.serial)
    return tuple(seen)


def _in_place(
    indexed: IndexedSlice, facts: SliceFacts, reaching: tuple[Candidate, ...]
) -> Iterator[Candidate]:
    """The devices of a per-device slice in its order: those reaching the node (``reaching``,
    in that order) and the others, marked."""
    by_name = {c.device.name: c for c in reaching}
    pool = reaching[0].pool
    for device in indexed.devices:
        found = by_name.get(device.name)
        if found is not None:
            yield found
            continue
        device_facts = facts.devices.get(device.name)
        if device_facts is not None:
            yield Candidate(
                device,
                (pool.driver, pool.name, device.name),
                pool,
                device_facts.taints,
                device_facts.consumes,
                device_facts.capacity,
                device_facts.allow_multiple,
                device_facts.usage,
                reaches=False,
            )


def _read_all(slices: list[IndexedSlice], cache: Cache) -> None:
    current = set()
    for indexed in slices:
        current.add(indexed.name)
        known = cache.get(indexed.name)
        if known is None or known[0] is not indexed:
            cache[indexed.name] = (indexed, read(indexed))
    for name in [n for n in cache if n not in current]:
        del cache[name]


def _names(indexed: IndexedSlice) -> tuple[list[str], bool]:
    """The node names a slice gives, and whether it has devices for nodes it does not name
    (without Node objects: the anonymous node)."""
    spec = spec_of(indexed)
    holders: list[Mapping[str, Any]] = [spec]
    if spec.get("perDeviceNodeSelection") is True:
        holders = raw_devices(spec)
    names: list[str] = []
    beyond = False
    for holder in holders:
        names.extend(named(holder))
        beyond = beyond or _reaches_anonymous(holder)
    return names, beyond


def _reaches_anonymous(holder: Mapping[str, Any]) -> bool:
    reach = reach_of(holder)
    return reach is not None and reach.matches(ANY_NODE, None)
