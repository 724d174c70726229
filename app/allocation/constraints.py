"""Constraints across the devices of a claim, as upstream's constraint.go checks them while the
search picks devices: ``matchAttribute`` (one value across the devices of the requests it
names) and ``distinctAttribute`` (values different); a device without the attribute satisfies
neither.

``distinctAttribute`` is kept the way upstream keeps it: one value per request name (its
``attributes`` map is keyed by the request, not the device), so a device is checked only against
the last value each request added, and removing a device forgets its request's value. Two
devices of one request may then share a value (three GPUs of index 0, 1, 2 for one request and
a fourth of index 0 for another pass), and the model must allow what the scheduler allocates.
Kubernetes 1.34's allocator compared the values' pointers, never equal for two devices: there
(``compares_values`` false) only the attribute's presence is checked."""

from __future__ import annotations

from typing import Any

from app.allocation.inventory import Candidate
from app.k8s.claims import Constraint

__all__ = ["ConstraintState", "attribute"]


def attribute(candidate: Candidate, name: str) -> Any:
    """``lookupAttribute``: a fully qualified attribute name, typed so 1 != true."""
    domain, _, ident = name.partition("/")
    if not ident:
        return None
    value = candidate.device.attributes.get(domain, {}).get(ident)
    return None if value is None else (type(value).__name__, str(value))


class ConstraintState:
    """One constraint of a claim and the values the devices picked so far give it."""

    def __init__(self, constraint: Constraint) -> None:
        self.constraint = constraint
        self.values: list[Any] = []
        self.requests: list[str] = []
        self.by_request: dict[str, Any] = {}
        """``distinctAttribute``: the last value each request added (upstream's ``attributes``)."""

    def add(self, request: str, sub: str, candidate: Candidate) -> bool | None:
        """True if added, None if the constraint does not apply, False if violated."""
        if not self.constraint.applies_to(request, sub):
            return None
        name = self.constraint.match_attribute or self.constraint.distinct_attribute or ""
        value = attribute(candidate, name)
        if value is None:
            return False
        if self.constraint.match_attribute is not None:
            if self.values and self.values[0] != value:
                return False
            self.values.append(value)
        else:
            if self.constraint.compares_values and value in self.by_request.values():
                return False
            self.by_request[request] = value
        self.requests.append(request)
        return True

    def remove(self) -> None:
        request = self.requests.pop()
        if self.constraint.match_attribute is not None:
            self.values.pop()
        else:
            self.by_request.pop(request, None)
