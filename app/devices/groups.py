"""Slices grouped by what a selector set can read of them.

A :class:`Grouping` belongs to one path set (the device paths a class + selector set reads,
:func:`app.devices.columns.view_of`). Two slices are in the same group when they have as many
devices, the same devices unusable to CEL, and the same column on every path of the set: any
selector set reading only those paths has the same outcome on both, device by device. So a
shape is evaluated once per group, and holds one outcome per group.

A grouping follows the index's slices: brought up to a generation by regrouping only the slices
changed since (or, when that is not known, every slice whose version it has not grouped), on the
request path, under the index's lock. Group numbers are never reused for another signature, so
a shape's outcomes stay valid across slice changes: a changed slice joins a group (known or new)
and only a new group is evaluated.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Final

from app.devices.columns import PathSet
from app.devices.store import IndexedSlice

__all__ = ["Grouping", "grouping_bytes"]

Column = Callable[[IndexedSlice, tuple[str, ...]], int]

_ALONE: Final = -1
"""Signature head of a slice grouped on its own (a path set that may read anything)."""


class Grouping:
    """Slices grouped by their columns on ``paths`` (None: every slice version on its own)."""

    __slots__ = (
        "_column",
        "_next",
        "_order",
        "generation",
        "group_of",
        "members",
        "numbers",
        "paths",
        "version",
    )

    def __init__(self, paths: PathSet | None, column: Column) -> None:
        self.paths = paths
        self._column = column
        self.generation = -1
        self.numbers: dict[tuple[int, ...], int] = {}
        """Signature -> group number (never reused, even when a signature is dropped)."""
        self._next = 0
        self.group_of: dict[str, int] = {}
        self.version: dict[str, IndexedSlice] = {}
        """The slice versions grouped, by name."""
        self.members: dict[int, dict[str, None]] = {}
        """Group -> the names of its slices (insertion-ordered); empty groups are dropped."""
        self._order: tuple[int, list[str], list[IndexedSlice], list[int]] | None = None

    def signature(self, indexed: IndexedSlice) -> tuple[int, ...]:
        if self.paths is None:
            return (_ALONE, indexed.serial)
        column = self._column
        return (
            len(indexed.entries),
            indexed.problems,
            *[column(indexed, path) for path in self.paths],
        )

    def group(self, indexed: IndexedSlice) -> int | None:
        """The group of this slice version (None: one never grouped here)."""
        if self.version.get(indexed.name) is indexed:
            return self.group_of[indexed.name]
        return self.numbers.get(self.signature(indexed))

    def representative(self, group: int, slices: Mapping[str, IndexedSlice]) -> IndexedSlice:
        return slices[next(iter(self.members[group]))]

    def update(
        self,
        slices: Mapping[str, IndexedSlice],
        generation: int,
        changed: Iterable[str] | None,
    ) -> None:
        """Regroup to ``slices`` at ``generation``: only ``changed`` (None: every slice whose
        version is not the one grouped)."""
        if generation == self.generation:
            return
        if not self.version:
            self._fill(slices)
            self.generation = generation
            return
        if changed is None:
            names: Iterable[str] = [
                *(n for n, s in slices.items() if self.version.get(n) is not s),
                *(n for n in self.version if n not in slices),
            ]
        else:
            names = changed
        for name in names:
            indexed = slices.get(name)
            known = self.version.get(name)
            if known is indexed:
                continue
            if known is not None:
                old = self.group_of.pop(name)
                del self.version[name]
                if self.paths is None:  # a group of one version: never seen again
                    self.numbers.pop((_ALONE, known.serial), None)
                members = self.members[old]
                del members[name]
                if not members:
                    del self.members[old]
            if indexed is None:
                continue
            group = self._number(self.signature(indexed))
            self.group_of[name] = group
            self.version[name] = indexed
            self.members.setdefault(group, {})[name] = None
        self.generation = generation

    def derive(self, base: Grouping, slices: Mapping[str, IndexedSlice], generation: int) -> bool:
        """Fill this empty grouping from ``base``, a grouping on a subset of its paths brought
        up to ``slices`` at ``generation``: the columns of the other paths are read, the rest
        is taken from ``base``. False (nothing done) when ``base`` does not qualify.

        A shape reading a path no shape read before (a claim's first memory threshold) groups
        the slices anew: on every path, slice by slice (~5-20 ms at 8,000 slices). Refining its
        class's grouping reads one column per slice and new path; when those are the same
        across each of the class's groups (one memory size per product), the groups are the
        class's, copied in C."""
        paths = self.paths
        if (
            paths is None
            or base.paths is None
            or self.version
            or base.generation != generation
            or len(base.version) != len(slices)
            or not set(base.paths) < set(paths)
        ):
            return False
        names, items, under = base.order()
        column = self._column
        columns = []
        for path in (p for p in paths if p not in base.paths):
            known = [s.columns.get(path) for s in items]
            if None in known:
                pairs = zip(known, items, strict=True)
                known = [c if c is not None else column(s, path) for c, s in pairs]
            columns.append(known)
        alike = all(len(set(c)) == 1 for c in columns)
        if alike or len(set(zip(under, *columns, strict=True))) == len(base.members):
            # the class's groups, unchanged: their numbers, members and slices copied
            self._next = base._next
            for group in base.members:
                self.numbers[self.signature(base.representative(group, slices))] = group
            self.group_of = dict(base.group_of)
            self.members = {g: dict(m) for g, m in base.members.items()}
        else:
            keys = list(zip(under, *columns, strict=True))
            representatives = dict(zip(keys, items, strict=True))  # (a slice per group)
            number = self._number
            found = {k: number(self.signature(s)) for k, s in representatives.items()}
            groups = list(map(found.__getitem__, keys))
            self.group_of = dict(zip(names, groups, strict=True))
            members: dict[int, dict[str, None]] = {}
            for name, group in zip(names, groups, strict=True):
                members.setdefault(group, {})[name] = None
            self.members = members
        self.version = dict(base.version)
        self.generation = generation
        return True

    def order(self) -> tuple[list[str], list[IndexedSlice], list[int]]:
        """The slices grouped (names, versions) and the group of each, in one order: read by
        the groupings refined from this one (`derive`), made once per generation."""
        found = self._order
        if found is None or found[0] != self.generation:
            names = list(self.version)
            found = self._order = (
                self.generation,
                names,
                list(self.version.values()),
                list(map(self.group_of.__getitem__, names)),
            )
        return found[1], found[2], found[3]

    def _number(self, signature: tuple[int, ...]) -> int:
        found = self.numbers.get(signature)
        if found is None:
            found = self.numbers[signature] = self._next
            self._next += 1
        return found

    def _fill(self, slices: Mapping[str, IndexedSlice]) -> None:
        """Group every slice of an empty grouping, path by path (most of it in C)."""
        items = list(slices.values())
        if self.paths is None:
            signatures: list[tuple[int, ...]] = [(_ALONE, s.serial) for s in items]
        else:
            column = self._column
            lists = [[len(s.entries) for s in items], [s.problems for s in items]]
            for path in self.paths:
                known = [s.columns.get(path) for s in items]
                pairs = zip(known, items, strict=True)
                lists.append([c if c is not None else column(s, path) for c, s in pairs])
            signatures = list(zip(*lists, strict=True))
        numbers, number = self.numbers, self._number
        groups = [
            found if (found := numbers.get(sig)) is not None else number(sig) for sig in signatures
        ]
        names = list(slices)
        self.group_of = dict(zip(names, groups, strict=True))
        self.version = dict(zip(names, items, strict=True))
        members: dict[int, dict[str, None]] = {}
        for name, group in zip(names, groups, strict=True):
            members.setdefault(group, {})[name] = None
        self.members = members


def grouping_bytes(grouping: Grouping) -> int:
    """About what a grouping holds: three entries per slice and a signature per group."""
    per_signature = 80 + 8 * (2 + len(grouping.paths or ()))
    return 256 + 220 * len(grouping.version) + per_signature * len(grouping.numbers)
