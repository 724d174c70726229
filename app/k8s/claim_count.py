"""Counting what a claim spec asks for: devices per DeviceClass, for quota and cluster usage.

Reads the claim model (:mod:`app.k8s.claims`) with its ``COUNTING`` reader.

Counting rules (DESIGN feature 3):

- ``allocationMode: ExactCount`` (the default) counts ``count`` devices (default 1);
- ``allocationMode: All`` is unbounded: the request gets every matching device, however many;
- ``firstAvailable`` counts, per DeviceClass, its largest alternative of that class (the scheduler
  may pick any of them, so a limit must hold for the largest);
- requests with ``adminAccess`` count like any other.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from app.k8s.claims import COUNTING, ClaimSpec, DeviceRequest, parse_claim_spec

__all__ = ["EMPTY", "ClaimCount", "RequestCount", "count_claim", "count_claim_spec"]


@dataclass(slots=True)
class RequestCount:
    """What one request of a claim asks for."""

    name: Final[str]
    path: Final[str]
    """Field path of the request, for messages: spec.devices.requests[0]."""
    devices: Final[Mapping[str, int]]
    """DeviceClass -> devices asked for (ExactCount; for firstAvailable the largest)."""
    unbounded: Final[frozenset[str]] = frozenset()
    """DeviceClasses asked for with allocationMode: All."""
    admin_access: Final[bool] = False


@dataclass(slots=True)
class ClaimCount:
    """What a whole claim spec asks for."""

    requests: Final[tuple[RequestCount, ...]] = ()
    devices: Final[Mapping[str, int]] = field(default_factory=dict)
    """DeviceClass -> sum of its bounded requests."""
    unbounded: Final[frozenset[str]] = frozenset()
    """DeviceClasses some request asks for with allocationMode: All."""

    @property
    def classes(self) -> frozenset[str]:
        return frozenset(self.devices) | self.unbounded


EMPTY = ClaimCount()


def count_claim_spec(spec: Any, path: str = "spec") -> ClaimCount:
    """Count a ResourceClaim `spec` (for a template: its `spec.spec`, path `spec.spec`); a field
    of the wrong type raises ObjectShapeError with its path."""
    if spec is None:
        return EMPTY
    return count_claim(parse_claim_spec(spec, path))


def count_claim(parsed: ClaimSpec) -> ClaimCount:
    """Count a claim spec already read; raises ObjectShapeError at the first error that stops
    counting."""
    parsed.check(COUNTING)
    if not parsed.requests:
        return EMPTY
    requests = tuple(_count_request(request) for request in parsed.requests)
    totals: dict[str, int] = {}
    unbounded: set[str] = set()
    for request in requests:
        for device_class, amount in request.devices.items():
            totals[device_class] = totals.get(device_class, 0) + amount
        unbounded |= request.unbounded
    return ClaimCount(requests, totals, frozenset(unbounded))


def _count_request(request: DeviceRequest) -> RequestCount:
    member = request.counted()
    if member is None:
        return RequestCount(request.name, request.path, {})
    if member is request.first_available:
        largest: dict[str, int] = {}
        unbounded: set[str] = set()
        for alternative in member.alternatives:
            if alternative.all_devices:
                unbounded.add(alternative.device_class)
            else:
                largest[alternative.device_class] = max(
                    largest.get(alternative.device_class, 0), alternative.count
                )
        for device_class in unbounded:
            largest.pop(device_class, None)
        return RequestCount(request.name, request.path, largest, frozenset(unbounded))
    (alternative,) = member.alternatives
    if alternative.all_devices:
        return RequestCount(
            request.name,
            request.path,
            {},
            frozenset({alternative.device_class}),
            alternative.admin_access,
        )
    return RequestCount(
        request.name,
        request.path,
        {alternative.device_class: alternative.count},
        frozenset(),
        alternative.admin_access,
    )
