"""Which devices in the cluster a DeviceClass + selectors can match, fast enough to ask per request.

:class:`DeviceIndex` is fed plain values: the raw ResourceSlices (a mapping name -> object, as
the cluster view's ``resource_slices()`` returns) and a generation number that changes whenever
any slice changes (``generation("ResourceSlice")``). It

- converts each slice's devices to CEL activations once per slice version (name +
  resourceVersion/generation), not per request;
- memoizes "which devices of this class match these selectors" per slice-set generation, so a
  repeated claim shape costs one dictionary lookup;
- on a memo miss, evaluates each selector once per *distinct view* of a device: a selector that
  reads only ``device.capacity["gpu.nvidia.com"].memory`` gets one evaluation for all devices
  with the same memory, however many there are (the paths it can read come from
  :func:`app.cel.syntax.device_paths`; an expression that uses ``device`` any other way is
  evaluated per device), and takes the outcome once per distinct sequence of views in a slice
  (:mod:`app.cel.parts`: slices alike cost a lookup each, and share one part per shape when
  all or none of their devices match).

It is fed either way: as a listener of the cluster view (:meth:`DeviceIndex.on_change`,
subscribed at startup, so a slice event converts only that slice's devices and the request path
never changes the index), or in bulk with :meth:`DeviceIndex.sync` (tests, benchmarks, offline).

An evaluation error (an attribute the device does not have) does not make the device match;
the others are still tried. Each erring device is kept in :attr:`Match.erring` with the selector
that erred, because kube-scheduler's allocator (k8s.io/dynamic-resource-allocation/structured,
``selectorsMatch``) aborts the whole claim on a CEL runtime error, even when other devices match
(DESIGN.md, "A CEL runtime error is fatal to the whole claim"): :mod:`app.allocation` decides
whether the scheduler would reach that device. A selector that does not compile raises
:class:`~app.cel.errors.CelCompileError`.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from itertools import chain
from operator import attrgetter
from types import MappingProxyType
from typing import Any, Final

from app.bounded import DEFAULT_MAX_BYTES, BoundedCache, CacheName
from app.cel.cache import CompileCache
from app.cel.cost import Budget
from app.cel.device import Device, devices_of_slice
from app.cel.engine import SELECTOR, Engine, Program
from app.cel.parts import (
    DeviceRefs,
    IndexedSlice,
    Match,
    Part,
    Plan,
    Shape,
    ShapeKey,
    Snapshot,
    common_part,
    keep,
    outcomes,
    shape_bytes,
    slice_signature,
)
from app.cel.projection import KEYS_KEPT_PER_DEVICE, MISSING, Indexed, Views, view_of
from app.cluster.view import Kind
from app.k8s.claims import device_class_expressions

__all__ = [
    "KEYS_KEPT_PER_DEVICE",
    "DeviceIndex",
    "DeviceRefs",
    "IndexedSlice",
    "Match",
    "class_selectors",
]

_MEMO_LIMIT: Final = 8192
"""Class + selector sets remembered; also bounded by bytes (`max_bytes`)."""
VIEWS_KEPT: Final = 4096
"""Expressions whose device paths are remembered (selectors come from users: bounded)."""
CHANGES_KEPT: Final = 4096
"""Slice changes remembered (which slices changed since a generation): older are unknown."""
TABLES_KEPT: Final = 256
"""Path sets whose distinct projections are numbered (:class:`~app.cel.projection.Views`)."""


class_selectors = device_class_expressions
"""The CEL expressions of a raw DeviceClass's well-formed ``spec.selectors`` (the claim model's
reader, :func:`app.k8s.claims.device_class_expressions`)."""


class DeviceIndex:
    """Device activations per slice version and a per-slice memo of selector matches."""

    def __init__(
        self,
        engine: Engine,
        cache: CompileCache | None = None,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        self.engine = engine
        self.cache = cache if cache is not None else CompileCache()
        self._lock = threading.Lock()
        self._snapshot = Snapshot(generation=-1, slices=())
        self._slices: dict[str, IndexedSlice] = {}
        self._views: BoundedCache[str, tuple[tuple[str, ...], ...] | None] = BoundedCache(
            CacheName.CEL_DEVICE_PATHS, VIEWS_KEPT
        )
        self._plans: BoundedCache[tuple[str, ...], Plan] = BoundedCache(
            CacheName.CEL_DEVICE_PATHS, VIEWS_KEPT
        )
        self._tables: BoundedCache[tuple[tuple[str, ...], ...], Views] = BoundedCache(
            CacheName.CEL_DEVICE_PATHS, TABLES_KEPT
        )
        self._changes = 0
        self._log: deque[tuple[int, str]] = deque(maxlen=CHANGES_KEPT)
        self._log_floor = -1
        """The generation from which the log holds every change (older ones: unknown)."""
        # A slice change leaves the entries: each is brought up to date slice by slice when
        # next read (only the changed slices are evaluated again).
        self._memo: BoundedCache[tuple[Any, ...], Shape] = BoundedCache(
            CacheName.CEL_DEVICE_MATCH, _MEMO_LIMIT, max_bytes=max_bytes, size=shape_bytes
        )

    @property
    def memo_hits(self) -> int:
        return self._memo.hits

    @property
    def memo_misses(self) -> int:
        return self._memo.misses

    @property
    def generation(self) -> int:
        """Changes whenever a slice changes (what memos of match results are keyed by)."""
        return self._snapshot.generation

    @property
    def devices(self) -> tuple[Device, ...]:
        return tuple(i.device for i in self._snapshot.devices())

    def slices(self) -> tuple[IndexedSlice, ...]:
        """The slices of this generation (view order), each with its converted devices."""
        return self._snapshot.slices

    def by_name(self) -> Mapping[str, IndexedSlice]:
        """The current slices by name (read-only)."""
        return MappingProxyType(self._slices)

    def changed_since(self, generation: int) -> set[str] | None:
        """The names of the slices changed after ``generation`` (added, modified or deleted),
        or None when that is no longer known (too many changes since, or a bulk sync)."""
        if generation < self._log_floor:
            return None
        return {name for changed, name in self._log if changed > generation}

    def on_change(self, kind: Kind, old: Mapping[str, Any] | None, new: Any) -> None:
        """ClusterView listener: convert the changed slice's devices (only those)."""
        if kind is not Kind.RESOURCE_SLICE:
            return
        with self._lock:
            if old is not None:
                self._slices.pop(_name(old), None)
            if new is not None:
                name = _name(new)
                self._slices[name] = self._indexed(name, new, self._slices.get(name))
            self._changes += 1
            if len(self._log) == self._log.maxlen:
                self._log_floor = self._log[0][0]
            changed = new if new is not None else old
            self._log.append((self._changes, _name(changed) if changed is not None else ""))
            self._snapshot = Snapshot(self._changes, tuple(self._slices.values()))

    def sync(
        self,
        resource_slices: Mapping[str, Mapping[str, Any]] | Iterable[Mapping[str, Any]],
        generation: int,
    ) -> None:
        """Take the cluster's slices at ``generation`` (a no-op when it has not changed): the
        bulk form of :meth:`on_change`, for callers without a view."""
        if generation == self._snapshot.generation:
            return
        with self._lock:
            if generation == self._snapshot.generation:
                return
            items = (
                list(resource_slices.items())
                if isinstance(resource_slices, Mapping)
                else [(_name(s), s) for s in resource_slices]
            )
            slices: dict[str, IndexedSlice] = {}
            for name, raw in sorted(items, key=lambda item: item[0]):
                slices[name] = self._indexed(name, raw, self._slices.get(name))
            self._slices = slices
            self._changes = max(self._changes, generation)
            self._log.clear()
            self._log_floor = self._changes
            self._snapshot = Snapshot(generation, tuple(slices.values()))

    def _indexed(
        self, name: str, raw: Mapping[str, Any], known: IndexedSlice | None
    ) -> IndexedSlice:
        version = _version(raw)
        if known is not None and version is not None and known.version == version:
            return known
        entries = tuple(
            Indexed(device, self.engine.device_activation(device))
            for device in devices_of_slice(raw)
        )
        devices = tuple(e.device for e in entries)
        return IndexedSlice(
            name, version, raw, entries, devices, frozenset(d.name for d in devices)
        )

    def matching(
        self,
        class_name: str,
        class_expressions: Sequence[str],
        selectors: Sequence[str] = (),
        budget: Budget | None = None,
    ) -> Match:
        """Devices matching every class selector and every request selector (memoized).

        The memo keeps each class + selector set's matches slice by slice: after a slice
        change only that slice's devices are evaluated again. Evaluations (not memo hits) are
        charged to ``budget``, which raises :class:`~app.cel.cost.BudgetExceededError` once
        spent.
        """
        snapshot = self._snapshot
        shape = self._current(class_name, class_expressions, selectors, snapshot, budget)
        match = shape.match
        if match is None or shape.generation != snapshot.generation:
            match = self._combine(shape, snapshot, class_name, class_expressions, selectors)
            shape.match, shape.generation = match, snapshot.generation
            self._memo.put((class_name, tuple(class_expressions), tuple(selectors)), shape)
        return match

    def erring_in(
        self,
        class_name: str,
        class_expressions: Sequence[str],
        selectors: Sequence[str],
        names: Iterable[str],
        budget: Budget | None = None,
    ) -> bool:
        """Whether a selector errs on a device of the named slices (their current versions),
        evaluating only those slices: what a verdict kept across a slice change must know."""
        key = (class_name, tuple(class_expressions), tuple(selectors))
        shape = self._memo.peek(key) or Shape({})
        base = (
            self._memo.peek((class_name, tuple(class_expressions), ())) or Shape({})
            if selectors
            else None
        )
        for name in names:
            indexed = self._slices.get(name)
            if indexed is None:
                continue
            if base is not None and self._part(base, indexed, (*key[:2], ()), budget).erring:
                return True
            if self._part(shape, indexed, key, budget, base=base).erring:
                return True
        return False

    def _current(
        self,
        class_name: str,
        class_expressions: Sequence[str],
        selectors: Sequence[str],
        snapshot: Snapshot,
        budget: Budget | None,
    ) -> Shape:
        """The shape's memo entry with a part for every slice of ``snapshot``."""
        key = (class_name, tuple(class_expressions), tuple(selectors))
        shape = self._memo.get(key)
        if shape is not None and shape.generation == snapshot.generation:
            return shape
        base = (
            self._current(class_name, class_expressions, (), snapshot, budget)
            if selectors
            else None
        )
        fresh = shape is None
        shape = shape if shape is not None else Shape({})
        parts = shape.parts
        seen: dict[Any, Any] = {}
        plan = self._plan(key[2] if selectors else key[1])
        below_parts = base.parts if base is not None else None
        paths, views = plan.paths, plan.views
        for indexed in snapshot.slices:
            name = indexed.name
            found = parts.get(name)
            if found is not None and found.slice is indexed:
                continue
            if below_parts is not None and views is not None:
                # the common case inline: every device of the slice passed the class, and a
                # slice with the same views was evaluated already in this call
                below = below_parts.get(name)
                known = indexed.signatures.get(paths)
                if (
                    below is not None
                    and below.slice is indexed
                    and below.devices is indexed.devices
                    and known is not None
                    and known[0] is views
                ):
                    outcome = seen.get(known[1])
                    if outcome is not None and not outcome[1]:
                        matched = outcome[0]
                        if not matched and below is indexed.common.get(True):
                            shared = indexed.common.get(matched is None)
                            if shared is not None:
                                parts[name] = shared
                                continue
                        parts[name] = common_part(
                            Part(
                                indexed,
                                indexed.devices
                                if matched is None
                                else tuple(indexed.entries[i].device for i in matched),
                                below.considered,
                                (),
                            )
                        )
                        continue
            self._part(shape, indexed, key, budget, base=base, seen=seen, plan=plan)
        if len(parts) > len(snapshot.slices):
            for name in [n for n in parts if self._slices.get(n) is not parts[n].slice]:
                del parts[name]
        if fresh:
            self._memo.put(key, shape)
        return shape

    def _part(
        self,
        shape: Shape,
        indexed: IndexedSlice,
        key: ShapeKey,
        budget: Budget | None,
        *,
        base: Shape | None = None,
        seen: dict[Any, Any] | None = None,
        plan: Plan | None = None,
    ) -> Part:
        """The shape's part for this slice version, evaluated now if it has none."""
        found = shape.parts.get(indexed.name)
        if found is not None and found.slice is indexed:
            return found
        plan = plan if plan is not None else self._plan(key[2] if base is not None else key[1])
        if base is not None:
            below = base.parts.get(indexed.name)
            if below is None or below.slice is not indexed:
                below = self._part(base, indexed, (*key[:2], ()), budget)
            candidates = below.devices
            considered = below.considered
            entries = (
                indexed.entries
                if candidates is indexed.devices
                else keep(indexed.entries, candidates)
            )
            part = self._evaluate(indexed, entries, candidates, plan, budget, source="", seen=seen)
            part.considered = considered
        else:
            entries = tuple(e for e in indexed.entries if e.device.problem is None)
            candidates = (
                indexed.devices
                if len(entries) == len(indexed.entries)
                else tuple(e.device for e in entries)
            )
            source = f"class {key[0]}: "
            part = self._evaluate(
                indexed, entries, candidates, plan, budget, source=source, seen=seen
            )
            part.considered = len(indexed.entries)
        part = common_part(part)
        shape.parts[indexed.name] = part
        return part

    def _combine(
        self,
        shape: Shape,
        snapshot: Snapshot,
        class_name: str,
        class_expressions: Sequence[str],
        selectors: Sequence[str],
    ) -> Match:
        """The shape's Match at ``snapshot``: its parts in slice order (after the class's
        errors, for a selector set)."""
        parts = list(map(shape.parts.__getitem__, snapshot.names))
        devices = tuple(chain.from_iterable(map(_DEVICES, parts)))
        erring: list[tuple[Device, str, str]] = []
        if selectors:
            base = self._memo.peek((class_name, tuple(class_expressions), ()))
            if base is not None:
                erring.extend(
                    chain.from_iterable(map(_ERRING, map(base.parts.__getitem__, snapshot.names)))
                )
        erring.extend(chain.from_iterable(map(_ERRING, parts)))
        first = f"{erring[0][0].id}: {erring[0][2]}" if erring else None
        considered = sum(map(_CONSIDERED, parts))
        return Match(
            devices,
            considered,
            len(erring),
            first,
            tuple((d, m) for d, m, _ in erring),
            DeviceRefs(dict(shape.parts)),
        )

    def programs(self, expressions: Sequence[str]) -> list[Program]:
        """Compile (through the cache) every expression; raises ``CelCompileError``."""
        return [self.cache.get(self.engine, e, SELECTOR) for e in expressions]

    def _plan(self, expressions: tuple[str, ...]) -> Plan:
        found = self._plans.get(expressions)
        if found is None:
            programs = tuple(self.programs(expressions))
            views = [self._view(e) for e in expressions]
            paths = tuple(sorted({p for v in views if v is not None for p in v}))
            table = None
            if None not in views:
                table = self._tables.get(paths)
                if table is None:
                    table = self._tables.put(paths, Views())
            found = Plan(programs, table, paths, sum(p.cost for p in programs))
            self._plans.put(expressions, found)
        return found

    def _view(self, expression: str) -> tuple[tuple[str, ...], ...] | None:
        found = self._views.get(expression, MISSING)
        if found is not MISSING:
            return found  # type: ignore[return-value]
        return self._views.put(expression, view_of(expression))

    def _evaluate(
        self,
        indexed: IndexedSlice,
        entries: Sequence[Indexed],
        candidates: tuple[Device, ...],
        plan: Plan,
        budget: Budget | None,
        *,
        source: str,
        seen: dict[Any, Any] | None,
    ) -> Part:
        """Evaluate ``plan`` on ``entries`` (whose devices are ``candidates``), once per
        distinct view of a device across the call (``seen``, keyed by view number), and once
        per distinct sequence of views (a slice like one already evaluated costs a lookup)."""
        if not plan.programs or not entries:
            return Part(indexed, candidates, 0, ())
        views = plan.views
        if views is not None:
            seen = seen if seen is not None else {}
            signature = (
                slice_signature(indexed, plan.paths, views)
                if entries is indexed.entries
                else tuple(e.view_id(plan.paths, views) for e in entries)
            )
            found = seen.get(signature)
            if found is None:
                found = seen[signature] = outcomes(entries, signature, plan, budget, seen)
        else:
            found = outcomes(entries, None, plan, budget, {})
        matched, erring_at = found
        devices = candidates if matched is None else tuple(entries[i].device for i in matched)
        erring = tuple(
            (entries[i].device, f"{source}selector #{o[0]}: {o[1]}", o[1]) for i, o in erring_at
        )
        return Part(indexed, devices, 0, erring)


_DEVICES: Final = attrgetter("devices")
_CONSIDERED: Final = attrgetter("considered")
_ERRING: Final = attrgetter("erring")


def _name(raw: Mapping[str, Any]) -> str:
    metadata = raw.get("metadata") or {}
    return str(metadata.get("name", "")) if isinstance(metadata, Mapping) else ""


def _version(raw: Mapping[str, Any]) -> Any:
    metadata = raw.get("metadata") or {}
    if not isinstance(metadata, Mapping):
        return None
    version = (metadata.get("resourceVersion"), metadata.get("generation"))
    return None if version == (None, None) else version
