"""A device's projection onto the fields an expression reads: devices with the same projection
share every selector's outcome, so :class:`app.cel.index.DeviceIndex` evaluates a selector once per
distinct projection (a "view"), not once per device.

The paths an expression can read come from :func:`app.cel.syntax.device_paths`; an expression
that uses ``device`` any other way has no view (None) and is evaluated per device.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from app.cel import syntax
from app.cel.device import Device

__all__ = ["KEYS_KEPT_PER_DEVICE", "MISSING", "Indexed", "Views", "view_of"]

MISSING: Final = object()
KEYS_KEPT_PER_DEVICE: Final = 64
"""Path sets a device keeps its projection for (one per distinct selector shape)."""


class Indexed:
    """A device, its activation, and its projections onto the path sets seen so far."""

    __slots__ = ("activation", "device", "ids", "keys")

    def __init__(self, device: Device, activation: Any) -> None:
        self.device = device
        self.activation = activation
        self.keys: dict[tuple[tuple[str, ...], ...], tuple[Any, ...]] = {}
        self.ids: dict[tuple[tuple[str, ...], ...], tuple[Views, int]] = {}

    def key(self, paths: tuple[tuple[str, ...], ...]) -> tuple[Any, ...]:
        found = self.keys.get(paths)
        if found is None:
            found = tuple(_project(self.device, p) for p in paths)
            if len(self.keys) >= KEYS_KEPT_PER_DEVICE:
                self.keys.clear()
            self.keys[paths] = found
        return found

    def view_id(self, paths: tuple[tuple[str, ...], ...], views: Views) -> int:
        """The number ``views`` gives this device's projection onto ``paths``: devices with
        the same number share every outcome of an expression reading only those paths (a
        small int hashes in nanoseconds, a projection holding quantities in microseconds)."""
        found = self.ids.get(paths)
        if found is not None and found[0] is views:
            return found[1]
        number = views.number(self.key(paths))
        if len(self.ids) >= KEYS_KEPT_PER_DEVICE:
            self.ids.clear()
        self.ids[paths] = (views, number)
        return number


class Views:
    """Numbers for the distinct projections onto one path set (one table per path set; a
    device remembers which table numbered it, so a table dropped and made anew never mixes
    its numbers with the old one's)."""

    __slots__ = ("numbers",)

    def __init__(self) -> None:
        self.numbers: dict[tuple[Any, ...], int] = {}

    def number(self, key: tuple[Any, ...]) -> int:
        found = self.numbers.get(key)
        if found is None:
            found = self.numbers[key] = len(self.numbers)
        return found


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
        return MISSING
    if len(keys) == 2:
        return _typed(domain)
    value = domain.get(keys[2], MISSING)
    return value if value is MISSING else _typed(value)


def view_of(expression: str) -> tuple[tuple[str, ...], ...] | None:
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
