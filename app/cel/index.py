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
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from app.bounded import DEFAULT_MAX_BYTES, BoundedCache, CacheName
from app.cel import syntax
from app.cel.cache import CompileCache
from app.cel.cost import Budget
from app.cel.device import Device, devices_of_slice
from app.cel.engine import SELECTOR, Engine, Program
from app.cel.errors import CelEvalError
from app.cluster.view import Kind
from app.k8s.claims import device_class_expressions

__all__ = ["DeviceIndex", "IndexedSlice", "Match", "class_selectors"]

_MISSING: Final = object()
_MEMO_LIMIT: Final = 8192
"""Class + selector sets remembered per slice generation; also bounded by bytes (`max_bytes`)."""
VIEWS_KEPT: Final = 4096
"""Expressions whose device paths are remembered (selectors come from users: bounded)."""
KEYS_KEPT_PER_DEVICE: Final = 64
"""Path sets a device keeps its projection for (one per distinct selector shape)."""


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

    @property
    def count(self) -> int:
        return len(self.devices)


class _Indexed:
    """A device, its activation, and its projections onto the path sets seen so far."""

    __slots__ = ("activation", "device", "keys")

    def __init__(self, device: Device, activation: Any) -> None:
        self.device = device
        self.activation = activation
        self.keys: dict[tuple[tuple[str, ...], ...], tuple[Any, ...]] = {}

    def key(self, paths: tuple[tuple[str, ...], ...]) -> tuple[Any, ...]:
        found = self.keys.get(paths)
        if found is None:
            found = tuple(_project(self.device, p) for p in paths)
            if len(self.keys) >= KEYS_KEPT_PER_DEVICE:
                self.keys.clear()
            self.keys[paths] = found
        return found


@dataclass(frozen=True, slots=True)
class IndexedSlice:
    """One ResourceSlice as the view holds it (read-only) and its devices, converted once."""

    name: str
    version: Any
    raw: Mapping[str, Any]
    entries: tuple[_Indexed, ...]

    @property
    def devices(self) -> tuple[Device, ...]:
        return tuple(e.device for e in self.entries)


@dataclass(slots=True)
class _Snapshot:
    generation: int
    slices: tuple[IndexedSlice, ...]

    def devices(self) -> Iterable[_Indexed]:
        for indexed in self.slices:
            yield from indexed.entries


def _match_bytes(match: Match) -> int:
    """About what a memoized Match holds on its own: the tuples of device references (the
    devices themselves belong to the snapshot), the object and its key."""
    return 200 + 8 * len(match.devices) + 64 * len(match.erring) + len(match.first_error or "")


def _typed(value: Any) -> Any:
    if isinstance(value, Mapping):
        return frozenset((k, _typed(v)) for k, v in value.items())
    return (type(value), value)


def _project(device: Device, keys: tuple[str, ...]) -> Any:
    head = keys[0]
    if head == "driver":
        return device.driver
    if head == "allowMultipleAllocations":
        return device.allow_multiple_allocations
    top: Mapping[str, Mapping[str, Any]] = (
        device.attributes if head == "attributes" else device.capacity
    )
    if len(keys) == 1:
        return _typed(top)
    domain = top.get(keys[1])
    if domain is None:
        return _MISSING
    if len(keys) == 2:
        return _typed(domain)
    value = domain.get(keys[2], _MISSING)
    return value if value is _MISSING else _typed(value)


def _view_of(expression: str) -> tuple[tuple[str, ...], ...] | None:
    """The device paths an expression can read, or None if it may read anything."""
    views = set()
    for path in syntax.device_paths(expression):
        keys: list[str] = []
        for key in path.keys:
            if key is None:
                break
            keys.append(key)
        if not keys or keys[0] not in syntax.DEVICE_FIELDS:
            return None
        views.add(tuple(keys[:3]))
    return tuple(sorted(views))


