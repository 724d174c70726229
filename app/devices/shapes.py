"""What the device index (:mod:`app.devices.index`) holds per slice and per shape, and how it
evaluates a selector set on one slice's devices.

A *shape* (a DeviceClass + selector set) keeps one :class:`Outcome` per group of slices alike
(:class:`app.devices.groups.Grouping`: the same columns on every path the selectors read), not
one per slice: 8,000 slices of identical GPUs are one group, one evaluation and one outcome. A
group is evaluated on one of its slices, once per distinct view of a device (devices with the
same values on the paths read share the outcome).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from app.cel.cost import Budget
from app.cel.device import Device
from app.cel.engine import Engine, Program
from app.cel.errors import CelEvalError
from app.devices.columns import PathSet, reduced
from app.devices.groups import Grouping
from app.devices.literals import Comparison, decide_all
from app.devices.store import IndexedSlice

__all__ = [
    "DeviceRefs",
    "Match",
    "Outcome",
    "Plan",
    "Shape",
    "ShapeKey",
    "evaluate",
    "run",
    "shape_bytes",
]


@dataclass(frozen=True, slots=True, eq=False)
class Plan:
    """What evaluating an expression set reads (device paths) and costs per device."""

    paths: PathSet | None
    """None: an expression may read any part of a device (evaluated per device)."""
    cost: int
    comparisons: tuple[tuple[int, Comparison], ...] | None = None
    """When every expression is a string comparison (:mod:`app.devices.literals`): each one with
    the index of its path in ``paths``, answered without CEL where the value is a string."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a shape matches in every slice of one group, by device position."""

    matched: tuple[int, ...]
    every: bool
    """Every device matched (``matched`` is all positions)."""
    considered: int
    erring: tuple[tuple[int, str, str], ...]
    """(position, message with its selector, message alone) for each device a selector erred on
    (for a request's selectors: theirs only; the class's errors are the class shape's)."""
    matched_set: frozenset[int] = frozenset()


ShapeKey = tuple[str, tuple[str, ...], tuple[str, ...]]
"""(DeviceClass name, its selectors, the request's selectors): what a memo entry answers."""


@dataclass(slots=True)
class Shape:
    """A class + selector set's outcome per group, and its Match at ``generation``."""

    grouping: Grouping
    outcomes: dict[int, Outcome] = field(default_factory=dict)
    generation: int = -1
    match: Match | None = None
    base: Shape | None = None
    """The class's own shape (for a request's selectors): its errors come first in a match."""


def shape_bytes(shape: Shape) -> int:
    """About what a memoized shape holds on its own: an outcome per group (the groups, the
    slices and their devices are shared) and the errors of its match."""
    held = 0
    for outcome in shape.outcomes.values():
        held += 120 + (0 if outcome.every else 40 + 36 * len(outcome.matched))
        held += 120 * len(outcome.erring)
    match = shape.match
    return 400 + held + (0 if match is None else 64 * len(match.erring))


class DeviceRefs:
    """The devices of a match as (slice name, device name) pairs: ``ref in refs`` looks up the
    slice's group and the shape's outcome for it; no pair is ever built. (It reads the
    grouping as it is now: a slice changed since the match answers for its new version.)"""

    __slots__ = ("_grouping", "_outcomes")

    def __init__(self, grouping: Grouping, outcomes: dict[int, Outcome]) -> None:
        self._grouping = grouping
        self._outcomes = outcomes

    def __contains__(self, ref: object) -> bool:
        if not isinstance(ref, tuple) or len(ref) != 2:
            return False
        grouping = self._grouping
        group = grouping.group_of.get(ref[0])
        outcome = None if group is None else self._outcomes.get(group)
        if outcome is None or not outcome.matched:
            return False
        indexed = grouping.version[ref[0]]
        if outcome.every:
            return ref[1] in indexed.names
        return indexed.position(ref[1]) in outcome.matched_set


class Match:
    """The devices a class + selectors match, and what went wrong on the others.

    ``count``, ``considered``, ``erring`` and ``refs`` come with the match; ``devices`` (every
    matching device, in slice order) is built when first read.
    """

    __slots__ = ("_devices", "_list", "considered", "count", "erring", "first_error", "refs")

    def __init__(
        self,
        count: int,
        considered: int,
        erring: tuple[tuple[Device, str], ...],
        *,
        first_error: str | None,
        refs: DeviceRefs,
        devices: Callable[[], tuple[Device, ...]],
    ) -> None:
        self.count = count
        self.considered = considered
        self.erring = erring
        """Each device a selector erred on, with ``class <name>: selector #i: <message>`` (a
        DeviceClass selector) or ``selector #i: <message>`` (the request's)."""
        self.first_error = first_error
        self.refs = refs
        """``devices`` as (slice name, device name) pairs (what the allocator looks up)."""
        self._list = devices
        self._devices: tuple[Device, ...] | None = None

    @property
    def errors(self) -> int:
        return len(self.erring)

    @property
    def devices(self) -> tuple[Device, ...]:
        found = self._devices
        if found is None:
            found = self._devices = self._list()
        return found


def evaluate(
    indexed: IndexedSlice,
    positions: Sequence[int],
    plan: Plan,
    programs: Sequence[Program],
    columns: Sequence[tuple[Any, ...]] | None,
    *,
    engine: Engine,
    budget: Budget | None,
    seen: dict[Any, Any],
) -> tuple[list[int], list[tuple[int, tuple[int, str]]]]:
    """The positions every program (``plan``'s, compiled) accepts, and those a program errs on
    with the error.
    ``columns`` (the slice's columns on ``plan.paths``) give each device its view: a view
    seen before (``seen``) takes its outcome without an evaluation, and a new one is evaluated
    on the device reduced to those paths (a small activation, made for the evaluation and not
    kept: selectors reading a per-device value, such as a uuid, hold no memory per device). A
    plan of string comparisons is answered from the columns where the values are strings
    (:mod:`app.devices.literals`), without CEL and without a charge.
    Without paths (an expression that may read anything) the device's whole activation is
    made once and kept."""
    cost = plan.cost if budget is not None else 0
    matched: list[int] = []
    erring: list[tuple[int, tuple[int, str]]] = []
    entries = indexed.entries
    paths = plan.paths
    comparisons = plan.comparisons
    decided = (
        None
        if comparisons is None or columns is None
        else decide_all(comparisons, columns, positions)
    )
    if decided is not None and None not in decided:
        return [p for p, d in zip(positions, decided, strict=True) if d], erring
    for k, position in enumerate(positions):
        outcome: bool | tuple[int, str] | None = None if decided is None else decided[k]
        view = None
        if outcome is None and columns is not None:
            view = tuple([c[position] for c in columns])
            outcome = seen.get(view)
        if outcome is None:
            if budget is not None:
                budget.charge(cost)
            entry = entries[position]
            activation = (
                entry.activated(engine)
                if paths is None
                else engine.device_activation(reduced(entry.device, paths))
            )
            outcome = run(programs, activation)
            if view is not None:
                seen[view] = outcome
        if outcome is True:
            matched.append(position)
        elif outcome is not False:
            erring.append((position, outcome))
    return matched, erring


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
