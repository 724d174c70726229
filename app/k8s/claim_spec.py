r"""What a claim spec is, as the claim model reads it (:mod:`app.k8s.claims`): frozen values.

:class:`ClaimSpec` -> :class:`DeviceRequest` -> :class:`Branch` -> :class:`Alternative` (the
``exactly`` request, or each ``firstAvailable`` subrequest), plus the spec's
:class:`Constraint`\ s and :class:`Config`, and each alternative's :class:`Toleration`\ s. Every
value carries its field path; a field of the wrong type is a :class:`FieldError` on the value
that holds it, saying which of the two readers it stops (``COUNTING``: quota and cluster usage;
``SELECTING``: the selector check). :meth:`ClaimSpec.first_error` is the first error a reader
stops at, in document order.

What a value means to the scheduler is written next to it, as upstream does it
(``Constraint.applies_to``: ``matchAttributeConstraint.matches``; ``Toleration.tolerates``:
``resourceclaim.ToleratesTaint``).

The values are slotted dataclasses whose fields are ``Final``: mypy --strict refuses any
assignment to them, as it would for frozen ones, and the parser builds them without a frozen
``__init__``'s per-field ``object.__setattr__`` (for a one-request claim, on the admission
path, that was a few microseconds: more than the rest of the reading).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from app.errors import ObjectShapeError
from app.k8s.quantity import Quantity

__all__ = [
    "ALL",
    "BOTH",
    "CAPACITY",
    "COUNTING",
    "EXACT_COUNT",
    "SELECTING",
    "Alternative",
    "Branch",
    "ClaimSpec",
    "Config",
    "Constraint",
    "DeviceRequest",
    "FieldError",
    "Toleration",
]

Obj = dict[str, Any]

EXACT_COUNT = "ExactCount"
ALL = "All"

COUNTING: Final = 1
"""Reader flag: quota and usage counting (:func:`count_claim_spec`)."""
SELECTING: Final = 2
"""Reader flag: the selector check (compile and satisfiability)."""
CAPACITY: Final = 4
"""Reader flag: capacity quotas (:func:`app.k8s.capacity.capacity_asks`), which count the
amounts of `capacity.requests`; device counts do not read them."""
BOTH: Final = COUNTING | SELECTING
"""Both readers: an error in the structure stops both."""


@dataclass(frozen=True, slots=True)
class FieldError:
    """A field of the wrong type or value: its path, what is wrong, and which readers it stops."""

    path: str
    message: str
    readers: int = BOTH

    def exception(self) -> ObjectShapeError:
        return ObjectShapeError(self.path, self.message)


@dataclass(slots=True)
class Alternative:
    """One way to satisfy a request: the ``exactly`` request, a ``firstAvailable`` subrequest,
    or a v1beta1 request's own fields."""

    path: Final[str]
    """Field path: spec.devices.requests[0].exactly, ...firstAvailable[1], or the request's."""
    name: Final[str]
    """The subrequest's name ("" for ``exactly`` and the flat shape)."""
    device_class: Final[str]
    selectors: Final[tuple[tuple[str, str], ...]]
    """(field path of ``cel.expression``, expression) per CEL selector."""
    allocation_mode: Final[str]
    count: Final[int]
    """``count`` as written (1 when absent or not an integer)."""
    admin_access: Final[bool] = False
    capacity: Final[Mapping[str, Any]] = field(default_factory=dict)
    """``capacity.requests``: capacity name -> quantity as written."""
    tolerations: Final[tuple[Obj, ...]] = ()
    errors: Final[tuple[FieldError, ...]] = ()
    capacity_requests: Final[Mapping[str, Quantity]] = field(default_factory=dict)
    """``capacity.requests`` read as quantities (a malformed amount is an error above)."""
    device_tolerations: Final[tuple[Toleration, ...]] = ()
    """``tolerations`` read as values."""

    @property
    def all_devices(self) -> bool:
        return self.allocation_mode == ALL

    @property
    def needed(self) -> int:
        """Devices the alternative needs at least: ``count``, or one for ``All``."""
        return 1 if self.allocation_mode == ALL else self.count


@dataclass(slots=True)
class Branch:
    """The alternatives under one member of a request (``exactly``, ``firstAvailable``, or the
    request itself), with the errors of that member's own shape."""

    alternatives: Final[tuple[Alternative, ...]]
    errors: Final[tuple[FieldError, ...]] = ()
    written: Final[bool] = True
    """False when the member is present with a null value."""


