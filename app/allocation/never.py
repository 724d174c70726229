"""Why the claims can be allocated on no node, even with every device free ("never").

Request by request, the search is asked again with one thing relaxed:

- short in the whole cluster: which selector leaves too few devices, and what the devices offer
  instead ("largest gpu.nvidia.com/memory is 80Gi"), read only from the nodes the few matching
  devices' slices name;
- per node: "asks for 4 devices on one node; the most on any node is 2 (node-a, node-b)";
- taints: "3 of 4 matching devices carry taint nvidia.com/unhealthy:NoSchedule";
- capacity: no matching device offers the amount, or its request policy caps it;
- shared counters: the matching devices draw on the same counter set (a GPU and its MIG
  partitions);
- constraints: "constraint matchAttribute gpu.nvidia.com/uuid ..." when every request can be
  met alone and all together but for that constraint;
- the device limit of a claim: the requests fit together only as more devices than a claim
  holds (a firstAvailable alternative that would pass it is not tried);
- ``allocationMode: All`` with capacity: its devices are fixed before the search, and the
  pod's other requests leave one of them without what it needs.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from app.allocation.attempt import scan
from app.allocation.capacity import fits
from app.allocation.explain import (
    MAX_HINT_VALUES,
    MAX_NODES_NAMED,
    Offers,
    Problem,
    Resolved,
    asks,
    devices,
    nodes,
    searched,
    usable,
)
from app.allocation.inventory import Candidate, Inventory
from app.allocation.plans import ALLOCATION_RESULTS_MAX_SIZE, ClaimPlan, RequestPlan, Want
from app.allocation.search import taint_prevents
from app.cel.cost import Budget
from app.devices.index import DeviceIndex, Match
from app.k8s.claims import Alternative

__all__ = ["never", "short_text"]

UNLIMITED = 1 << 30
"""A device limit no claim reaches: the search as if a claim could hold any number."""


def never(
    resolved: Resolved, inventory: Inventory, index: DeviceIndex, budget: Budget | None
) -> list[Problem]:
    problems = []
    for plan in resolved.plans:
        for request in plan.requests:
            alone = [ClaimPlan(plan.label, plan.path, (request,), (), plan.counters_back)]
            if searched(resolved, alone) or not scan(alone, inventory, None)[0]:
                text = _request_never(request, resolved, inventory, index, budget)
                problems.append(Problem(request.path, text))
    if problems:
        return problems
    loose = [ClaimPlan(p.label, p.path, p.requests, (), p.counters_back) for p in resolved.plans]
    if scan(loose, inventory, None)[0]:
        for i, plan in enumerate(resolved.plans):
            for constraint in plan.constraints:
                one = list(loose)
                one[i] = replace(plan, constraints=(constraint,))
                if not scan(one, inventory, None)[0]:
                    problems.append(Problem(constraint.path, _constraint_text(constraint)))
        if problems:
            return problems
        where = resolved.plans[0].path
        return [Problem(where, "the constraints together cannot be met on any node")]
    requests = [r for p in resolved.plans for r in p.requests]
    where = resolved.plans[0].path if len(resolved.plans) == 1 else "spec.resourceClaims"
    what = "requests" if len(resolved.plans) == 1 else "claims"
    if scan(loose, inventory, None, limit=UNLIMITED)[0]:
        limit = ALLOCATION_RESULTS_MAX_SIZE
        return [
            Problem(
                where,
                f"its {what} fit together on a node only with more than {limit} devices in "
                f"one claim: a claim holds at most {limit} (AllocationResultsMaxSize), and the "
                f"scheduler takes a firstAvailable alternative only while its claim stays "
                "within that",
            )
        ]
    fixed = [w for r in requests for w in r.alternatives if _all_shares(w)]
    if fixed:
        want = fixed[0]
        asked = ", ".join(f"{k}: {v}" for k, v in want.alternative.capacity_requests.items())
        return [
            Problem(
                want.path,
                f"{asks(want.alternative)} with capacity {{{asked}}}: the scheduler fixes those "
                f"devices before the search and must then give each of them a share, but the "
                f"pod's other {what} take a device or the capacity one of them needs",
            )
        ]
    return [
        Problem(
            where,
            f"each of the {len(requests)} requests can be satisfied on some node, but no node "
            f"has enough devices for all of them together (a pod's {what} are allocated on "
            "one node)",
        )
    ]


def _all_shares(want: Want) -> bool:
    return want.alternative.all_devices and bool(want.alternative.capacity_requests)


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


def _per_node(
    want: Want, inventory: Inventory, needed: int
) -> tuple[dict[str, list[Candidate]], int, list[str] | None]:
    """:func:`~app.allocation.explain.usable`, stopping early when no node has ``needed``
    devices at all: then the most on any node is at most the largest node's size, and once more
    nodes than a message names hold that many (in name order) and ``needed`` distinct devices
    were seen, the rest cannot change the answer. Returns those nodes (None when every node
    was read)."""
    largest = max((len(c) for c in inventory.nodes.values()), default=0)
    if want.total is None or largest >= needed:
        return (*usable(want, inventory), None)
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
    """:func:`~app.allocation.explain.usable`'s count for a match of fewer devices than the
    request needs, reading only the nodes their slices name (every node when a slice names
    none)."""
    if match.count == 0:
        return 0
    slices = index.by_name()
    keys: set[tuple[str, str, str]] = set()
    for device in match.devices:
        indexed = slices.get(device.slice_name)
        spec = indexed.raw.get("spec") if indexed is not None else None
        if not isinstance(spec, Mapping) or spec.get("perDeviceNodeSelection") is True:
            return usable(want, inventory)[1]
        node = spec.get("nodeName")
        if not isinstance(node, str) or not node or node not in inventory.nodes:
            return usable(want, inventory)[1]  # a slice that may reach any node
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
            f"{asks(alt)}, {match.count} match but only {total} are in "
            "pools the scheduler can use now (the others are incomplete or invalid)"
        )
    if total < needed:
        return short_text(
            alt, class_expressions, index, total, budget=budget, offers=resolved.offers
        )
    if best is not None:
        return (
            f"asks for {devices(needed)} on one node; the most on any node is "
            f"{len(per_node[best[0]])} ({nodes(best)})"
        )
    most = max(len(found) for found in per_node.values())
    if most < needed:
        best = sorted(n for n, found in per_node.items() if len(found) == most)
        return (
            f"asks for {devices(needed)} on one node; the most on any node is {most} "
            f"({nodes(best)})"
        )
    alone = [ClaimPlan("", "", (RequestPlan(want.request, want.path, (want,)),), ())]
    distinct = {c.key: c for found in per_node.values() for c in found}
    if scan(alone, inventory, None, ignore_taints=True)[0] or alt.all_devices:
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
                f"{asks(alt)}: {count} of {total} matching devices carry taint "
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
                f"{asks(alt)} with capacity {{{asked}}}: none of the {total} matching devices "
                f"can give it ({_capacity_offered(distinct.values(), alt)})"
            )
        most_fitting = max(sum(1 for c in f if c.key in fitting) for f in per_node.values())
        if most_fitting < needed:
            return (
                f"{asks(alt)} with capacity {{{asked}}} on one node; the most on any node "
                f"is {most_fitting}"
            )
    sets = Counter(s for c in distinct.values() for s, _ in c.consumes)
    if sets:
        return (
            f"{asks(alt)} on one node, but the matching devices draw on shared counters "
            f"({', '.join(sorted(sets)[:MAX_HINT_VALUES])}): a whole GPU and its partitions, "
            "or overlapping partitions, cannot be allocated together"
        )
    return f"{asks(alt)}; no node can allocate them together"


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


def short_text(
    alt: Alternative,
    class_expressions: Sequence[str],
    index: DeviceIndex,
    matched: int,
    *,
    budget: Budget | None = None,
    offers: Offers | None = None,
) -> str:
    base = index.matching(alt.device_class, class_expressions, budget=budget)
    wanted = devices(alt.needed)
    if base.count == 0:
        text = (
            f"no device in the cluster matches DeviceClass {alt.device_class} "
            f"({base.considered} devices published)"
        )
        return text + (f"; first error: {base.first_error}" if base.first_error else "")
    if not alt.selectors:
        # the class alone decides: no selector to blame
        part = (
            ""
            if matched == base.count
            else f", only {matched} of them usable (on a node, in a complete and valid pool)"
        )
        return f"asks for {wanted}, the whole cluster has {devices(base.count)} of the class{part}"
    blockers = []
    for _, expression in alt.selectors:
        alone = index.matching(alt.device_class, class_expressions, [expression], budget)
        if alone.count < alt.needed:
            offered = (offers or Offers(0)).text(
                expression, base, (alt.device_class, tuple(class_expressions))
            )
            blockers.append(
                f"{offered}{alone.count} of the {base.count} devices of class {alt.device_class} "
                f"match {expression!r}"
            )
    if not blockers:
        blockers.append(
            f"each selector matches enough of the {base.count} devices of class "
            f"{alt.device_class}, but only {matched} match all of them"
        )
    return f"asks for {wanted}, {matched} can match: " + "; ".join(blockers)