class DeviceIndex:
    """Device activations per slice version and a per-generation memo of selector matches."""

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
        self._changes = 0
        # Keyed by generation too: a lookup racing a change cannot answer from the old slices.
        self._memo: BoundedCache[tuple[Any, ...], Match] = BoundedCache(
            CacheName.CEL_DEVICE_MATCH, _MEMO_LIMIT, max_bytes=max_bytes, size=_match_bytes
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
            self._snapshot = _Snapshot(self._changes, tuple(self._slices.values()))
            self._memo.clear()  # keyed by generation: the old entries can no longer be hit

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
            self._snapshot = _Snapshot(generation, tuple(slices.values()))
            self._memo.clear()

    def _indexed(
        self, name: str, raw: Mapping[str, Any], known: IndexedSlice | None
    ) -> IndexedSlice:
        version = _version(raw)
        if known is not None and version is not None and known.version == version:
            return known
        entries = tuple(
            _Indexed(device, self.engine.device_activation(device))
            for device in devices_of_slice(raw)
        )
        return IndexedSlice(name, version, raw, entries)

    def matching(
        self,
        class_name: str,
        class_expressions: Sequence[str],
        selectors: Sequence[str] = (),
        budget: Budget | None = None,
    ) -> Match:
        """Devices matching every class selector and every request selector (memoized).

        Evaluations (not memo hits) are charged to ``budget``, which raises
        :class:`~app.cel.cost.BudgetExceededError` once spent.
        """
        snapshot = self._snapshot
        key = (snapshot.generation, class_name, tuple(class_expressions), tuple(selectors))
        found = self._memo.get(key)
        if found is not None:
            return found
        if selectors:
            base = self.matching(class_name, class_expressions, budget=budget)
            chosen = {id(d) for d in base.devices}
            candidates = [i for i in snapshot.devices() if id(i.device) in chosen]
            result = self._evaluate(candidates, selectors, base, budget)
        else:
            every = list(snapshot.devices())
            candidates = [i for i in every if i.device.problem is None]
            result = self._evaluate(
                candidates, class_expressions, None, budget, f"class {class_name}: "
            )
            if len(candidates) != len(every):
                result = Match(
                    result.devices, len(every), result.errors, result.first_error, result.erring
                )
        return self._memo.put(key, result)

    def programs(self, expressions: Sequence[str]) -> list[Program]:
        """Compile (through the cache) every expression; raises ``CelCompileError``."""
        return [self.cache.get(self.engine, e, SELECTOR) for e in expressions]

    def _view(self, expression: str) -> tuple[tuple[str, ...], ...] | None:
        found = self._views.get(expression, _MISSING)
        if found is not _MISSING:
            return found  # type: ignore[return-value]
        return self._views.put(expression, _view_of(expression))

    def _evaluate(
        self,
        candidates: Sequence[_Indexed],
        expressions: Sequence[str],
        base: Match | None,
        budget: Budget | None = None,
        source: str = "",
    ) -> Match:
        programs = self.programs(expressions)
        considered = base.considered if base is not None else len(candidates)
        errors = base.errors if base is not None else 0
        first_error = base.first_error if base is not None else None
        erring = list(base.erring) if base is not None else []
        if not programs:
            return Match(
                tuple(i.device for i in candidates), considered, errors, first_error, tuple(erring)
            )
        views = [self._view(e) for e in expressions]
        grouped = None not in views
        paths = tuple(sorted({p for v in views if v is not None for p in v}))
        seen: dict[Any, bool | tuple[int, str]] = {}
        matched = []
        cost = sum(p.cost for p in programs) if budget is not None else 0
        for item in candidates:
            key = item.key(paths) if grouped else None
            outcome = seen.get(key) if grouped else None
            if outcome is None:
                if budget is not None:
                    budget.charge(cost)
                outcome = _run(programs, item.activation)
                if grouped:
                    seen[key] = outcome
            if outcome is True:
                matched.append(item.device)
            elif outcome is not False:
                errors += 1
                first_error = first_error or f"{item.device.id}: {outcome[1]}"
                erring.append((item.device, f"{source}selector #{outcome[0]}: {outcome[1]}"))
        return Match(tuple(matched), considered, errors, first_error, tuple(erring))


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
