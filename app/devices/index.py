"""Which devices in the cluster a DeviceClass + selectors can match, fast enough to ask per request.

:class:`DeviceIndex` is fed plain values: the raw ResourceSlices (a mapping name -> object, as
the cluster view's ``resource_slices()`` returns) and a generation number that changes whenever
any slice changes (``generation("ResourceSlice")``). It

- converts each slice's devices once per slice version (name + resourceVersion/generation)
  and numbers its columns (:mod:`app.devices.columns`), never on a request;
- memoizes "which devices of this class match these selectors" per slice-set generation, so a
  repeated claim shape costs one dictionary lookup;
- groups the slices by what a selector set can read of them (:mod:`app.devices.groups`: slices
  with the same values, device by device, on the paths the selectors read), and keeps one
  outcome per group: a new shape is evaluated once per group, on one of its slices, and once
  per *distinct view* of a device there (a selector reading only
  ``device.capacity["gpu.nvidia.com"].memory`` is evaluated once per distinct memory). 8,000
  slices of identical GPUs are one group: a new shape costs about as much as on one slice. The
  paths an expression can read come from :func:`app.cel.syntax.device_paths`; an expression
  that uses ``device`` any other way is evaluated per device, each slice on its own;
- keeps no CEL activation per device: a new view is evaluated on the device reduced to the
  paths read (:func:`app.devices.columns.reduced`), and string comparisons are answered from
  the columns (:mod:`app.devices.literals`).

It is fed either way: as a listener of the cluster view (:meth:`DeviceIndex.on_change`,
subscribed at startup, so a slice event converts only that slice's devices and the request path
never converts a slice), or in bulk with :meth:`DeviceIndex.sync` (tests, benchmarks, offline).
A slice change leaves every memoized shape: the changed slice joins a group (its outcome known
if the group is) and only a group never seen is evaluated.

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
from itertools import count
from types import MappingProxyType
from typing import Any, Final

from app.bounded import BoundedCache, CacheName
from app.cel.cache import CompileCache
from app.cel.cost import Budget
from app.cel.device import Device, devices_of_slice
from app.cel.engine import SELECTOR, Engine, Program
from app.cluster.view import Kind
from app.devices.columns import MISSING, Columns, Path, PathSet, columns_of, project, view_of
from app.devices.groups import Grouping, grouping_bytes
from app.devices.literals import Comparison, comparison
from app.devices.shapes import (
    DeviceRefs,
    Match,
    Outcome,
    Plan,
    Shape,
    ShapeKey,
    evaluate,
    shape_bytes,
)
from app.devices.store import Indexed, IndexedSlice, Snapshot
from app.k8s.claims import device_class_expressions

__all__ = [
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
COLUMNS_CHECKED_EVERY: Final = 1024
"""Slice changes between two checks of the column numbers' growth."""
COLUMNS_KEPT_MIN: Final = 1 << 16
"""Column numbers kept before any renumbering (at most 4x those the slices hold beyond it)."""
OUTCOMES_SLACK: Final = 16
"""Outcomes of groups with no slice left a shape keeps, beyond as many as it has groups."""
GROUPINGS_KEPT: Final = 64
"""Path sets whose slices are kept grouped (also bounded by bytes)."""
_ANY_PATH: Final[PathSet] = (("*",),)
"""The grouping key of expressions that may read any part of a device."""
_EAGER: Final[tuple[Path, ...]] = (("driver",), ("allowMultipleAllocations",))


class_selectors = device_class_expressions
"""The CEL expressions of a raw DeviceClass's well-formed ``spec.selectors`` (the claim model's
reader, :func:`app.k8s.claims.device_class_expressions`)."""


