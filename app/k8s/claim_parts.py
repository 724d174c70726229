"""The parts of a claim spec beside its requests' class and selectors: constraints, opaque
config, capacity requests and tolerations, as frozen values with their field paths.

Read by :mod:`app.k8s.claims` (the claim model re-exports the types) and, through it, by the
allocation model. Like the rest of the claim model nothing here raises: a malformed part is
skipped or kept neutral, with a :class:`~app.k8s.claims.FieldError`-shaped ``(path, message)``
pair returned for the readers that must stop on it.

What the API server checks and what it leaves to us (tried on 1.36.2, DESIGN "Consumable
capacity"): tolerations and constraints are validated before admission, so a malformed one only
reaches us from an offline file; ``capacity.requests`` is not validated at all (``-1Gi``, ``0``,
``lots``, any key are stored), so its amounts are parsed here and a bad one is an error.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from app.k8s.quantity import Quantity, QuantityError, parse_quantity

__all__ = [
    "Config",
    "Constraint",
    "Toleration",
    "capacity_requests",
    "configs",
    "constraints",
    "tolerations",
]


@dataclass(slots=True)
class Constraint:
    path: Final[str]
    requests: Final[tuple[str, ...]]
    match_attribute: Final[str | None]
    distinct_attribute: Final[str | None]

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


def _names(value: Any) -> tuple[str, ...]:
    return tuple(r for r in value if isinstance(r, str)) if type(value) is list else ()


def constraints(value: Any, path: str) -> tuple[Constraint, ...]:
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


def configs(value: Any, path: str) -> tuple[Config, ...]:
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
        if not isinstance(amount, (str, int)) or isinstance(amount, bool):
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


def tolerations(value: Any) -> tuple[Toleration, ...]:
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
