"""The claim model: one reading of a ResourceClaim spec, and what it asks for.

:func:`parse_claim_spec` reads a ResourceClaim ``spec`` (a ResourceClaimTemplate's
``spec.spec``) into the values of :mod:`app.k8s.claim_spec` (re-exported here, where every
reader imports them from). It never raises: a field of the wrong type becomes a
:class:`FieldError` (path + message) on the value that holds it, and the reading goes on with a
neutral value in its place.

Two readers ask different things of the same spec, so an error says which of them it stops:

- ``COUNTING`` (quota, cluster usage: :func:`count_claim_spec`): the class, allocation mode,
  count (at least 1) and adminAccess of each request must be well typed
  (:mod:`app.k8s.claim_count`);
- ``SELECTING`` (the selector check): the selectors must be well formed, a ``count`` that is
  present must be an integer, and capacity amounts must be quantities.

Errors in the structure (a request that is not an object, ``requests`` that is not a list) stop
both.

What the API server checks and what it leaves to us (tried on 1.36.2, DESIGN "Consumable
capacity"): tolerations and constraints are validated before admission, so a malformed one only
reaches us from an offline file and is skipped; ``capacity.requests`` is not validated at all
(``-1Gi``, ``0``, ``lots``, any key are stored), so its amounts are parsed here and a bad one is
an error.

Lists are read up to the API server's own limits and no further (``REQUESTS_MAX``,
``SUBREQUESTS_MAX``, ``SELECTORS_MAX``: DeviceRequestsMaxSize, FirstAvailableDeviceRequestMaxSize,
DeviceSelectorsMaxSize): a longer one is an error at the list, which the API server would refuse
anyway ("Too many"), and its items are not read. So a spec costs every reader at most 32 x 8 x 32
selectors, however long the lists a review sends (a claim of 10,000 requests took a quarter of
a second to read).

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
from dataclasses import replace
from typing import Any, Final

from app.errors import ObjectShapeError
from app.k8s.claim_spec import (
    ALL,
    BOTH,
    CAPACITY,
    COUNTING,
    EXACT_COUNT,
    SELECTING,
    Alternative,
    Branch,
    ClaimSpec,
    Config,
    Constraint,
    DeviceRequest,
    FieldError,
    Toleration,
)
from app.k8s.quantity import Quantity, QuantityError, parse_quantity

__all__ = [
    "ALL",
    "CAPACITY",
    "COUNTING",
    "EXACT_COUNT",
    "REQUESTS_MAX",
    "SELECTING",
    "SELECTORS_MAX",
    "SUBREQUESTS_MAX",
    "Alternative",
    "Branch",
    "ClaimSpec",
    "Config",
    "Constraint",
    "DeviceRequest",
    "FieldError",
    "Toleration",
    "capacity_requests",
    "device_class_expressions",
    "device_class_selectors",
    "parse_claim_spec",
    "read_tolerations",
    "stored_claim_spec",
    "template_claim_spec",
]

Obj = dict[str, Any]

REQUESTS_MAX: Final = 32
"""Requests in a claim spec (resource.k8s.io DeviceRequestsMaxSize)."""
SUBREQUESTS_MAX: Final = 8
"""Subrequests in a ``firstAvailable`` list (FirstAvailableDeviceRequestMaxSize)."""
SELECTORS_MAX: Final = 32
"""Selectors of a request, a subrequest or a DeviceClass (DeviceSelectorsMaxSize)."""


def _too_many(value: list[Any], limit: int) -> str:
    return f"must have at most {limit} items, not {len(value):,}"


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
        elif len(raw_requests) > REQUESTS_MAX:
            message = _too_many(raw_requests, REQUESTS_MAX)
            errors = (FieldError(f"{devices_path}.requests", message),)
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
        _constraints(constraints, f"{devices_path}.constraints") if constraints else (),
        _configs(config, f"{devices_path}.config") if config else (),
        errors,
        bool(errors or found),
    )


def stored_claim_spec(obj: Mapping[str, Any], template: bool) -> ClaimSpec | None:
    """The claim spec of a stored ResourceClaim (a ResourceClaimTemplate's, `template`), or
    None when it cannot be read: its own admission answered for it."""
    try:
        if template:
            inner, path = template_claim_spec(dict(obj))
        else:
            inner, path = obj.get("spec"), "spec"
    except ObjectShapeError:
        return None
    parsed = parse_claim_spec(inner, path)
    return None if parsed.malformed else parsed


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
        readers = COUNTING if item is None else BOTH
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
    if len(value) > SUBREQUESTS_MAX:
        found.append(FieldError(path, _too_many(value, SUBREQUESTS_MAX)))
        return Branch((), (found[-1],))
    alternatives = []
    for index, sub in enumerate(value):
        sub_path = f"{path}[{index}]"
        if type(sub) is not dict:
            # the selector check reads a null subrequest as an empty one
            readers = COUNTING if sub is None else BOTH
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
    # (capacity quotas count the amounts: a bad one is theirs to deny too)
    errors.extend(FieldError(where, message, SELECTING | CAPACITY) for where, message in bad)
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
    if len(value) > SELECTORS_MAX:
        errors.append(FieldError(path, _too_many(value, SELECTORS_MAX), SELECTING))
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


# -- a request's and a spec's members ---------------------------------------------------------


def _names(value: Any) -> tuple[str, ...]:
    return tuple(r for r in value if isinstance(r, str)) if type(value) is list else ()


def _constraints(value: Any, path: str) -> tuple[Constraint, ...]:
    if type(value) is not list:
        return ()
    out = []
    for index, entry in enumerate(value):
        if type(entry) is not dict:
            continue
        match = entry.get("matchAttribute")
        distinct = entry.get("distinctAttribute")
        out.append(
            Constraint(
                f"{path}[{index}]",
                _names(entry.get("requests")),
                match if isinstance(match, str) else None,
                distinct if isinstance(distinct, str) else None,
            )
        )
    return tuple(out)


def _configs(value: Any, path: str) -> tuple[Config, ...]:
    if type(value) is not list:
        return ()
    out = []
    for index, entry in enumerate(value):
        if type(entry) is not dict:
            continue
        opaque = entry.get("opaque")
        driver = opaque.get("driver") if type(opaque) is dict else None
        out.append(
            Config(
                f"{path}[{index}]",
                _names(entry.get("requests")),
                driver if isinstance(driver, str) else None,
                opaque.get("parameters") if type(opaque) is dict else None,
            )
        )
    return tuple(out)


def capacity_requests(
    value: Any, path: str
) -> tuple[Mapping[str, Quantity], tuple[tuple[str, str], ...]]:
    """``capacity.requests`` as quantities, and a (path, message) per amount that is not a
    quantity or is negative (those are left out of the mapping)."""
    if type(value) is not dict or not value:
        return {}, ()
    out: dict[str, Quantity] = {}
    errors: list[tuple[str, str]] = []
    for name, amount in value.items():
        where = f"{path}[{name}]"
        if not isinstance(name, str) or not name:
            errors.append((path, "capacity names must be non-empty strings"))
            continue
        if not isinstance(amount, (str, int, float)) or isinstance(amount, bool):
            errors.append((where, "must be a quantity"))
            continue
        try:
            quantity = parse_quantity(amount)
        except QuantityError:
            errors.append((where, f"must be a quantity, not {amount!r}"))
            continue
        if quantity.sign() < 0:
            errors.append((where, f"must not be negative, not {amount}"))
            continue
        out[str(name)] = quantity
    return out, tuple(errors)


def read_tolerations(value: Any) -> tuple[Toleration, ...]:
    """The well-formed entries of a ``tolerations`` list (the API server validated them)."""
    if type(value) is not list:
        return ()
    out = []
    for entry in value:
        if type(entry) is not dict:
            continue
        fields = [entry.get(k) for k in ("key", "operator", "value", "effect")]
        key, operator, text, effect = (f if isinstance(f, str) else "" for f in fields)
        out.append(Toleration(key, operator or "Equal", text, effect))
    return tuple(out)
