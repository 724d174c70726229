"""The cluster's ResourceSlices as the device index holds them: each slice version's devices,
converted once, and the numbers of its columns (:mod:`app.devices.columns`).

:class:`SliceStore` is fed plain values: the raw ResourceSlices (a mapping name -> object, as
the cluster view's ``resource_slices()`` returns) and a generation number that changes whenever
any slice changes (``generation("ResourceSlice")``). It converts each slice's devices once per
slice version (name + resourceVersion/generation) and numbers its columns, never on a request,
and remembers which slices changed since a generation (what a memo kept across a change must
re-check).

It is fed either way: as a listener of the cluster view (:meth:`SliceStore.on_change`,
subscribed at startup, so a slice event converts only that slice's devices and the request path
never converts a slice), or in bulk with :meth:`SliceStore.sync` (tests, benchmarks, offline).
The device index (:class:`app.devices.index.DeviceIndex`) is a store that also answers which
devices match.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from itertools import count
from types import MappingProxyType
from typing import Any, Final

from app.cel.device import Device, devices_of_slice
from app.cel.engine import Engine
from app.cluster.view import Kind
from app.devices.columns import MISSING, Columns, Path, columns_of, project

__all__ = ["Indexed", "IndexedSlice", "SliceStore", "Snapshot"]

CHANGES_KEPT: Final = 4096
"""Slice changes remembered (which slices changed since a generation): older are unknown."""
COLUMNS_CHECKED_EVERY: Final = 1024
"""Slice changes between two checks of the column numbers' growth."""
COLUMNS_KEPT_MIN: Final = 1 << 16
"""Column numbers kept before any renumbering (at most 4x those the slices hold beyond it)."""
_EAGER: Final[tuple[Path, ...]] = (("driver",), ("allowMultipleAllocations",))


class Indexed:
    """A device, and its whole CEL activation once an expression that may read any part of it
    (no known paths) is evaluated on it; other expressions make a reduced activation per
    evaluation and keep none."""

    __slots__ = ("activation", "device")

    def __init__(self, device: Device) -> None:
        self.device = device
        self.activation: Any = None

    def activated(self, engine: Engine) -> Any:
        found = self.activation
        if found is None:
            found = self.activation = engine.device_activation(self.device)
        return found


@dataclass(slots=True, eq=False)
class IndexedSlice:
    """One ResourceSlice version as the view holds it (read-only) and its devices, converted
    once, with the number of each of its columns (:mod:`app.devices.columns`)."""

    name: str
    version: Any
    raw: Any
    entries: tuple[Indexed, ...]
    devices: tuple[Device, ...]
    names: frozenset[str]
    columns: dict[Path, int]
    """Column numbers: every attribute and capacity at indexing, coarser paths when read."""
    problems: int
    """The number of the column of which devices cannot be given to CEL (they never match)."""
    serial: int
    """Unique per slice version (the group of a slice evaluated on its own)."""
    positions: dict[str, int] | None = field(default=None, repr=False)

    def position(self, device_name: str) -> int:
        found = self.positions
        if found is None:
            found = self.positions = {d.name: i for i, d in enumerate(self.devices)}
        return found.get(device_name, -1)


@dataclass(frozen=True, slots=True)
class Snapshot:
    generation: int
    slices: tuple[IndexedSlice, ...]

    def devices(self) -> Iterator[Indexed]:
        for indexed in self.slices:
            yield from indexed.entries


class SliceStore:
    """Each slice version's devices, converted once, its columns numbered, and a log of which
    slices changed."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        """Held to change the slices (watch events) and, in the device index, to bring
        groupings and shapes up to date (requests): one at a time, never long."""
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
        self._changes = 0
        self._log: deque[tuple[int, str]] = deque(maxlen=CHANGES_KEPT)
        self._log_floor = -1
        """The generation from which the log holds every change (older ones: unknown)."""

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
        replaced by others with new values: new uuids). What holds the old numbers is dropped
        (:meth:`_renumbered`)."""
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
        self._paths = {p: p for s in self._slices.values() for p in s.columns}
        self._renumbered()

    def _renumbered(self) -> None:
        """Called under the lock when the columns were numbered anew: whatever a subclass keeps
        by column number is no longer valid."""

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


def _name(raw: Mapping[str, Any]) -> str:
    metadata = raw.get("metadata") or {}
    return str(metadata.get("name", "")) if isinstance(metadata, Mapping) else ""


def _version(raw: Mapping[str, Any]) -> Any:
    metadata = raw.get("metadata") or {}
    if not isinstance(metadata, Mapping):
        return None
    version = (metadata.get("resourceVersion"), metadata.get("generation"))
    return None if version == (None, None) else version
