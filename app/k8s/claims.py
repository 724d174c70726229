"""How many devices of which DeviceClass a ResourceClaim spec asks for.

Counting rules (DESIGN feature 3):

- `allocationMode: ExactCount` (the default) counts `count` devices (default 1);
- `allocationMode: All` is unbounded: the request gets every matching device, however many;
- `firstAvailable` counts, per DeviceClass, its largest alternative of that class (the scheduler
  may pick any of them, so a limit must hold for the largest);
- requests with `adminAccess` count like any other.

Both request shapes are read: v1 (`requests[].exactly` / `requests[].firstAvailable`) and the
older flat one (`requests[].deviceClassName`, v1beta1) that a dump of an older cluster may hold.
A field of the wrong type raises ObjectShapeError with its path.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from app.errors import ObjectShapeError

Obj = dict[str, Any]

EXACT_COUNT = "ExactCount"
ALL = "All"


@dataclass(frozen=True, slots=True)
class RequestCount:
    """What one request of a claim asks for."""

    name: str
    path: str
    """Field path of the request, for messages: spec.devices.requests[0]."""
    devices: Mapping[str, int]
    """DeviceClass -> devices asked for (ExactCount; for firstAvailable the largest)."""
    unbounded: frozenset[str] = frozenset()
    """DeviceClasses asked for with allocationMode: All."""
    admin_access: bool = False


@dataclass(frozen=True, slots=True)
class ClaimCount:
    """What a whole claim spec asks for."""

    requests: tuple[RequestCount, ...] = ()
    devices: Mapping[str, int] = field(default_factory=dict)
    """DeviceClass -> sum of its bounded requests."""
    unbounded: frozenset[str] = frozenset()
    """DeviceClasses some request asks for with allocationMode: All."""

    @property
    def classes(self) -> frozenset[str]:
        return frozenset(self.devices) | self.unbounded


EMPTY = ClaimCount()


def count_claim_spec(spec: Any, path: str = "spec") -> ClaimCount:
    """Count a ResourceClaim `spec` (for a template: its `spec.spec`, path `spec.spec`)."""
    if spec is None:
        return EMPTY
    _require_object(spec, path)
    devices = spec.get("devices")
    if devices is None:
        return EMPTY
    _require_object(devices, f"{path}.devices")
    raw_requests = devices.get("requests")
    if raw_requests is None:
        return EMPTY
    if not isinstance(raw_requests, list):
        raise ObjectShapeError(f"{path}.devices.requests", "must be a list")
    requests = tuple(
        _count_request(item, f"{path}.devices.requests[{index}]")
        for index, item in enumerate(raw_requests)
    )
    totals: dict[str, int] = {}
    unbounded: set[str] = set()
    for request in requests:
        for device_class, amount in request.devices.items():
            totals[device_class] = totals.get(device_class, 0) + amount
        unbounded |= request.unbounded
    return ClaimCount(requests, totals, frozenset(unbounded))


def template_claim_spec(template: Obj) -> tuple[Any, str]:
    """The claim spec inside a ResourceClaimTemplate, with its path."""
    outer = template.get("spec")
    if outer is None:
        return None, "spec.spec"
    _require_object(outer, "spec")
    return outer.get("spec"), "spec.spec"


def _count_request(item: Any, path: str) -> RequestCount:
    _require_object(item, path)
    name = item.get("name", "")
    if not isinstance(name, str):
        raise ObjectShapeError(f"{path}.name", "must be a string")
    exactly = item.get("exactly")
    alternatives = item.get("firstAvailable")
    if exactly is not None:
        _require_object(exactly, f"{path}.exactly")
        device_class, amount = _count_one(exactly, f"{path}.exactly")
        return _single(name, path, device_class, amount, _admin(exactly, f"{path}.exactly"))
    if alternatives is not None:
        if not isinstance(alternatives, list):
            raise ObjectShapeError(f"{path}.firstAvailable", "must be a list")
        largest: dict[str, int] = {}
        unbounded: set[str] = set()
        for index, sub in enumerate(alternatives):
            sub_path = f"{path}.firstAvailable[{index}]"
            _require_object(sub, sub_path)
            device_class, amount = _count_one(sub, sub_path)
            if amount is None:
                unbounded.add(device_class)
            else:
                largest[device_class] = max(largest.get(device_class, 0), amount)
        for device_class in unbounded:
            largest.pop(device_class, None)
        return RequestCount(name, path, largest, frozenset(unbounded))
    if "deviceClassName" in item:  # v1beta1: the request itself is the exact request
        device_class, amount = _count_one(item, path)
        return _single(name, path, device_class, amount, _admin(item, path))
    return RequestCount(name, path, {})


def _single(
    name: str, path: str, device_class: str, amount: int | None, admin: bool
) -> RequestCount:
    if amount is None:
        return RequestCount(name, path, {}, frozenset({device_class}), admin)
    return RequestCount(name, path, {device_class: amount}, frozenset(), admin)


def _count_one(request: Obj, path: str) -> tuple[str, int | None]:
    """(DeviceClass, devices) of an exact request or sub-request; None devices: unbounded."""
    device_class = request.get("deviceClassName", "")
    if device_class is None:
        device_class = ""
    if not isinstance(device_class, str):
        raise ObjectShapeError(f"{path}.deviceClassName", "must be a string")
    mode = request.get("allocationMode") or EXACT_COUNT
    if mode == ALL:
        return device_class, None
    if mode != EXACT_COUNT:
        raise ObjectShapeError(f"{path}.allocationMode", f"must be ExactCount or All, not {mode!r}")
    amount = request.get("count", 1)
    if amount is None:
        amount = 1
    if not isinstance(amount, int) or isinstance(amount, bool):
        raise ObjectShapeError(f"{path}.count", "must be an integer")
    if amount < 1:
        raise ObjectShapeError(f"{path}.count", f"must be at least 1, not {amount}")
    return device_class, amount


def _admin(request: Obj, path: str) -> bool:
    value = request.get("adminAccess")
    if value is not None and not isinstance(value, bool):
        raise ObjectShapeError(f"{path}.adminAccess", "must be a boolean")
    return bool(value)


def _require_object(value: Any, path: str) -> None:
    if not isinstance(value, dict):
        raise ObjectShapeError(path, "must be an object")


def iter_requests(spec: Obj) -> Iterator[tuple[int, Obj]]:
    """(index, request) of a claim spec's device requests that are objects (for mutation)."""
    devices = spec.get("devices")
    if not isinstance(devices, dict):
        return
    requests = devices.get("requests")
    if not isinstance(requests, list):
        return
    for index, item in enumerate(requests):
        if isinstance(item, dict):
            yield index, item
