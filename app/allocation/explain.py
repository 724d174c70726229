"""The nearest miss: why the claims cannot be allocated, in the terms of the claim.

Each cause is found by asking the search again with one thing relaxed, request by request:

- short in the whole cluster: which selector leaves too few devices, and what the devices offer
  instead ("largest gpu.nvidia.com/memory is 80Gi");
- per node: "asks for 4 devices on one node; the most on any node is 2 (node-a, node-b)";
- taints: "3 of 4 matching devices carry taint nvidia.com/unhealthy:NoSchedule";
- capacity: no matching device offers the amount, or its request policy caps it;
- shared counters: the matching devices draw on the same counter set (a GPU and its MIG
  partitions), "counter set gpu-0-counter-set has 1 of 7 memory slices left";
- constraints: "constraint matchAttribute gpu.nvidia.com/uuid ..." when every request can be
  met alone and all together but for that constraint;
- a CEL runtime error: the selector, the device, and the guard that avoids it.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Final

from app.allocation.capacity import fits
from app.allocation.inventory import Candidate, Inventory
from app.allocation.search import Abort, ClaimPlan, RequestPlan, Search, Want, scan, taint_prevents
from app.allocation.shortfall import MAX_HINT_VALUES, Offers, devices, short_text
from app.allocation.state import Allocations
from app.cel.cost import Budget
from app.devices.index import DeviceIndex, Match
from app.k8s.claims import Alternative

__all__ = ["EXHAUSTED", "Problem", "Resolved", "cel_abort", "class_gap", "never", "not_now"]

MAX_NODES_NAMED: Final = 5
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


def _asks(alt: Alternative) -> str:
    if alt.all_devices:
        return "asks for all matching devices (allocationMode All)"
    return f"asks for {devices(alt.count)}"


def _node(name: str) -> str:
    return name or "any node without devices of its own"


def _nodes(names: Sequence[str]) -> str:
    shown = [_node(n) for n in names[:MAX_NODES_NAMED]]
    more = ", ..." if len(names) > MAX_NODES_NAMED else ""
    return ", ".join(shown) + more


def class_gap(alt: Alternative, gap: str) -> str:
    return (
        f"satisfiability not checked: {gap} is not supported by this webhook's CEL engine "
        f"(the API server still compiles it) in a selector of DeviceClass {alt.device_class}"
    )


# -- CEL runtime errors ----------------------------------------------------------------------

_MISSING_KEY = re.compile(
    r'no such key: ([\w.-]+)|Key not found in map : "([^"]+)"|no such member in mapping: .([^\']+).'
)
_SELECTOR = re.compile(r"selector #(\d+): ")


def cel_abort(
    abort: Abort, resolved: Resolved, index: DeviceIndex, budget: Budget | None = None
) -> Problem:
    """A CEL runtime error the scheduler would stop on (``selectorsMatch``), with what the
    devices offer for what the selector reads, and the guard that avoids the error."""
    want = abort.want
    alt, _, class_expressions = resolved.matches[id(want)]
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
    return Problem(
        want.path,
        f"{_asks(alt)}, but {whose} selector #{number} errs on device {abort.device} ({error})"
        f"{'; ' + offered if offered else ''}; the scheduler aborts the whole pod on a CEL "
        f"runtime error (SchedulerError) instead of trying other devices{hint}",
    )


# -- never -----------------------------------------------------------------------------------


def never(
    resolved: Resolved, inventory: Inventory, index: DeviceIndex, budget: Budget | None
) -> list[Problem]:
    problems = []
    for plan in resolved.plans:
        for request in plan.requests:
            alone = [ClaimPlan(plan.label, plan.path, (request,), ())]
            if _searched(resolved, alone) or not scan(alone, inventory.nodes, None)[0]:
                text = _request_never(request, resolved, inventory, index, budget)
                problems.append(Problem(request.path, text))
    if problems:
        return problems
    loose = [ClaimPlan(p.label, p.path, p.requests, ()) for p in resolved.plans]
    if scan(loose, inventory.nodes, None)[0]:
        for i, plan in enumerate(resolved.plans):
            for constraint in plan.constraints:
                one = list(loose)
                one[i] = ClaimPlan(plan.label, plan.path, plan.requests, (constraint,))
                if not scan(one, inventory.nodes, None)[0]:
                    problems.append(Problem(constraint.path, _constraint_text(constraint)))
        if problems:
            return problems
        where = resolved.plans[0].path
        return [Problem(where, "the constraints together cannot be met on any node")]
    requests = [r for p in resolved.plans for r in p.requests]
    where = resolved.plans[0].path if len(resolved.plans) == 1 else "spec.resourceClaims"
    what = "requests" if len(resolved.plans) == 1 else "claims"
    return [
        Problem(
            where,
            f"each of the {len(requests)} requests can be satisfied on some node, but no node "
            f"has enough devices for all of them together (a pod's {what} are allocated on "
            "one node)",
        )
    ]


def _searched(resolved: Resolved, alone: Sequence[ClaimPlan]) -> bool:
    """Whether ``alone`` is the search that already failed (one claim of one request, no
    constraint): no need to run it again."""
    known = all(w.total is not None for p in alone for r in p.requests for w in r.alternatives)
    return known and len(resolved.plans) == 1 and list(resolved.plans) == list(alone)


def _constraint_text(constraint: Any) -> str:
    kind = "matchAttribute" if constraint.match_attribute else "distinctAttribute"
    name = constraint.match_attribute or constraint.distinct_attribute
    scope = f" across requests {', '.join(constraint.requests)}" if constraint.requests else ""
    same = "share one value of it" if constraint.match_attribute else "all differ in it"
    return (
        f"constraint {kind} {name}{scope}: no node has devices for these requests that "
        f"{same} (a device without the attribute never satisfies it)"
    )


def _request_never(
    request: RequestPlan,
    resolved: Resolved,
    inventory: Inventory,
    index: DeviceIndex,
    budget: Budget | None,
) -> str:
    texts = [_want_never(want, resolved, inventory, index, budget) for want in request.alternatives]
    if len(texts) == 1:
        return texts[0]
    listed = "; ".join(f"[{k}] {text}" for k, text in enumerate(texts))
    return f"none of its {len(texts)} firstAvailable alternatives can be satisfied: {listed}"


def _usable(want: Want, inventory: Inventory) -> tuple[dict[str, list[Candidate]], int]:
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


def _per_node(
    want: Want, inventory: Inventory, needed: int
) -> tuple[dict[str, list[Candidate]], int, list[str] | None]:
    """:func:`_usable`, stopping early when no node has ``needed`` devices at all: then the
    most on any node is at most the largest node's size, and once more nodes than a message
    names hold that many (in name order) and ``needed`` distinct devices were seen, the rest
    cannot change the answer. Returns those nodes (None when every node was read)."""
    largest = max((len(c) for c in inventory.nodes.values()), default=0)
    if want.total is None or largest >= needed:
        return (*_usable(want, inventory), None)
    per_node: dict[str, list[Candidate]] = {}
    keys: set[tuple[str, str, str]] = set()
    full: list[str] = []
    matched = want.matched
    for node in sorted(inventory.nodes):
        found = [
            c
            for c in inventory.nodes[node]
            if not c.pool.incomplete
            and c.pool.invalid is None
            and (c.device.slice_name, c.device.name) in matched
        ]
        per_node[node] = found
        keys.update(c.key for c in found)
        if len(found) == largest:
            full.append(node)
            if len(full) > MAX_NODES_NAMED and len(keys) >= needed:
                return per_node, len(keys), full
    return per_node, len(keys), None


def _usable_few(want: Want, match: Match, inventory: Inventory, index: DeviceIndex) -> int:
    """:func:`_usable`'s count for a match of fewer devices than the request needs, reading
    only the nodes their slices name (every node when a slice names none)."""
    if match.count == 0:
        return 0
    slices = index.by_name()
    keys: set[tuple[str, str, str]] = set()
    for device in match.devices:
        indexed = slices.get(device.slice_name)
        spec = indexed.raw.get("spec") if indexed is not None else None
        if not isinstance(spec, Mapping) or spec.get("perDeviceNodeSelection") is True:
            return _usable(want, inventory)[1]
        node = spec.get("nodeName")
        if not isinstance(node, str) or not node or node not in inventory.nodes:
            return _usable(want, inventory)[1]  # a slice that may reach any node
        keys.update(
            c.key
            for c in inventory.nodes[node]
            if c.device.slice_name == device.slice_name
            and c.device.name == device.name
            and not c.pool.incomplete
            and c.pool.invalid is None
        )
    return len(keys)


def _want_never(
    want: Want,
    resolved: Resolved,
    inventory: Inventory,
    index: DeviceIndex,
    budget: Budget | None,
) -> str:
    alt, match, class_expressions = resolved.matches[id(want)]
    needed = alt.needed
    if want.total is not None and match.count < needed:
        # short in the whole cluster: no node to look at (at most match.count are usable)
        total = _usable_few(want, match, inventory, index)
        return short_text(
            alt, class_expressions, index, total, budget=budget, offers=resolved.offers
        )
    per_node, total, best = _per_node(want, inventory, needed)
    if match.count >= needed and total < needed:
        return (
            f"{_asks(alt)}, {match.count} match but only {total} are in "
            "pools the scheduler can use now (the others are incomplete or invalid)"
        )
    if total < needed:
        return short_text(
            alt, class_expressions, index, total, budget=budget, offers=resolved.offers
        )
    if best is not None:
        return (
            f"asks for {devices(needed)} on one node; the most on any node is "
            f"{len(per_node[best[0]])} ({_nodes(best)})"
        )
    most = max(len(found) for found in per_node.values())
    if most < needed:
        best = sorted(n for n, found in per_node.items() if len(found) == most)
        return (
            f"asks for {devices(needed)} on one node; the most on any node is {most} "
            f"({_nodes(best)})"
        )
    alone = [ClaimPlan("", "", (RequestPlan(want.request, want.path, (want,)),), ())]
    distinct = {c.key: c for found in per_node.values() for c in found}
    if scan(alone, inventory.nodes, None, ignore_taints=True)[0] or alt.all_devices:
        tainted = Counter(
            _taint_text(taint)
            for c in distinct.values()
            if (taint := taint_prevents(c, alt)) is not None
        )
        if tainted:
            count = sum(tainted.values())
            name, _ = tainted.most_common(1)[0]
            others = " (and others)" if len(tainted) > 1 else ""
            return (
                f"{_asks(alt)}: {count} of {total} matching devices carry taint "
                f"{name}{others}, which the request does not tolerate"
            )
    if alt.capacity_requests:
        fitting = {
            key
            for key, c in distinct.items()
            if fits(c.key[0], c.capacity, alt.capacity_requests, None, None)
        }
        asked = ", ".join(f"{k}: {v}" for k, v in alt.capacity_requests.items())
        if not fitting:
            return (
                f"{_asks(alt)} with capacity {{{asked}}}: none of the {total} matching devices "
                f"can give it ({_capacity_offered(distinct.values(), alt)})"
            )
        most_fitting = max(sum(1 for c in f if c.key in fitting) for f in per_node.values())
        if most_fitting < needed:
            return (
                f"{_asks(alt)} with capacity {{{asked}}} on one node; the most on any node "
                f"is {most_fitting}"
            )
    sets = Counter(s for c in distinct.values() for s, _ in c.consumes)
    if sets:
        return (
            f"{_asks(alt)} on one node, but the matching devices draw on shared counters "
            f"({', '.join(sorted(sets)[:MAX_HINT_VALUES])}): a whole GPU and its partitions, "
            "or overlapping partitions, cannot be allocated together"
        )
    return f"{_asks(alt)}; no node can allocate them together"


def _taint_text(taint: Mapping[str, Any]) -> str:
    value = taint.get("value")
    return f"{taint.get('key', '')}{'=' + str(value) if value else ''}:{taint.get('effect')}"


def _capacity_offered(candidates: Any, alt: Alternative) -> str:
    parts = []
    for name in alt.capacity_requests:
        offered = []
        for c in candidates:
            qualified = name if "/" in name else f"{c.key[0]}/{name}"
            spec = c.capacity.get(qualified)
            if spec is not None:
                offered.append(spec.maximum if spec.maximum is not None else spec.value)
        parts.append(
            f"the most {name} a device allows is {max(offered)}"
            if offered
            else f"no matching device has capacity {name}"
        )
    return "; ".join(parts)


# -- not now -----------------------------------------------------------------------------------


def not_now(
    resolved: Resolved,
    inventory: Inventory,
    allocations: Allocations,
    abort: Abort | None,
    index: DeviceIndex,
) -> list[Problem]:
    if abort is not None:
        problem = cel_abort(abort, resolved, index)
        return [Problem(problem.path, f"not now: {problem.message}")]
    problems = []
    for plan in resolved.plans:
        for request in plan.requests:
            alone = [ClaimPlan(plan.label, plan.path, (request,), ())]
            if not _searched(resolved, alone) and scan(alone, inventory.nodes, allocations)[0]:
                continue
            texts = [_want_not_now(w, inventory, allocations) for w in request.alternatives]
            problems.append(Problem(request.path, "not now: " + "; ".join(texts)))
    if problems:
        return problems
    where = resolved.plans[0].path if len(resolved.plans) == 1 else "spec.resourceClaims"
    return [
        Problem(where, "not now: the free devices cannot satisfy all requests together on one node")
    ]


def _want_not_now(want: Want, inventory: Inventory, allocations: Allocations) -> str:
    per_node, total = _usable(want, inventory)
    distinct = {c.key: c for found in per_node.values() for c in found}
    taken = sum(1 for key in distinct if key in allocations.whole)
    parts = [f"{taken} of {total} matching devices are allocated to other claims"]
    search = Search([], (), allocations)
    reported = set()
    for c in distinct.values():
        if len(parts) > MAX_HINT_VALUES:
            break  # (no more is shown)
        if c.key in allocations.whole or not c.consumes:
            continue
        available = search.available_counters(c.pool)
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
                    left = spec.value - amount
                    parts.append(f"device {c.label} has {left} of {spec.value} {name} left")
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
    return f"counter set {set_name} has {remaining} of {counters[worst]} {worst} left"