@dataclass(slots=True)
class DeviceRequest:
    path: Final[str]
    """Field path: spec.devices.requests[i]."""
    name: Final[str]
    exactly: Final[Branch | None] = None
    """None when the request has no ``exactly`` key."""
    first_available: Final[Branch | None] = None
    """None when the request has no ``firstAvailable`` key."""
    flat: Final[Branch | None] = None
    """The request's own fields (v1beta1), read when neither member above has a value."""
    has_device_class: Final[bool] = False
    """Whether the request itself has a ``deviceClassName`` key (the v1beta1 shape)."""
    errors: Final[tuple[FieldError, ...]] = ()

    @property
    def member(self) -> Branch | None:
        """The member that holds the request's alternatives (``firstAvailable``, ``exactly``,
        else the request's own fields)."""
        return self.first_available or self.exactly or self.flat

    @property
    def alternatives(self) -> tuple[Alternative, ...]:
        member = self.member
        return member.alternatives if member is not None else ()

    def counted(self) -> Branch | None:
        """The member counting reads: ``exactly`` if written, else ``firstAvailable`` if written,
        else the v1beta1 fields when the request names a class."""
        if self.exactly is not None and self.exactly.written:
            return self.exactly
        if self.first_available is not None and self.first_available.written:
            return self.first_available
        return self.flat if self.has_device_class else None


@dataclass(slots=True)
class ClaimSpec:
    path: Final[str]
    """Field path of the spec: spec, or spec.spec in a template."""
    requests: Final[tuple[DeviceRequest, ...]] = ()
    constraints: Final[tuple[Constraint, ...]] = ()
    config: Final[tuple[Config, ...]] = ()
    errors: Final[tuple[FieldError, ...]] = ()
    """Errors of the spec's own shape (spec, devices, requests not an object or list)."""
    malformed: Final[bool] = False
    """Whether any error was found, here or below (most specs have none: nothing to walk)."""

    def first_error(self, reader: int) -> FieldError | None:
        """The first error, in document order, that stops `reader` (COUNTING or SELECTING)."""
        if not self.malformed:
            return None
        for error in self.errors:
            if error.readers & reader:
                return error
        for request in self.requests:
            for error in request.errors:
                if error.readers & reader:
                    return error
            member = request.counted() if reader == COUNTING else request.member
            if member is None:
                continue
            for error in member.errors:
                if error.readers & reader:
                    return error
            for alternative in member.alternatives:
                for error in alternative.errors:
                    if error.readers & reader:
                        return error
        return None

    def check(self, reader: int) -> None:
        """Raise the first error that stops `reader` as an ObjectShapeError."""
        error = self.first_error(reader)
        if error is not None:
            raise error.exception()


@dataclass(slots=True)
class Constraint:
    path: Final[str]
    requests: Final[tuple[str, ...]]
    match_attribute: Final[str | None]
    distinct_attribute: Final[str | None]
    compares_values: Final[bool] = True
    """False: `distinctAttribute` as Kubernetes 1.34's allocator checks it, the attribute present
    on every device and the values never compared (app.policies.satisfiability.as_scheduled)."""

    def applies_to(self, request: str, subrequest: str = "") -> bool:
        """Whether the constraint covers ``request`` (or ``request/subrequest``); an empty
        ``requests`` list covers every request (upstream ``matchAttributeConstraint.matches``)."""
        if not self.requests:
            return True
        return request in self.requests or (
            bool(subrequest) and f"{request}/{subrequest}" in self.requests
        )


@dataclass(slots=True)
class Config:
    path: Final[str]
    requests: Final[tuple[str, ...]]
    """Requests (``request`` or ``request/subrequest``) it applies to; () = all."""
    driver: Final[str | None]
    """The opaque config's driver; None when the entry is not opaque config."""
    parameters: Final[Any] = None


@dataclass(frozen=True, slots=True)
class Toleration:
    """A device toleration (``resource.k8s.io/v1`` DeviceToleration)."""

    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""

    def tolerates(self, taint: Mapping[str, Any]) -> bool:
        """Whether this toleration tolerates a device taint, as ``resourceclaim.ToleratesTaint``:
        an empty effect matches every effect, an empty key with ``Exists`` every key, ``Exists``
        any value, ``Equal`` (the default) the same value."""
        if self.effect and self.effect != taint.get("effect"):
            return False
        if self.key and self.key != taint.get("key"):
            return False
        if self.operator == "Exists":
            return True
        if self.operator == "Equal":
            return self.value == (taint.get("value") or "")
        return False