class DeviceIndex:
    """Device columns per slice version, slices grouped alike, and a memo of outcomes per group."""

    def __init__(
        self,
        engine: Engine,
        cache: CompileCache | None = None,
        max_bytes: int | None = None,
    ) -> None:
        self.engine = engine
        self.cache = cache if cache is not None else CompileCache()
        self._lock = threading.RLock()
        """Held to change the slices (watch events) and to bring groupings and shapes up to
        date (requests): one at a time, never long."""
        self._generation = -1
        self._synced_at = -1
        """The generation a caller last passed to :meth:`sync`."""
        self._fresh: Snapshot | None = Snapshot(generation=-1, slices=())
        """The slices in order at ``_generation``, made when first read after a change (a
        sync that lists 8,000 slices makes it once, not once per slice)."""
        self._slices: dict[str, IndexedSlice] = {}
        self._columns = Columns()
        self._paths: dict[Path, Path] = {}
        self._missing: dict[int, int] = {}
        self._serials = count()
        self._views: BoundedCache[str, PathSet | None] = BoundedCache(
            CacheName.CEL_DEVICE_PATHS, VIEWS_KEPT
        )
        self._plans: BoundedCache[tuple[str, ...], Plan] = BoundedCache(
            CacheName.CEL_DEVICE_PATHS, VIEWS_KEPT
        )
        self._groupings: BoundedCache[PathSet, Grouping] = BoundedCache(
            CacheName.CEL_DEVICE_GROUPS, GROUPINGS_KEPT, max_bytes=max_bytes, size=grouping_bytes
        )
        self._changes = 0
        self._log: deque[tuple[int, str]] = deque(maxlen=CHANGES_KEPT)
        self._log_floor = -1
        """The generation from which the log holds every change (older ones: unknown)."""
        self._memo: BoundedCache[ShapeKey, Shape] = BoundedCache(
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
        return self._generation

    @property
    def devices(self) -> tuple[Device, ...]:
        return tuple(i.device for i in self._snapshot().devices())

    def _snapshot(self) -> Snapshot:
        found = self._fresh
        if found is None:
            with self._lock:
                found = self._fresh
                if found is None:
                    found = Snapshot(self._generation, tuple(self._slices.values()))
                    self._fresh = found
        return found

    def slices(self) -> tuple[IndexedSlice, ...]:
        """The slices of this generation (view order), each with its converted devices."""
        return self._snapshot().slices

    def by_name(self) -> Mapping[str, IndexedSlice]:
        """The current slices by name (read-only)."""
        return MappingProxyType(self._slices)

    def changed_since(self, generation: int) -> set[str] | None:
        """The names of the slices changed after ``generation`` (added, modified or deleted),
        or None when that is no longer known (too many changes since, or a bulk sync)."""
        if generation < self._log_floor:
            return None
        changed = set()
        for at, name in reversed(self._log):
            if at <= generation:
                break
            changed.add(name)
        return changed

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
            self._generation = self._changes
            self._fresh = None
            if self._changes % COLUMNS_CHECKED_EVERY == 0:
                self._renumber_if_grown()

    def _renumber_if_grown(self) -> None:
        """Number the columns anew when most numbers are no longer held by a slice (slices
        replaced by others with new values: new uuids). Groupings are made anew from the new
        numbers; each memoized shape evaluates its groups again when next asked."""
        held = sum(len(s.columns) + 1 for s in self._slices.values())
        if len(self._columns) <= max(COLUMNS_KEPT_MIN, 4 * held):
            return
        old, fresh = self._columns.values, Columns()
        for indexed in self._slices.values():
            columns = indexed.columns
            for path, number in columns.items():
                columns[path] = fresh.number(old[number])
            indexed.problems = fresh.number(old[indexed.problems])
        self._columns = fresh
        self._missing.clear()
        self._groupings.clear()
        self._paths = {p: p for s in self._slices.values() for p in s.columns}

    def sync(
        self,
        resource_slices: Mapping[str, Mapping[str, Any]] | Iterable[Mapping[str, Any]],
        generation: int,
    ) -> None:
        """Take the cluster's slices at ``generation`` (a no-op when it is the generation the
        index is at, or was last synced to): the bulk form of :meth:`on_change`, for callers
        without a view. The index's own generation only moves forward."""
        if generation in (self._generation, self._synced_at):
            return
        with self._lock:
            if generation in (self._generation, self._synced_at):
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
            self._changes = max(self._changes + 1, generation)
            self._log.clear()
            self._log_floor = self._changes
            self._generation = self._changes
            self._synced_at = generation
            self._fresh = Snapshot(self._changes, tuple(slices.values()))

    def _indexed(
        self, name: str, raw: Mapping[str, Any], known: IndexedSlice | None
    ) -> IndexedSlice:
        version = _version(raw)
        if known is not None and version is not None and known.version == version:
            return known
        devices = tuple(devices_of_slice(raw))
        number, path_of = self._columns.number, self._path
        columns = {path_of(p): number(c) for p, c in columns_of(devices).items()}
        for path in _EAGER:
            columns[path] = number(tuple([project(d, path) for d in devices]))
        return IndexedSlice(
            name,
            version,
            raw,
            tuple(map(Indexed, devices)),
            devices,
            frozenset(d.name for d in devices),
            columns,
            number(tuple([d.problem is not None for d in devices])),
            next(self._serials),
        )

    def _path(self, path: Path) -> Path:
        """One tuple per path for every slice's columns."""
        return self._paths.setdefault(path, path)

    def _column(self, indexed: IndexedSlice, path: Path) -> int:
        """The number of the slice's column on ``path`` (a coarse path numbered when first
        read; a path no device of the slice has is the column of MISSING, never stored)."""
        found = indexed.columns.get(path)
        if found is not None:
            return found
        size = len(indexed.devices)
        if len(path) == 3:
            missing = self._missing.get(size)
            if missing is None:
                missing = self._missing[size] = self._columns.number((MISSING,) * size)
            return missing
        column = tuple([project(d, path) for d in indexed.devices])
        found = self._columns.number(column)
        if any(value is not MISSING for value in column):
            indexed.columns[self._path(path)] = found
        return found

    def matching(
        self,
        class_name: str,
        class_expressions: Sequence[str],
        selectors: Sequence[str] = (),
        budget: Budget | None = None,
    ) -> Match:
        """Devices matching every class selector and every request selector (memoized).

        The memo keeps each class + selector set's outcome per group of slices alike: after
        a slice change only a group never seen is evaluated. Evaluations (not memo hits) are
        charged to ``budget``, which raises :class:`~app.cel.cost.BudgetExceededError` once
        spent.
        """
        key = (class_name, tuple(class_expressions), tuple(selectors))
        with self._lock:
            snapshot = self._snapshot()
            shape = self._shape(key, snapshot, budget)
            match = shape.match
            if match is None or shape.generation != snapshot.generation:
                match = self._combine(shape, key, snapshot)
                shape.match, shape.generation = match, snapshot.generation
                if _keeps(budget, key):
                    self._memo.put(key, shape)
        return match

    def erring_in(
        self,
        class_name: str,
        class_expressions: Sequence[str],
        selectors: Sequence[str],
        names: Iterable[str],
        budget: Budget | None = None,
    ) -> bool:
        """Whether a selector errs on a device of the named slices (their current versions):
        what a verdict kept across a slice change must know. Only the groups those slices
        joined are evaluated, if never seen."""
        key = (class_name, tuple(class_expressions), tuple(selectors))
        with self._lock:
            snapshot = self._snapshot()
            shape = self._shape(key, snapshot, budget, touch=False)
            base = self._shape((*key[:2], ()), snapshot, budget, touch=False) if selectors else None
            for name in names:
                indexed = self._slices.get(name)
                if indexed is None:
                    continue
                for found in (base, shape):
                    if found is None:
                        continue
                    group = found.grouping.group(indexed)
                    outcome = None if group is None else found.outcomes.get(group)
                    if outcome is not None and outcome.erring:
                        return True
        return False

    def _shape(
        self, key: ShapeKey, snapshot: Snapshot, budget: Budget | None, *, touch: bool = True
    ) -> Shape:
        """The shape's memo entry with an outcome for every group at ``snapshot`` (with
        ``touch``, counted as a hit or miss and kept; else only read)."""
        shape = self._memo.get(key) if touch else self._memo.peek(key)
        if shape is not None and shape.generation == snapshot.generation:
            return shape
        base = self._shape((*key[:2], ()), snapshot, budget, touch=touch) if key[2] else None
        keep = _keeps(budget, key)
        plan = self._plan(key[2] if base is not None else key[1], budget, keep)
        paths = plan.paths
        if base is not None and paths is not None and base.grouping.paths is not None:
            paths = tuple(sorted({*paths, *base.grouping.paths}))
        elif base is not None:
            paths = None
        grouping = self._grouping(paths, snapshot)
        fresh = shape is None or shape.grouping is not grouping
        if shape is None or shape.grouping is not grouping:
            shape = Shape(grouping)
        shape.base = base
        members = grouping.members
        if len(shape.outcomes) > 2 * len(members) + OUTCOMES_SLACK:
            # groups with no slice left (slices changed away): a new dict, as older matches
            # still read the one they were made with
            shape.outcomes = {g: o for g, o in shape.outcomes.items() if g in members}
        outcomes = shape.outcomes
        seen: dict[Any, Any] = {}
        alike: dict[Outcome, Outcome] = {}  # equal outcomes share one object (uuid: 8,000 groups)
        for group in members:
            if group not in outcomes:
                outcome = self._outcome(
                    key,
                    grouping.representative(group, grouping.version),
                    plan,
                    base=base,
                    budget=budget,
                    seen=seen,
                    keep=keep,
                )
                outcomes[group] = alike.setdefault(outcome, outcome)
        if fresh and touch and keep:
            self._memo.put(key, shape)
        return shape

    def _outcome(
        self,
        key: ShapeKey,
        indexed: IndexedSlice,
        plan: Plan,
        *,
        base: Shape | None,
        budget: Budget | None,
        seen: dict[Any, Any],
        keep: bool = True,
    ) -> Outcome:
        """The shape's outcome on one slice (for every slice of its group)."""
        if base is None:
            positions: Sequence[int] = [
                i for i, d in enumerate(indexed.devices) if d.problem is None
            ]
            considered = len(indexed.devices)
            source = f"class {key[0]}: "
        else:
            group = base.grouping.group(indexed)
            below = base.outcomes[group] if group is not None else None
            if below is None:
                raise LookupError(f"slice {indexed.name} has no class outcome")
            positions, considered, source = below.matched, below.considered, ""
        expressions = key[1] if base is None else key[2]
        if expressions and positions:
            columns = (
                None
                if plan.paths is None
                else [self._columns.values[self._column(indexed, p)] for p in plan.paths]
            )
            programs = self.programs(expressions, budget if not keep else None)
            matched, erring = evaluate(
                indexed,
                positions,
                plan,
                programs,
                columns,
                engine=self.engine,
                budget=budget,
                seen=seen,
            )
        else:
            matched, erring = list(positions), []
        every = len(matched) == len(indexed.devices)
        return Outcome(
            tuple(matched),
            every,
            considered,
            tuple((i, f"{source}selector #{o[0]}: {o[1]}", o[1]) for i, o in erring),
            frozenset() if every else frozenset(matched),
        )

    def _grouping(self, paths: PathSet | None, snapshot: Snapshot) -> Grouping:
        """The grouping on ``paths`` brought up to ``snapshot`` (only the slices changed since
        it was last brought up are regrouped)."""
        key = _ANY_PATH if paths is None else paths
        grouping = self._groupings.get(key)
        if grouping is None:
            grouping = Grouping(paths, self._column)
        elif grouping.generation == snapshot.generation:
            return grouping
        known = grouping.generation
        changed = self.changed_since(known) if known >= 0 else None
        grouping.update(self._slices, snapshot.generation, changed)
        if changed is None or changed:
            self._groupings.put(key, grouping)  # (its size changed)
        return grouping

    def _combine(self, shape: Shape, key: ShapeKey, snapshot: Snapshot) -> Match:
        """The shape's Match at ``snapshot``: counts from its groups; the errors, if any, in
        slice order (the class's before the request's)."""
        grouping, outcomes = shape.grouping, shape.outcomes
        matched = considered = 0
        erring = False
        for group, members in grouping.members.items():
            outcome = outcomes[group]
            matched += len(members) * len(outcome.matched)
            considered += len(members) * outcome.considered
            erring = erring or bool(outcome.erring)
        base = shape.base
        if base is not None and any(base.outcomes[g].erring for g in base.grouping.members):
            erring = True
        errors: list[tuple[Device, str, str]] = []
        if erring:
            for found in (base, shape):
                if found is not None:
                    errors.extend(_errors(found, snapshot))
        first = f"{errors[0][0].id}: {errors[0][2]}" if errors else None
        return Match(
            matched,
            considered,
            tuple((d, m) for d, m, _ in errors),
            first_error=first,
            refs=DeviceRefs(grouping, outcomes),
            devices=lambda: _devices(grouping, outcomes, snapshot),
        )

    def programs(self, expressions: Sequence[str], budget: Budget | None = None) -> list[Program]:
        """Compile (through the cache) every expression; raises ``CelCompileError``."""
        cache, engine = self.cache, self.engine
        return [cache.get(engine, e, SELECTOR, budget) for e in expressions]

    def _plan(
        self, expressions: tuple[str, ...], budget: Budget | None = None, keep: bool = True
    ) -> Plan:
        """What evaluating ``expressions`` reads and costs. A plan holds no programs (the
        compile cache does, within its share of the budget: a plan must not keep alive what
        the cache has let go)."""
        found = self._plans.get(expressions)
        if found is None:
            cost = sum(p.cost for p in self.programs(expressions, budget if not keep else None))
            views = [self._view(e, keep) for e in expressions]
            paths = (
                None
                if None in views
                else tuple(sorted({p for v in views if v is not None for p in v}))
            )
            found = Plan(paths, cost, _comparisons(expressions, paths))
            if keep:
                self._plans.put(expressions, found)
        return found

    def _view(self, expression: str, keep: bool = True) -> PathSet | None:
        found = self._views.get(expression, MISSING)
        if found is not MISSING:
            return found  # type: ignore[return-value]
        view = view_of(expression)
        return self._views.put(expression, view) if keep else view


def _keeps(budget: Budget | None, key: ShapeKey) -> bool:
    """Whether a shape's work may be memoized: a class's own shape always (DeviceClasses are
    the cluster's, bounded by it), a request's unless its review is over the memo bound."""
    return budget is None or budget.memoize or not key[2]


def _comparisons(
    expressions: tuple[str, ...], paths: PathSet | None
) -> tuple[tuple[int, Comparison], ...] | None:
    """Each expression as a string comparison with its path's index in ``paths`` (None unless
    every one is such a comparison)."""
    if not expressions or paths is None:
        return None
    found = []
    for expression in expressions:
        simple = comparison(expression)
        if simple is None or simple.path not in paths:
            return None
        found.append((paths.index(simple.path), simple))
    return tuple(found)


def _errors(shape: Shape, snapshot: Snapshot) -> list[tuple[Device, str, str]]:
    out: list[tuple[Device, str, str]] = []
    group_of, outcomes = shape.grouping.group, shape.outcomes
    for indexed in snapshot.slices:
        group = group_of(indexed)
        outcome = None if group is None else outcomes.get(group)
        if outcome is not None and outcome.erring:
            devices = indexed.devices
            out.extend((devices[i], message, alone) for i, message, alone in outcome.erring)
    return out


def _devices(
    grouping: Grouping, outcomes: dict[int, Outcome], snapshot: Snapshot
) -> tuple[Device, ...]:
    """The matched devices in slice order (read from the grouping and outcomes, not the shape:
    a match must not hold its shape, which holds the match)."""
    out: list[Device] = []
    group_of = grouping.group
    for indexed in snapshot.slices:
        group = group_of(indexed)
        outcome = None if group is None else outcomes.get(group)
        if outcome is None or not outcome.matched:
            continue
        if outcome.every:
            out.extend(indexed.devices)
        else:
            devices = indexed.devices
            out.extend([devices[i] for i in outcome.matched])
    return tuple(out)


def _name(raw: Mapping[str, Any]) -> str:
    metadata = raw.get("metadata") or {}
    return str(metadata.get("name", "")) if isinstance(metadata, Mapping) else ""


def _version(raw: Mapping[str, Any]) -> Any:
    metadata = raw.get("metadata") or {}
    if not isinstance(metadata, Mapping):
        return None
    version = (metadata.get("resourceVersion"), metadata.get("generation"))
    return None if version == (None, None) else version
