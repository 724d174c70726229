"""What the device index (:mod:`app.cel.index`) holds per slice and per shape, and how it
evaluates a selector set on a slice's devices.

A selector set is evaluated once per distinct *view* of a device (its projection onto the paths
the selectors read, numbered by :class:`~app.cel.projection.Views`), and its outcome on a slice
taken once per distinct *signature* (the sequence of the slice's view numbers): 8,000 slices of
identical GPUs cost one evaluation and 8,000 lookups. A slice whose devices all match (or none
do), with no error, keeps one :class:`Part` shared by every shape.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from app.cel.cost import Budget
from app.cel.device import Device
from app.cel.engine import Program
from app.cel.errors import CelEvalError
from app.cel.projection import KEYS_KEPT_PER_DEVICE, Indexed, Views

__all__ = [
    "DeviceRefs",
    "IndexedSlice",
    "Match",
    "Part",
    "Plan",
    "Shape",
    "ShapeKey",
    "Snapshot",
    "common_part",
    "keep",
    "outcomes",
    "part_names",
    "run",
    "shape_bytes",
    "slice_signature",
]


class DeviceRefs:
    """The devices of a match as (slice name, device name) pairs, held slice by slice: ``ref
    in refs`` costs two lookups, and no pair is built for the devices no one asks about."""

    __slots__ = ("_parts",)

    def __init__(self, parts: Mapping[str, Part]) -> None:
        self._parts = parts

    def __contains__(self, ref: object) -> bool:
        if not isinstance(ref, tuple) or len(ref) != 2:
            return False
        part = self._parts.get(ref[0])
        return part is not None and bool(part.devices) and ref[1] in part_names(part)


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
    common: dict[bool, Part] = field(default_factory=dict, compare=False, repr=False)
    """The part every shape shares when all its devices match (True) or none (False), with
    no error: a memoized shape then holds one dict entry per slice, no object of its own."""


@dataclass(slots=True)
class Snapshot:
    generation: int
    slices: tuple[IndexedSlice, ...]
    names: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        self.names = tuple(s.name for s in self.slices)

    def devices(self) -> Iterable[Indexed]:
        for indexed in self.slices:
            yield from indexed.entries


@dataclass(slots=True)
class Part:
    """What one class + selector set matches in one slice version."""

    slice: IndexedSlice
    devices: tuple[Device, ...]
    considered: int
    erring: tuple[tuple[Device, str, str], ...]
    """(device, message with its selector, message alone) for each device a selector erred on."""
    names: frozenset[str] | None = None
    """The matched devices' names (made when first combined)."""


@dataclass(frozen=True, slots=True, eq=False)
class Plan:
    """An expression set compiled, with the device paths it reads (grouped: all known)."""

    programs: tuple[Program, ...]
    views: Views | None
    """The numbering of the projections onto ``paths`` (None: a device may read anything)."""
    paths: tuple[tuple[str, ...], ...]
    cost: int


ShapeKey = tuple[str, tuple[str, ...], tuple[str, ...]]
"""(DeviceClass name, its selectors, the request's selectors): what a memo entry answers."""


@dataclass(slots=True)
class Shape:
    """A class + selector set's matches, slice by slice, and combined at ``generation``."""

    parts: dict[str, Part]
    generation: int = -1
    match: Match | None = None


def shape_bytes(shape: Shape) -> int:
    """About what a memoized shape holds on its own: a part per slice (its tuples share the
    slice's devices when every device matches) and the combined tuple of device references
    (the devices themselves belong to the snapshot)."""
    match = shape.match
    combined = 0 if match is None else 8 * len(match.devices) + 64 * len(match.erring)
    return 200 + 160 * len(shape.parts) + combined


def outcomes(
    entries: Sequence[Indexed],
    signature: tuple[int, ...] | None,
    plan: Plan,
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
            outcome = run(plan.programs, item.activation)
            if view is not None:
                seen[view] = outcome
        if outcome is True:
            matched.append(position)
        elif outcome is not False:
            erring.append((position, outcome))
    return (None if len(matched) == len(entries) else tuple(matched)), tuple(erring)


def slice_signature(
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


def common_part(part: Part) -> Part:
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


def part_names(part: Part) -> frozenset[str]:
    names = part.names
    if names is None:
        names = part.names = (
            part.slice.names
            if part.devices is part.slice.devices
            else frozenset(d.name for d in part.devices)
        )
    return names


def keep(entries: tuple[Indexed, ...], devices: tuple[Device, ...]) -> tuple[Indexed, ...]:
    kept = {id(d) for d in devices}
    return tuple(e for e in entries if id(e.device) in kept)


def run(programs: Sequence[Program], activation: Any) -> bool | tuple[int, str]:
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
