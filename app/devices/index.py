"""Which devices in the cluster a DeviceClass + selectors can match, fast enough to ask per request.

:class:`DeviceIndex` is fed plain values: the raw ResourceSlices (a mapping name -> object, as
the cluster view's ``resource_slices()`` returns) and a generation number that changes whenever
any slice changes (``generation("ResourceSlice")``). It

- converts each slice's devices once per slice version (name + resourceVersion/generation)
  and numbers its columns, never on a request (what it inherits from
  :class:`~app.devices.store.SliceStore`);
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

It is fed as a store is (:mod:`app.devices.store`: a listener of the cluster view, or in bulk).
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

from collections.abc import Iterable, Sequence
from typing import Any, Final

from app.bounded import BoundedCache, CacheName
from app.cel.cache import CompileCache
from app.cel.cost import Budget
from app.cel.device import Device
from app.cel.engine import SELECTOR, Engine, Program
from app.devices.columns import MISSING, PathSet, view_of
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
from app.devices.store import IndexedSlice, SliceStore, Snapshot
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
OUTCOMES_SLACK: Final = 16
"""Outcomes of groups with no slice left a shape keeps, beyond as many as it has groups."""
GROUPINGS_KEPT: Final = 64
"""Path sets whose slices are kept grouped (also bounded by bytes)."""
_ANY_PATH: Final[PathSet] = (("*",),)
"""The grouping key of expressions that may read any part of a device."""


class_selectors = device_class_expressions
"""The CEL expressions of a raw DeviceClass's well-formed ``spec.selectors`` (the claim model's
reader, :func:`app.k8s.claims.device_class_expressions`)."""


class DeviceIndex(SliceStore):
    """Device columns per slice version (the store it is), slices grouped alike, and a memo of
    outcomes per group."""

    def __init__(
        self,
        engine: Engine,
        cache: CompileCache | None = None,
        max_bytes: int | None = None,
    ) -> None:
        super().__init__()
        self.engine = engine
        self.cache = cache if cache is not None else CompileCache()
        self._views: BoundedCache[str, PathSet | None] = BoundedCache(
            CacheName.CEL_DEVICE_PATHS, VIEWS_KEPT
        )
        self._plans: BoundedCache[tuple[str, ...], Plan] = BoundedCache(
            CacheName.CEL_DEVICE_PATHS, VIEWS_KEPT
        )
        self._groupings: BoundedCache[PathSet, Grouping] = BoundedCache(
            CacheName.CEL_DEVICE_GROUPS,
            GROUPINGS_KEPT,
            max_bytes=max_bytes,
            size=grouping_bytes,
            on_evict=self._forget_grouping,
        )
        self._memo: BoundedCache[ShapeKey, Shape] = BoundedCache(
            CacheName.CEL_DEVICE_MATCH, _MEMO_LIMIT, max_bytes=max_bytes, size=shape_bytes
        )

    @property
    def memo_hits(self) -> int:
        return self._memo.hits

    @property
    def memo_misses(self) -> int:
        return self._memo.misses

    def _forget_grouping(self, _: PathSet, grouping: Grouping) -> None:
        """A grouping evicted from its cache goes from the memo too: a shape holds its grouping
        (and its class shape's), which its own byte count does not include, so shapes would
        otherwise keep alive groupings the cache let go (hostile distinct path sets: one per
        shape, ~220 bytes per slice each)."""
        stale = [
            key
            for key, shape in self._memo.items()
            if shape.grouping is grouping
            or (shape.base is not None and shape.base.grouping is grouping)
        ]
        for key in stale:
            self._memo.pop(key)

    def _renumbered(self) -> None:
        """Groupings are made anew from the new column numbers; each memoized shape evaluates
        its groups again when next asked."""
        self._groupings.clear()

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

    def group_for(
        self, class_name: str, class_expressions: Sequence[str], selectors: Sequence[str] = ()
    ) -> None:
        """Build, without evaluating a selector, what a first claim of this class reading the
        paths of ``selectors`` would: the class's outcomes and the grouping of the slices on
        the class's paths and those (`app.devices.warm`). The selectors are only parsed (they
        may be patterns' placeholders: their text is not kept). Raises ``CelCompileError``
        for a class selector that does not compile."""
        key = (class_name, tuple(class_expressions), ())
        with self._lock:
            snapshot = self._snapshot()
            base = self._shape(key, snapshot, None)
            if not selectors or base.grouping.paths is None:
                return
            views = [self._view(e, keep=False) for e in selectors]
            if None in views:
                return  # a selector that may read anything: each slice on its own
            paths = {p for v in views if v is not None for p in v}
            self._grouping(tuple(sorted({*paths, *base.grouping.paths})), snapshot, base.grouping)

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
        grouping = self._grouping(paths, snapshot, base.grouping if base is not None else None)
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

    def _grouping(
        self, paths: PathSet | None, snapshot: Snapshot, base: Grouping | None = None
    ) -> Grouping:
        """The grouping on ``paths`` brought up to ``snapshot`` (only the slices changed since
        it was last brought up are regrouped). A new one is refined from ``base`` (the class's
        grouping, on fewer paths, at ``snapshot``) where it can be (`Grouping.derive`)."""
        key = _ANY_PATH if paths is None else paths
        grouping = self._groupings.get(key)
        if grouping is None:
            grouping = Grouping(paths, self._column)
            if base is not None and grouping.derive(base, self._slices, snapshot.generation):
                self._groupings.put(key, grouping)
                return grouping
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
