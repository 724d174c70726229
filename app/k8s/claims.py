"""The claim model: one reading of a ResourceClaim spec, and what it asks for.

:func:`parse_claim_spec` reads a ResourceClaim ``spec`` (a ResourceClaimTemplate's
``spec.spec``) into frozen values: :class:`ClaimSpec` -> :class:`DeviceRequest` ->
:class:`Alternative` (the ``exactly`` request, or each ``firstAvailable`` subrequest), plus the
spec's constraints and config. Every value carries its field path. It never raises: a field of the
wrong type becomes a :class:`FieldError` (path + message) on the value that holds it, and the
reading goes on with a neutral value in its place.

Two readers ask different things of the same spec, so an error says which of them it stops:

- ``COUNTING`` (quota, cluster usage: :func:`count_claim_spec`): the class, allocation mode,
  count (at least 1) and adminAccess of each request must be well typed
  (:mod:`app.k8s.claim_count`);
- ``SELECTING`` (the selector check): the selectors must be well formed, and a ``count`` that is
  present must be an integer.

Errors in the structure (a request that is not an object, ``requests`` that is not a list) stop
both. :meth:`ClaimSpec.first_error` is the first error a reader stops at, in document order.

The values are slotted dataclasses whose fields are ``Final``: mypy --strict refuses any
assignment to them, as it would for frozen ones, and the parser builds them without a frozen
``__init__``'s per-field ``object.__setattr__`` (for a one-request claim, on the admission
path, that was a few microseconds: more than the rest of the reading).

Both request shapes are read: v1 (``requests[].exactly`` / ``requests[].firstAvailable``) and the
older flat one (``requests[].deviceClassName``, v1beta1) that a dump of an older cluster may hold.
The API server accepts exactly one of ``exactly`` and ``firstAvailable``; for a spec that has
both (only offline files and the mutating endpoint can see one), the counting reader takes
``exactly`` and :attr:`DeviceRequest.alternatives` takes ``firstAvailable``, as each did before
the two readings were one.

Counting (quota, usage) lives in :mod:`app.k8s.claim_count`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Final

from app.errors import ObjectShapeError
from app.k8s.claim_parts import Config, Constraint, Toleration, capacity_requests, configs
from app.k8s.claim_parts import constraints as read_constraints
from app.k8s.claim_parts import tolerations as read_tolerations
from app.k8s.quantity import Quantity

__all__ = [
    "ALL",
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
    "device_class_expressions",
    "device_class_selectors",
    "parse_claim_spec",
    "template_claim_spec",
]

Obj = dict[str, Any]

EXACT_COUNT = "ExactCount"
ALL = "All"

COUNTING: Final = 1
"""Reader flag: quota and usage counting (:func:`count_claim_spec`)."""
SELECTING: Final = 2
"""Reader flag: the selector check (compile and satisfiability)."""
_BOTH: Final = COUNTING | SELECTING


@dataclass(frozen=True, slots=True)
class FieldError:
    """A field of the wrong type or value: its path, what is wrong, and which readers it stops."""

    path: str
    message: str
    readers: int = _BOTH

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


# -- parsing -------------------------------------------------------------------------------------


def parse_claim_spec(spec: Any, path: str = "spec") -> ClaimSpec:
    """Read a ResourceClaim `spec` (for a template: its `spec.spec`, path `spec.spec`)."""
    if spec is None:
        return ClaimSpec(path)
    if type(spec) is not dict:
        return ClaimSpec(path, errors=(FieldError(path, "must be an object"),), malformed=True)
    devices = spec.get("devices")
    if devices is None:
        return ClaimSpec(path)
    devices_path = f"{path}.devices"
    if type(devices) is not dict:
        error = FieldError(devices_path, "must be an object")
        return ClaimSpec(path, errors=(error,), malformed=True)
    raw_requests = devices.get("requests")
    requests: tuple[DeviceRequest, ...] = ()
    errors: tuple[FieldError, ...] = ()
    found: list[FieldError] = []
    if raw_requests is not None:
        if type(raw_requests) is not list:
            errors = (FieldError(f"{devices_path}.requests", "must be a list"),)
        else:
            requests = tuple(
                [
                    _request(item, f"{devices_path}.requests[{index}]", found)
                    for index, item in enumerate(raw_requests)
                ]
            )
    constraints = devices.get("constraints")
    config = devices.get("config")
    return ClaimSpec(
        path,
        requests,
        read_constraints(constraints, f"{devices_path}.constraints") if constraints else (),
        configs(config, f"{devices_path}.config") if config else (),
        errors,
        bool(errors or found),
    )


def template_claim_spec(template: Obj) -> tuple[Any, str]:
    """The claim spec inside a ResourceClaimTemplate, with its path."""
    outer = template.get("spec")
    if outer is None:
        return None, "spec.spec"
    if not isinstance(outer, dict):
        raise ObjectShapeError("spec", "must be an object")
    return outer.get("spec"), "spec.spec"


def _request(item: Any, path: str, found: list[FieldError]) -> DeviceRequest:
    """One device request; every error made is also appended to `found`."""
    if type(item) is not dict:
        # the selector check reads a null request as an empty one
        readers = COUNTING if item is None else _BOTH
        error = FieldError(path, "must be an object", readers)
        found.append(error)
        empty = Branch((_alternative({}, path, "", found),))
        return DeviceRequest(path, "", flat=empty, errors=(error,))
    raw_name = item.get("name", "")
    errors: tuple[FieldError, ...] = ()
    if isinstance(raw_name, str):
        name = raw_name
    else:
        name = str(raw_name)
        errors = (FieldError(f"{path}.name", "must be a string", COUNTING),)
        found.extend(errors)
    exactly: Branch | None = None
    first_available: Branch | None = None
    flat: Branch | None = None
    raw_exactly = item.get("exactly")
    raw_first = item.get("firstAvailable")
    if type(raw_exactly) is dict:  # the common case
        exactly = Branch((_alternative(raw_exactly, f"{path}.exactly", "", found, admin=True),))
    elif raw_exactly is not None or "exactly" in item:
        exactly = _exactly(raw_exactly, f"{path}.exactly", found)
    if raw_first is not None or "firstAvailable" in item:
        first_available = _first_available(raw_first, f"{path}.firstAvailable", found)
    if raw_exactly is None and raw_first is None:
        flat = Branch((_alternative(item, path, "", found, admin=True),))
    return DeviceRequest(
        path, name, exactly, first_available, flat, "deviceClassName" in item, errors
    )


def _exactly(value: Any, path: str, found: list[FieldError]) -> Branch:
    if value is None:
        return Branch((_alternative({}, path, "", found, admin=True),), written=False)
    if type(value) is not dict:
        found.append(FieldError(path, "must be an object"))
        return Branch((), (found[-1],))
    return Branch((_alternative(value, path, "", found, admin=True),))


def _first_available(value: Any, path: str, found: list[FieldError]) -> Branch:
    if value is None:
        return Branch((), written=False)
    if type(value) is not list:
        found.append(FieldError(path, "must be a list"))
        return Branch((), (found[-1],))
    alternatives = []
    for index, sub in enumerate(value):
        sub_path = f"{path}[{index}]"
        if type(sub) is not dict:
            # the selector check reads a null subrequest as an empty one
            readers = COUNTING if sub is None else _BOTH
            error = FieldError(sub_path, "must be an object", readers)
            found.append(error)
            alternatives.append(replace(_alternative({}, sub_path, "", found), errors=(error,)))
            continue
        raw_name = sub.get("name")
        name = raw_name if isinstance(raw_name, str) else ""
        alternatives.append(_alternative(sub, sub_path, name, found))
    return Branch(tuple(alternatives))


def _alternative(
    body: Obj, path: str, name: str, found: list[FieldError], *, admin: bool = False
) -> Alternative:
    """One exact request or subrequest. Errors in the order counting, then selecting, meets
    them: class, mode, count, adminAccess, selectors."""
    errors: list[FieldError] = []
    raw_class = body.get("deviceClassName")
    if isinstance(raw_class, str):
        device_class = raw_class
    else:
        device_class = str(raw_class or "")
        if raw_class is not None:
            errors.append(FieldError(f"{path}.deviceClassName", "must be a string", COUNTING))
    raw_mode = body.get("allocationMode")
    mode = (raw_mode if isinstance(raw_mode, str) else str(raw_mode)) if raw_mode else EXACT_COUNT
    bad_mode = mode not in (EXACT_COUNT, ALL)
    if bad_mode:
        message = f"must be ExactCount or All, not {raw_mode!r}"
        errors.append(FieldError(f"{path}.allocationMode", message, COUNTING))
    raw_count = body.get("count", 1)
    counted = mode == EXACT_COUNT
    count = 1
    if type(raw_count) is int:
        count = raw_count
        if count < 1 and counted:
            errors.append(FieldError(f"{path}.count", f"must be at least 1, not {count}", COUNTING))
    else:
        readers = SELECTING | (COUNTING if counted and raw_count is not None else 0)
        errors.append(FieldError(f"{path}.count", "must be an integer", readers))
    admin_access = False
    if admin:
        raw_admin = body.get("adminAccess")
        if raw_admin is not None and not isinstance(raw_admin, bool):
            errors.append(FieldError(f"{path}.adminAccess", "must be a boolean", COUNTING))
        admin_access = bool(raw_admin)
    raw_selectors = body.get("selectors")
    selectors = (
        _selectors(raw_selectors, f"{path}.selectors", errors) if raw_selectors is not None else ()
    )
    capacity = body.get("capacity")
    requests = capacity.get("requests") if type(capacity) is dict else None
    amounts, bad = capacity_requests(requests, f"{path}.capacity.requests")
    errors.extend(FieldError(where, message, SELECTING) for where, message in bad)
    tolerations = body.get("tolerations")
    if errors:
        found.extend(errors)
    return Alternative(
        path,
        name,
        device_class,
        selectors,
        mode,
        count,
        admin_access,
        requests if type(requests) is dict else {},
        tuple(t for t in tolerations if type(t) is dict) if type(tolerations) is list else (),
        tuple(errors) if errors else (),
        amounts,
        read_tolerations(tolerations) if tolerations else (),
    )


def _selectors(value: Any, path: str, errors: list[FieldError]) -> tuple[tuple[str, str], ...]:
    """(path, expression) of each CEL selector in a ``selectors`` list."""
    indices: list[int] = []
    expressions = _expressions(value, path, errors, indices)
    pairs = zip(indices, expressions, strict=True)
    return tuple([(f"{path}[{i}].cel.expression", e) for i, e in pairs])


def _expressions(
    value: Any, path: str, errors: list[FieldError], indices: list[int] | None = None
) -> list[str]:
    """The expressions of the CEL selectors in a ``selectors`` list (a claim request's or a
    DeviceClass's), their indices appended to `indices`; a malformed one is skipped with an
    error in `errors`."""
    expressions: list[str] = []
    if value is None:
        return expressions
    if not isinstance(value, list):
        errors.append(FieldError(path, "must be a list", SELECTING))
        return expressions
    for index, selector in enumerate(value):
        if selector is None:
            continue
        if type(selector) is not dict and not isinstance(selector, Mapping):
            errors.append(FieldError(f"{path}[{index}]", "must be an object", SELECTING))
            continue
        cel = selector.get("cel")
        if cel is None:
            continue
        if type(cel) is not dict and not isinstance(cel, Mapping):
            errors.append(FieldError(f"{path}[{index}].cel", "must be an object", SELECTING))
            continue
        expression = cel.get("expression")
        if expression is None:
            continue
        if not isinstance(expression, str):
            message = "must be a string"
            errors.append(FieldError(f"{path}[{index}].cel.expression", message, SELECTING))
            continue
        if indices is not None:
            indices.append(index)
        expressions.append(expression)
    return expressions


def device_class_selectors(
    device_class: Mapping[str, Any] | None,
) -> tuple[tuple[tuple[str, str], ...], tuple[FieldError, ...]]:
    """(path, expression) of each CEL selector of a raw DeviceClass's ``spec.selectors``, and
    the errors of the malformed ones (skipped). The selector check denies on the first error."""
    if not device_class:
        return (), ()
    spec = device_class.get("spec")
    if spec is None:
        return (), ()
    if not isinstance(spec, Mapping):
        return (), (FieldError("spec", "must be an object", SELECTING),)
    errors: list[FieldError] = []
    selectors = _selectors(spec.get("selectors"), "spec.selectors", errors)
    return selectors, tuple(errors)


def device_class_expressions(device_class: Mapping[str, Any] | None) -> tuple[str, ...]:
    """The expressions of a raw DeviceClass's well-formed selectors (what the device index
    evaluates), read as :func:`device_class_selectors` reads them, without paths or errors."""
    spec = device_class.get("spec") if device_class else None
    value = spec.get("selectors") if type(spec) is dict or isinstance(spec, Mapping) else None
    if not value or type(value) is not list:
        return ()
    return tuple(_expressions(value, "spec.selectors", []))
