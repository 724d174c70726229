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
  evaluated per device).

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
from dataclasses import dataclass, field
from itertools import chain
from operator import attrgetter
from types import MappingProxyType
from typing import Any, Final

from app.bounded import DEFAULT_MAX_BYTES, BoundedCache, CacheName
from app.cel.cache import CompileCache
from app.cel.cost import Budget
from app.cel.device import Device, devices_of_slice
from app.cel.engine import SELECTOR, Engine, Program
from app.cel.errors import CelEvalError
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
TABLES_KEPT: Final = 256
"""Path sets whose distinct projections are numbered (:class:`~app.cel.projection.Views`)."""
"""Slice changes remembered (which slices changed since a generation): older are unknown."""


class DeviceRefs:
    """The devices of a match as (slice name, device name) pairs, held slice by slice: ``ref
    in refs`` costs two lookups, and no pair is built for the devices no one asks about."""

    __slots__ = ("_parts",)

    def __init__(self, parts: Mapping[str, _Part]) -> None:
        self._parts = parts

    def __contains__(self, ref: object) -> bool:
        if not isinstance(ref, tuple) or len(ref) != 2:
            return False
        part = self._parts.get(ref[0])
        return part is not None and bool(part.devices) and ref[1] in _names(part)


class_selectors = device_class_expressions
"""The CEL expressions of a raw DeviceClass's well-formed ``spec.selectors`` (the claim model's
reader, :func:`app.k8s.claims.device_class_expressions`)."""


@dataclass(frozen=True, slots=True)
class Match:
    """The devices a class + selectors match, and what went wrong on the others."""

    devices: tuple[Device, ...]
    considered: int
    errors: int = 0
    first_error: str | None = None
    erring: tuple[tuple[Device, str], ...] = ()
    """Each device a selector erred on, with ``class <name>: selector #i: <message>`` (a
    DeviceClass selector) or ``selector #i: <message>`` (the request's)."""
    refs: DeviceRefs = field(default_factory=lambda: DeviceRefs({}))
    """``devices`` as (slice name, device name) pairs (what the allocator looks up)."""

    @property
    def count(self) -> int:
        return len(self.devices)


@dataclass(frozen=True, slots=True)
class IndexedSlice:
    """One ResourceSlice as the view holds it (read-only) and its devices, converted once."""

    name: str
    version: Any
    raw: Mapping[str, Any]
    entries: tuple[Indexed, ...]
    devices: tuple[Device, ...]
    """The entries' devices (one tuple, shared by every match that takes the whole slice)."""
    names: frozenset[str] = frozenset()
    """The devices' names (shared likewise)."""
    signatures: dict[tuple[tuple[str, ...], ...], tuple[Views, tuple[int, ...]]] = field(
        default_factory=dict, compare=False, repr=False
    )
    """Per path set: the view number of each entry (slices alike share every outcome)."""
    common: dict[bool, _Part] = field(default_factory=dict, compare=False, repr=False)
    """The part every shape shares when all its devices match (True) or none (False), with
    no error: a memoized shape then holds one dict entry per slice, no object of its own."""


@dataclass(slots=True)
class _Snapshot:
    generation: int
    slices: tuple[IndexedSlice, ...]
    names: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        self.names = tuple(s.name for s in self.slices)

    def devices(self) -> Iterable[Indexed]:
        for indexed in self.slices:
            yield from indexed.entries


@dataclass(slots=True)
class _Part:
    """What one class + selector set matches in one slice version."""

    slice: IndexedSlice
    devices: tuple[Device, ...]
    considered: int
    erring: tuple[tuple[Device, str, str], ...]
    """(device, message with its selector, message alone) for each device a selector erred on."""
    names: frozenset[str] | None = None
    """The matched devices' names (made when first combined)."""


@dataclass(frozen=True, slots=True, eq=False)
class _Plan:
    """An expression set compiled, with the device paths it reads (grouped: all known)."""

    programs: tuple[Program, ...]
    views: Views | None
    """The numbering of the projections onto ``paths`` (None: a device may read anything)."""
    paths: tuple[tuple[str, ...], ...]
    cost: int


_Key = tuple[str, tuple[str, ...], tuple[str, ...]]
"""(DeviceClass name, its selectors, the request's selectors): what a memo entry answers."""


@dataclass(slots=True)
class _Shape:
    """A class + selector set's matches, slice by slice, and combined at ``generation``."""

    parts: dict[str, _Part]
    generation: int = -1
    match: Match | None = None


