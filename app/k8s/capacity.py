"""Capacity requests of a claim (`exactly.capacity.requests`), as quota counts them.

A request on devices that allow multiple allocations asks each of its `count` devices for an
amount of some capacities (KEP-5075). The API server stores `capacity.requests` unvalidated
(`-1Gi`, `0` and any key are accepted), so this reader is where a bad amount becomes a denial
with its field path. Counting follows the device counts of `app.k8s.claims`: `exactly`, or for
`firstAvailable` the largest amount of each (class, capacity) among its alternatives;
`allocationMode: All` asks an unknown number of devices (`unbounded`).
"""

from __future__ import annotations

from dataclasses import dataclass

from app.errors import ObjectShapeError
from app.k8s.claims import COUNTING, Alternative, ClaimSpec
from app.k8s.quantity import Quantity, QuantityError, parse_quantity


@dataclass(frozen=True, slots=True)
class Ask:
    """One request's ask of one capacity: `count` devices x `amount` each."""

    path: str
    """Field path of the amount: spec.devices.requests[0].exactly.capacity.requests[memory]."""
    request: str
    device_class: str
    capacity: str
    amount: Quantity
    count: int
    unbounded: bool = False
    """allocationMode: All: every matching device, however many."""


def capacity_asks(parsed: ClaimSpec) -> tuple[Ask, ...]:
    """Every capacity ask of a claim spec; ObjectShapeError at a bad amount or shape."""
    parsed.check(COUNTING)
    found: list[Ask] = []
    for request in parsed.requests:
        member = request.counted()
        if member is None:
            continue
        asks = [ask for alt in member.alternatives for ask in _asks(request.name, alt)]
        if member is request.first_available and len(member.alternatives) > 1:
            largest: dict[tuple[str, str], Ask] = {}
            for ask in asks:
                key = (ask.device_class, ask.capacity)
                best = largest.get(key)
                if best is None or _total(ask) > _total(best):
                    largest[key] = ask
            asks = list(largest.values())
        found += asks
    return tuple(found)


def _total(ask: Ask) -> Quantity:
    return ask.amount.mul(ask.count)


def _asks(request: str, alternative: Alternative) -> list[Ask]:
    raw = alternative.capacity
    if not raw:
        return []
    found: list[Ask] = []
    base = f"{alternative.path}.capacity.requests"
    for name, value in raw.items():
        path = f"{base}[{name}]"
        if not isinstance(name, str) or not name:
            raise ObjectShapeError(base, "capacity names must be non-empty strings")
        if not isinstance(value, str | int | float) or isinstance(value, bool):
            raise ObjectShapeError(path, "must be a quantity")
        try:
            amount = parse_quantity(value)
        except QuantityError as exc:
            raise ObjectShapeError(path, f"{value!r} is not a quantity: {exc}") from None
        if amount.sign() <= 0:
            raise ObjectShapeError(path, f"{value} must be more than zero")
        found.append(
            Ask(
                path,
                alternative.name or request,
                alternative.device_class,
                name,
                amount,
                alternative.count,
                alternative.all_devices,
            )
        )
    return found
