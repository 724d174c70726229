"""What keeps the claims from a node now ("not now"): the devices, counters and capacity other
claims hold ("counter set gpu-0-counter-set has 1 of 7 memory slices left", "device
gpu.nvidia.com/node-a/gpu-0 has 2Gi of 80Gi gpu.nvidia.com/memory left").

Amounts are printed as the API prints quantities (canonical form, in the suffix family of the
total: ``2Gi of 18Gi``, never ``2147483648``), and never below zero: a counter or capacity that
allocated devices overdraw (a slice republished smaller, shares over a shrunken capacity) has
nothing left, and the text says by how much it is overdrawn."""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from app.allocation.attempt import scan
from app.allocation.counters import Counters
from app.allocation.explain import (
    MAX_HINT_VALUES,
    Problem,
    Resolved,
    cel_abort,
    held_error,
    searched,
    usable,
)
from app.allocation.inventory import DeviceKey, Inventory
from app.allocation.plans import Abort, ClaimPlan, SelectorError, Want
from app.allocation.state import Allocations
from app.devices.index import DeviceIndex
from app.k8s.quantity import Quantity

__all__ = ["held_devices", "left_text", "not_now"]


def not_now(
    resolved: Resolved,
    inventory: Inventory,
    allocations: Allocations,
    abort: Abort | None,
    index: DeviceIndex,
    *,
    held: Abort | None = None,
) -> list[Problem]:
    """Why the claims cannot be allocated now: ``abort``, the error the scheduler stops on now
    (a search that goes past the devices other claims hold reaches it), or what they hold.
    ``held`` is an error only the search as if every device were free reaches: on a device
    another claim holds, which the scheduler skips before its selectors run; it is said too."""
    if abort is not None:
        problem = cel_abort(abort, resolved, index)
        return [Problem(problem.path, f"not now: {problem.message}")]
    problems = []
    for plan in resolved.plans:
        for request in plan.requests:
            alone = [ClaimPlan(plan.label, plan.path, (request,), (), plan.counters_back)]
            if not searched(resolved, alone) and scan(alone, inventory, allocations)[0]:
                continue
            texts = [_want_not_now(w, inventory, allocations) for w in request.alternatives]
            problems.append(Problem(request.path, "not now: " + "; ".join(texts)))
    if isinstance(held, SelectorError):
        problem = held_error(held, resolved, index)
        problems.append(Problem(problem.path, f"not now: {problem.message}"))
    if problems:
        return problems
    where = resolved.plans[0].path if len(resolved.plans) == 1 else "spec.resourceClaims"
    return [
        Problem(where, "not now: the free devices cannot satisfy all requests together on one node")
    ]


def held_devices(
    resolved: Resolved, inventory: Inventory, allocations: Allocations
) -> frozenset[DeviceKey]:
    """The devices the claims could use that other claims hold now (whole or in part): whose
    holders would have to go for them to be allocated. A preemptor's question (app.policies.
    preemption): are those holders of lower priority? DRA will not evict them."""
    held: set[DeviceKey] = set()
    for plan in resolved.plans:
        for request in plan.requests:
            for want in request.alternatives:
                per_node, _ = usable(want, inventory)
                held.update(
                    c.key for found in per_node.values() for c in found if allocations.taken(c.key)
                )
    return frozenset(held)


def _want_not_now(want: Want, inventory: Inventory, allocations: Allocations) -> str:
    per_node, total = usable(want, inventory)
    distinct = {c.key: c for found in per_node.values() for c in found}
    taken = sum(1 for key in distinct if key in allocations.whole)
    parts = [f"{taken} of {total} matching devices are allocated to other claims"]
    pools = Counters(allocations)
    reported = set()
    for c in distinct.values():
        if len(parts) > MAX_HINT_VALUES:
            break  # (no more is shown)
        if c.key in allocations.whole or not c.consumes:
            continue
        available = pools.available(c.pool)
        for set_name, counters in c.consumes:
            if (c.pool.label, set_name) in reported:
                continue
            short = any(
                available.get((set_name, n), Fraction(0)) < q.value for n, q in counters.items()
            )
            if short:
                reported.add((c.pool.label, set_name))
                parts.append(_counter_set_text(set_name, c.pool.counter_sets, available))
    for c in distinct.values() if want.alternative.capacity_requests else ():
        if len(parts) > MAX_HINT_VALUES:
            break
        used = allocations.shared.get(c.key)
        if used:
            for name, amount in used.items():
                spec = c.capacity.get(name)
                if spec is not None:
                    left = spec.value.value - amount.value
                    parts.append(f"device {c.label} has {left_text(left, spec.value, name)}")
                    break
    return "; ".join(parts[: 1 + MAX_HINT_VALUES])


def _counter_set_text(
    set_name: str,
    counter_sets: Mapping[str, Mapping[str, Any]],
    available: Mapping[tuple[str, str], int | Fraction],
) -> str:
    counters = counter_sets.get(set_name, {})
    slices = [n for n in counters if n.startswith("memory-slice")]
    if slices:
        left = sum(1 for n in slices if available.get((set_name, n), Fraction(0)) > 0)
        return f"counter set {set_name} has {left} of {len(slices)} memory slices left"
    worst = min(
        counters,
        key=lambda n: available.get((set_name, n), Fraction(0)) / (counters[n].value or 1),
        default=None,
    )
    if worst is None:
        return f"counter set {set_name} is used up"
    remaining = available.get((set_name, worst), Fraction(0))
    return f"counter set {set_name} has {left_text(remaining, counters[worst], worst)}"


def left_text(left: int | Fraction, total: Quantity, name: str) -> str:
    """``2Gi of 18Gi memory left``: what is ``left`` of ``total`` (a number in the total's
    units), printed as a quantity in the total's format; an overdrawn amount (below zero) is
    none left, with by how much."""
    if left < 0:
        over = Quantity(Fraction(-left), total.format)
        return f"0 of {total} {name} left (overdrawn by {over})"
    return f"{Quantity(Fraction(left), total.format)} of {total} {name} left"