def _shape_bytes(shape: _Shape) -> int:
    """About what a memoized shape holds on its own: a part per slice (its tuples share the
    slice's devices when every device matches) and the combined tuple of device references
    (the devices themselves belong to the snapshot)."""
    match = shape.match
    combined = 0 if match is None else 8 * len(match.devices) + 64 * len(match.erring)
    return 200 + 160 * len(shape.parts) + combined


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
        self._snapshot = _Snapshot(generation=-1, slices=())
        self._slices: dict[str, IndexedSlice] = {}
        self._views: BoundedCache[str, tuple[tuple[str, ...], ...] | None] = BoundedCache(
            CacheName.CEL_DEVICE_PATHS, VIEWS_KEPT
        )
        self._plans: BoundedCache[tuple[str, ...], _Plan] = BoundedCache(
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
        self._memo: BoundedCache[tuple[Any, ...], _Shape] = BoundedCache(
            CacheName.CEL_DEVICE_MATCH, _MEMO_LIMIT, max_bytes=max_bytes, size=_shape_bytes
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
            self._snapshot = _Snapshot(self._changes, tuple(self._slices.values()))

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
            self._snapshot = _Snapshot(generation, tuple(slices.values()))

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
        shape = self._memo.peek(key) or _Shape({})
        base = (
            self._memo.peek((class_name, tuple(class_expressions), ())) or _Shape({})
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
        snapshot: _Snapshot,
        budget: Budget | None,
    ) -> _Shape:
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
        shape = shape if shape is not None else _Shape({})
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
                        parts[name] = _common(
                            _Part(
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
        shape: _Shape,
        indexed: IndexedSlice,
        key: _Key,
        budget: Budget | None,
        *,
        base: _Shape | None = None,
        seen: dict[Any, Any] | None = None,
        plan: _Plan | None = None,
    ) -> _Part:
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
                else _keep(indexed.entries, candidates)
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
        part = _common(part)
        shape.parts[indexed.name] = part
        return part

    def _combine(
        self,
        shape: _Shape,
        snapshot: _Snapshot,
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

    def _plan(self, expressions: tuple[str, ...]) -> _Plan:
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
            found = _Plan(programs, table, paths, sum(p.cost for p in programs))
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
        plan: _Plan,
        budget: Budget | None,
        *,
        source: str,
        seen: dict[Any, Any] | None,
    ) -> _Part:
        """Evaluate ``plan`` on ``entries`` (whose devices are ``candidates``), once per
        distinct view of a device across the call (``seen``, keyed by view number), and once
        per distinct sequence of views (a slice like one already evaluated costs a lookup)."""
        if not plan.programs or not entries:
            return _Part(indexed, candidates, 0, ())
        views = plan.views
        if views is not None:
            seen = seen if seen is not None else {}
            signature = (
                _signature(indexed, plan.paths, views)
                if entries is indexed.entries
                else tuple(e.view_id(plan.paths, views) for e in entries)
            )
            found = seen.get(signature)
            if found is None:
                found = seen[signature] = _outcomes(entries, signature, plan, budget, seen)
        else:
            found = _outcomes(entries, None, plan, budget, {})
        matched, erring_at = found
        devices = candidates if matched is None else tuple(entries[i].device for i in matched)
        erring = tuple(
            (entries[i].device, f"{source}selector #{o[0]}: {o[1]}", o[1]) for i, o in erring_at
        )
        return _Part(indexed, devices, 0, erring)


def _outcomes(
    entries: Sequence[Indexed],
    signature: tuple[int, ...] | None,
    plan: _Plan,
    budget: Budget | None,
    seen: dict[Any, Any],
) -> tuple[tuple[int, ...] | None, tuple[tuple[int, tuple[int, str]], ...]]:
    """The positions of the entries every program accepts (None: all of them) and of those a
    program errs on, with the error; ``signature`` (the entries' view numbers) shares each
    view's outcome through ``seen``."""
    cost = plan.cost if budget is not None else 0
    matched = []
    erring = []
    for position, item in enumerate(entries):
        view = signature[position] if signature is not None else None
        outcome = seen.get(view) if view is not None else None
        if outcome is None:
            if budget is not None:
                budget.charge(cost)
            outcome = _run(plan.programs, item.activation)
            if view is not None:
                seen[view] = outcome
        if outcome is True:
            matched.append(position)
        elif outcome is not False:
            erring.append((position, outcome))
    return (None if len(matched) == len(entries) else tuple(matched)), tuple(erring)


def _signature(
    indexed: IndexedSlice, paths: tuple[tuple[str, ...], ...], views: Views
) -> tuple[int, ...]:
    found = indexed.signatures.get(paths)
    if found is not None and found[0] is views:
        return found[1]
    signature = tuple(e.view_id(paths, views) for e in indexed.entries)
    if len(indexed.signatures) >= KEYS_KEPT_PER_DEVICE:
        indexed.signatures.clear()
    indexed.signatures[paths] = (views, signature)
    return signature


_DEVICES: Final = attrgetter("devices")
_CONSIDERED: Final = attrgetter("considered")
_ERRING: Final = attrgetter("erring")


def _common(part: _Part) -> _Part:
    """The slice's shared part instead of ``part`` when they are alike (all or no devices,
    every one considered, no error)."""
    indexed = part.slice
    if part.erring or part.considered != len(indexed.entries):
        return part
    if part.devices is indexed.devices:
        every = True
    elif not part.devices:
        every = False
    else:
        return part
    return indexed.common.setdefault(every, part)


def _names(part: _Part) -> frozenset[str]:
    names = part.names
    if names is None:
        names = part.names = (
            part.slice.names
            if part.devices is part.slice.devices
            else frozenset(d.name for d in part.devices)
        )
    return names


def _keep(entries: tuple[Indexed, ...], devices: tuple[Device, ...]) -> tuple[Indexed, ...]:
    kept = {id(d) for d in devices}
    return tuple(e for e in entries if id(e.device) in kept)


def _run(programs: Sequence[Program], activation: Any) -> bool | tuple[int, str]:
    """True if every program is true; False if one is false (the later ones are not run, as
    in the scheduler); else (index, message) of the first that errs."""
    for index, program in enumerate(programs):
        try:
            result = program.evaluate(activation)
        except CelEvalError as error:
            return index, error.message or "evaluation error"
        if result is not True:
            return False
    return True


def _name(raw: Mapping[str, Any]) -> str:
    metadata = raw.get("metadata") or {}
    return str(metadata.get("name", "")) if isinstance(metadata, Mapping) else ""


def _version(raw: Mapping[str, Any]) -> Any:
    metadata = raw.get("metadata") or {}
    if not isinstance(metadata, Mapping):
        return None
    version = (metadata.get("resourceVersion"), metadata.get("generation"))
    return None if version == (None, None) else version
