"""One ResourceSlice version as the device index holds it: its devices, converted once, and
the numbers of its columns (:mod:`app.devices.columns`)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from app.cel.device import Device
from app.cel.engine import Engine
from app.devices.columns import Path

__all__ = ["Indexed", "IndexedSlice", "Snapshot"]


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
