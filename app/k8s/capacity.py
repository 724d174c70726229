"""Capacity requests of a claim (`exactly.capacity.requests`), as quota counts them.

A request on devices that allow multiple allocations asks each of its `count` devices for an
amount of some capacities (KEP-5075). The API server stores `capacity.requests` unvalidated
(`-1Gi`, `0` and any key are accepted): the claim model reads the amounts
(`app.k8s.claims.capacity_requests`, a bad one an error with its field path) and this module
only counts them; an amount of zero, which asks for nothing, is refused here. Counting follows
the device counts of `app.k8s.claims`: `exactly`, or for `firstAvailable` the largest amount of
each (class, capacity) among its alternatives; `allocationMode: All` asks an unknown number of
devices (`unbounded`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from app.errors import ObjectShapeError
from app.k8s.claims import CAPACITY, COUNTING, Alternative, ClaimSpec, capacity_requests
from app.k8s.quantity import Quantity


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
    parsed.check(COUNTING | CAPACITY)
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
    """The alternative's asks, from the amounts the claim model read (`capacity_requests`:
    the one reader of capacity quantities; a malformed amount is its error, already raised by
    `check(COUNTING)`). A share of nothing is no share: zero is refused here."""
    amounts = alternative.capacity_requests
    if not amounts:
        return []
    found: list[Ask] = []
    base = f"{alternative.path}.capacity.requests"
    for name, amount in amounts.items():
        path = f"{base}[{name}]"
        if amount.sign() <= 0:
            raise ObjectShapeError(path, f"{alternative.capacity.get(name)} must be more than zero")
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


def written_asks(
    path: str, request: str, device_class: str, amounts: Iterable[tuple[str, str]], count: int
) -> list[Ask]:
    """The asks of a claim about to be written (translation's, `amounts` from its sharing
    rule), read by the claim model's reader as a written claim's are: `count` devices x each
    amount; ObjectShapeError at `path` for an amount that is no quantity."""
    read, bad = capacity_requests(dict(amounts), f"{path}.capacity.requests")
    if bad:
        raise ObjectShapeError(*bad[0])
    return [Ask(path, request, device_class, name, amount, count) for name, amount in read.items()]
