"""The nearest miss: why the claims cannot be allocated, in the terms of the claim.

Each cause is found by asking the search again with one thing relaxed, request by request; the
answers are worded per verdict, in :mod:`~app.allocation.never` (on no node, even with every
device free) and :mod:`~app.allocation.not_now` (what other claims hold). This module holds what
both use: the values they answer with, the words every cause is put in, the matching devices in
usable pools, what a class's devices offer for what a selector reads ("largest
gpu.nvidia.com/memory is 80Gi", kept per class and path while the class's match stands:
:class:`Offers`), and the causes of either verdict that stop the scheduler outright
(:func:`cel_abort`): a CEL runtime error, a claim over the device limit (:func:`over_limit`), an
``allocationMode: All`` request on a node with an incomplete or invalid pool
(:func:`unusable_pool`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from app.allocation.inventory import Candidate, Inventory
from app.allocation.plans import (
    ALLOCATION_RESULTS_MAX_SIZE,
    Abort,
    ClaimPlan,
    OverLimit,
    RequestPlan,
    SelectorError,
    UnusablePool,
    Want,
)
from app.bounded import BoundedCache, CacheName
from app.cel import syntax
from app.cel.cost import Budget
from app.cel.device import Device
from app.devices.index import DeviceIndex, Match
from app.k8s.claims import Alternative

__all__ = [
    "EXHAUSTED",
    "MAX_HINT_VALUES",
    "OFFERS_KEPT",
    "Offers",
    "Problem",
    "Resolved",
    "asks",
    "cel_abort",
    "class_gap",
    "devices",
    "held_error",
    "nodes",
    "over_limit",
    "searched",
    "unusable_pool",
    "usable",
]

MAX_NODES_NAMED: Final = 5
MAX_HINT_VALUES: Final = 5
OFFERS_KEPT: Final = 64
"""Class + path pairs whose offers are kept."""
EXHAUSTED: Final = (
    "satisfiability not checked: the claim has too many device combinations to try here "
    "(the scheduler will try them)"
)


@dataclass(frozen=True, slots=True)
class Problem:
    path: str
    message: str


@dataclass(frozen=True, slots=True)
class Resolved:
    """The claims as plans, with what the explanation needs of each alternative."""

    plans: tuple[ClaimPlan, ...]
    matches: Mapping[int, tuple[Alternative, Match, tuple[str, ...]]]
    """id(Want) -> (alternative, its match, its class's expressions)."""
    offers: Offers = field(default_factory=lambda: Offers(0))
    """What the devices of a class offer, kept across checks (the model's)."""


def devices(n: int) -> str:
    return f"{n} device{'s' if n != 1 else ''}"


def asks(alt: Alternative) -> str:
    if alt.all_devices:
        return "asks for all matching devices (allocationMode All)"
    return f"asks for {devices(alt.count)}"


def _node(name: str) -> str:
    return name or "any node without devices of its own"


def nodes(names: Sequence[str]) -> str:
    shown = [_node(n) for n in names[:MAX_NODES_NAMED]]
    more = ", ..." if len(names) > MAX_NODES_NAMED else ""
    return ", ".join(shown) + more


def class_gap(alt: Alternative, gap: str) -> str:
    return (
        f"satisfiability not checked: {gap} is not supported by this webhook's CEL engine "
        f"(the API server still compiles it) in a selector of DeviceClass {alt.device_class}"
    )


def usable(want: Want, inventory: Inventory) -> tuple[dict[str, list[Candidate]], int]:
    """Matching devices in usable pools per node, and how many distinct ones in all."""
    per_node: dict[str, list[Candidate]] = {}
    keys: set[tuple[str, str, str]] = set()
    matched = want.matched
    for node, candidates in inventory.nodes.items():
        found = [
            c
            for c in candidates
            if not c.pool.incomplete
            and c.pool.invalid is None
            and (c.device.slice_name, c.device.name) in matched
        ]
        per_node[node] = found
        keys.update(c.key for c in found)
    return per_node, len(keys)


def searched(resolved: Resolved, alone: Sequence[ClaimPlan]) -> bool:
    """Whether ``alone`` is the search that already failed (one claim of one request, no
    constraint): no need to run it again."""
    known = all(w.total is not None for p in alone for r in p.requests for w in r.alternatives)
    return known and len(resolved.plans) == 1 and list(resolved.plans) == list(alone)


class Offers:
    """What the devices of a class offer for each path a selector reads, kept per class and
    path for the class's current match (a slice change makes a new match: read again). An
    impossible shape of a class then costs what a possible one does, not a read of every
    device. Bounded (an LRU counted in /metrics); an entry holds the match it was read from."""

    def __init__(self, size: int = OFFERS_KEPT) -> None:
        self._kept: BoundedCache[tuple[Any, ...], tuple[Match, str | None]] | None = (
            BoundedCache(CacheName.NEAREST_MISS_OFFERS, size) if size > 0 else None
        )

    def text(
        self, expression: str, base: Match, key: tuple[str, tuple[str, ...]] | None = None
    ) -> str:
        """What ``base``'s devices offer for the paths ``expression`` reads ("largest
        gpu.nvidia.com/memory is 80Gi; "), each path's text kept under ``key`` (the class
        name and expressions; None, or an ``Offers(0)``: not kept)."""
        hints = []
        seen = set()
        for path in syntax.device_paths(expression):
            keys = path.keys
            if len(keys) < 3 or None in keys[:3] or keys[:3] in seen:
                continue
            seen.add(keys[:3])
            kind, domain, name = str(keys[0]), str(keys[1]), str(keys[2])
            kept = self._kept if key is not None else None
            found = kept.get((key, kind, domain, name)) if kept is not None else None
            if found is None or found[0] is not base:
                found = (base, _offered(kind, domain, name, base.devices))
                if kept is not None:
                    kept.put((key, kind, domain, name), found)
            if found[1] is not None:
                hints.append(found[1])
        return "".join(f"{h}; " for h in hints)


def _offered(kind: str, domain: str, name: str, among: Sequence[Device]) -> str | None:
    if kind == "capacity":
        quantities = _distinct(d.capacity.get(domain, {}).get(name) for d in among)
        return (
            f"largest {domain}/{name} is {max(quantities)}"
            if quantities
            else f"no device has capacity {domain}/{name}"
        )
    if kind == "attributes":
        values = {str(v) for v in _distinct(d.attributes.get(domain, {}).get(name) for d in among)}
        if not values:
            return f"no device has attribute {domain}/{name}"
        shown = sorted(values)[:MAX_HINT_VALUES]
        more = ", ..." if len(values) > MAX_HINT_VALUES else ""
        return f"{domain}/{name} is {', '.join(shown)}{more}"
    return None


def _distinct(values: Iterable[Any]) -> list[Any]:
    """The values that are not None, each object once, in first-seen order: quantities and
    attribute values are shared between devices (parsed once per text), so the comparisons
    and conversions that follow run once per distinct value, not once per device."""
    seen: dict[int, Any] = {}
    for value in values:
        if value is not None and id(value) not in seen:
            seen[id(value)] = value
    return list(seen.values())


_MISSING_KEY = re.compile(
    r'no such key: ([\w.-]+)|Key not found in map : "([^"]+)"|no such member in mapping: .([^\']+).'
)
_SELECTOR = re.compile(r"selector #(\d+): ")


def cel_abort(
    abort: Abort, resolved: Resolved, index: DeviceIndex, budget: Budget | None = None
) -> Problem:
    """An error the scheduler would stop on: a claim over the device limit
    (:func:`over_limit`), an ``All`` request on a node with an unusable pool
    (:func:`unusable_pool`), or a CEL runtime error (``selectorsMatch``), with what the devices
    offer for what the selector reads, and the guard that avoids the error."""
    if isinstance(abort, OverLimit):
        return over_limit(abort)
    if isinstance(abort, UnusablePool):
        return unusable_pool(abort)
    assert isinstance(abort, SelectorError)
    alt, erring, offered, hint = _selector_error(abort, resolved, index, budget)
    return Problem(
        abort.want.path,
        f"{asks(alt)}, but {erring}{'; ' + offered if offered else ''}; the scheduler aborts "
        f"the whole pod on a CEL runtime error (SchedulerError) instead of trying other "
        f"devices{hint}",
    )


def held_error(
    abort: SelectorError, resolved: Resolved, index: DeviceIndex, budget: Budget | None = None
) -> Problem:
    """A CEL runtime error only on devices other claims hold: the scheduler skips a device in
    use before its selectors run (``allocateOne``), so it does not abort now, but it will when
    the device is free and the search reaches it."""
    _, erring, _, hint = _selector_error(abort, resolved, index, budget)
    return Problem(
        abort.want.path,
        f"{erring}, which another claim holds: the scheduler skips it before its selectors run "
        "now, and aborts the whole pod on the error (SchedulerError) if the device is free "
        f"when it is tried{hint}",
    )


def _selector_error(
    abort: SelectorError, resolved: Resolved, index: DeviceIndex, budget: Budget | None
) -> tuple[Alternative, str, str, str]:
    """(the alternative, "its selector #0 errs on device d (error)", what the class's devices
    offer for what the selector reads, the guard that avoids a missing key)."""
    alt, _, class_expressions = resolved.matches[id(abort.want)]
    message = abort.message
    of_class = message.startswith("class ")
    rest = message.split(": ", 1)[1] if of_class else message
    found = _SELECTOR.match(rest)
    number = int(found.group(1)) if found else 0
    error = rest[found.end() if found else 0 :]
    expressions = class_expressions if of_class else tuple(e for _, e in alt.selectors)
    expression = expressions[number] if number < len(expressions) else ""
    hint = ""
    missing = _MISSING_KEY.search(error)
    if missing is not None and expression:
        key = missing.group(1) or missing.group(2) or missing.group(3)
        read = re.search(r'device\.attributes\["([^"]+)"\]\.' + re.escape(key), expression)
        if read is not None:
            hint = f'; guard it: "{key}" in device.attributes["{read.group(1)}"] && {expression}'
    offered = ""
    if expression:
        base = index.matching(alt.device_class, class_expressions, budget=budget)
        key = (alt.device_class, tuple(class_expressions))
        offered = resolved.offers.text(expression, base, key).rstrip("; ")
    whose = f"DeviceClass {alt.device_class}'s" if of_class else "its"
    return alt, f"{whose} selector #{number} errs on device {abort.device} ({error})", offered, hint


def over_limit(abort: OverLimit) -> Problem:
    """A claim needing more devices than an allocation holds, at the request that asks for
    them (at the claim's requests when only their sum does): the scheduler fails the pod with
    an error instead of allocating it, and API validation let the claim through."""
    limit = ALLOCATION_RESULTS_MAX_SIZE
    why = (
        f"but a claim holds at most {limit} devices (AllocationResultsMaxSize): the scheduler "
        "fails the pod with an error (SchedulerError) instead of allocating it"
    )
    claim = abort.claim
    asking = [(r, n) for r, n in zip(claim.requests, abort.counts, strict=True) if n]
    alone = [(r, n) for r, n in asking if n > limit]
    if len(alone) == 1 or len(asking) == 1:
        request, count = (alone or asking)[0]
        return Problem(request.path, f"{_asks_for(request, count, abort.node)}, {why}")
    on = f" (on {_node(abort.node or '')})"
    parts = ", ".join(f"{_name(r)} {n}{on if _all(r) else ''}" for r, n in asking)
    return Problem(
        f"{claim.path}.devices.requests",
        f"its requests need {sum(abort.counts)} devices together ({parts}), {why}",
    )


def unusable_pool(abort: UnusablePool) -> Problem:
    """An ``All`` request on a node that gathered an incomplete or invalid pool (of any driver):
    "all" cannot be known there, and the scheduler fails the pod rather than the node. Short:
    a warning is cut at 256 characters."""
    pool = abort.pool
    why = (
        "incomplete (its driver is updating it)" if pool.incomplete else f"invalid ({pool.invalid})"
    )
    return Problem(
        abort.want.path,
        f"{asks(abort.want.alternative)}, but resource pool {pool.label} on "
        f"{_node(abort.node or '')} is {why}: the scheduler fails the pod (SchedulerError), "
        "whatever other nodes offer",
    )


def _asks_for(request: RequestPlan, count: int, node: str | None) -> str:
    if request.first_available:
        return (
            f"asks for at least {devices(count)} (the fewest any of its "
            f"{len(request.alternatives)} firstAvailable alternatives takes)"
        )
    if _all(request):
        return (
            f"asks for all matching devices (allocationMode All), and {count} match on "
            f"{_node(node or '')}"
        )
    return f"asks for {devices(count)}"


def _all(request: RequestPlan) -> bool:
    return any(w.alternative.all_devices for w in request.alternatives)


def _name(request: RequestPlan) -> str:
    return request.name or request.path.rsplit(".", 1)[-1]
