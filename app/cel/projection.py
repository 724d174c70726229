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

__all__ = ["KEYS_KEPT_PER_DEVICE", "MISSING", "Indexed", "view_of"]

MISSING: Final = object()
KEYS_KEPT_PER_DEVICE: Final = 64
"""Path sets a device keeps its projection for (one per distinct selector shape)."""


class Indexed:
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
