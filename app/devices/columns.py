"""A device's projection onto the fields an expression reads, kept as *columns*: for one path
(``("capacity", "gpu.nvidia.com", "memory")``) and one slice, the projection of each of its
devices, in order. Columns are numbered once (:class:`Columns`), so

- two slices whose columns have the same numbers for every path a selector set reads share
  every outcome of it, device by device (:mod:`app.devices.groups` groups slices that way);
- devices with the same projection share an outcome, so a group is evaluated once per distinct
  view of a device, not once per device.

A slice's columns for every attribute and capacity its devices publish are numbered when the
slice is indexed (one pass over its devices); a path no device publishes is the column of
``MISSING`` and is never stored, so selectors reading made-up names cost no memory. Coarser
paths (``device.attributes["gpu.nvidia.com"]``, ``device.driver``) are numbered when first read.

The paths an expression can read come from :func:`app.cel.syntax.device_paths`; an expression
that uses ``device`` any other way has no paths (None) and is evaluated per device.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from app.cel import syntax
from app.cel.device import Device

__all__ = [
    "MISSING",
    "Columns",
    "Path",
    "PathSet",
    "columns_of",
    "project",
    "reduced",
    "view_of",
]

MISSING: Final = object()

Path = tuple[str, ...]
"""One to three keys: ``("driver",)``, ``("attributes", domain)``, ``("capacity", domain, x)``."""
PathSet = tuple[Path, ...]


class Columns:
    """Numbers for the distinct columns seen (a column: one value per device of a slice)."""

    __slots__ = ("numbers", "values")

    def __init__(self) -> None:
        self.numbers: dict[tuple[Any, ...], int] = {}
        self.values: list[tuple[Any, ...]] = []

    def number(self, column: tuple[Any, ...]) -> int:
        found = self.numbers.get(column)
        if found is None:
            found = self.numbers[column] = len(self.values)
            self.values.append(column)
        return found

    def __len__(self) -> int:
        return len(self.values)


def _typed(value: Any) -> Any:
    """A value with its type, so that ``1``, ``True`` and ``1.0`` never share an outcome."""
    if isinstance(value, Mapping):
        return frozenset((k, _typed(v)) for k, v in value.items())
    return (type(value), value)


def columns_of(devices: Sequence[Device]) -> dict[Path, tuple[Any, ...]]:
    """The column of every attribute and capacity the devices publish (one pass)."""
    size = len(devices)
    found: dict[Path, list[Any]] = {}
    for position, device in enumerate(devices):
        for top, domains in (("attributes", device.attributes), ("capacity", device.capacity)):
            for domain, values in domains.items():
                for name, value in values.items():
                    path = (top, domain, name)
                    column = found.get(path)
                    if column is None:
                        column = found[path] = [MISSING] * size
                    column[position] = (type(value), value)
    return {path: tuple(column) for path, column in found.items()}


def project(device: Device, keys: Path) -> Any:
    """The device's value at ``keys`` (typed), or MISSING."""
    head = keys[0]
    if head == "driver":
        return (str, device.driver)
    if head == "allowMultipleAllocations":
        return (bool, device.allow_multiple_allocations)
    top: Mapping[str, Mapping[str, Any]] = (
        device.attributes if head == "attributes" else device.capacity
    )
    if len(keys) == 1:
        return _typed(top)
    domain = top.get(keys[1])
    if domain is None:
        return MISSING
    if len(keys) == 2:
        return _typed(domain)
    value = domain.get(keys[2], MISSING)
    return value if value is MISSING else _typed(value)


def reduced(device: Device, paths: PathSet) -> Device:
    """The device with only what ``paths`` reach (a domain the device has stays, empty if none
    of its names is read, so a missing name errs as it would on the whole device): what an
    expression reading only those paths needs, and a small activation instead of a full one."""
    if not paths:
        return _with(device, {}, {})
    tops: dict[str, dict[str, dict[str, Any]]] = {"attributes": {}, "capacity": {}}
    for path in paths:
        head = path[0]
        if head not in tops:
            continue
        source: Mapping[str, Mapping[str, Any]] = (
            device.attributes if head == "attributes" else device.capacity
        )
        if len(path) == 1:
            tops[head] = {d: dict(v) for d, v in source.items()}
            continue
        domain = source.get(path[1])
        if domain is None:
            continue
        kept = tops[head].setdefault(path[1], {})
        if len(path) == 2:
            kept.update(domain)
        elif path[2] in domain:
            kept[path[2]] = domain[path[2]]
    return _with(device, tops["attributes"], tops["capacity"])


def _with(device: Device, attributes: Any, capacity: Any) -> Device:
    return Device(
        device.driver,
        device.pool,
        device.slice_name,
        device.name,
        attributes,
        capacity,
        device.allow_multiple_allocations,
        device.problem,
    )


def view_of(expression: str) -> PathSet | None:
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
