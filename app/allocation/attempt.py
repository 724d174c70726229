"""One scheduling attempt over the cluster's nodes: the search on each, the first error failing
the pod.

kube-scheduler's DRA plugin runs upstream's ``Allocate`` in its Filter for every node (every
node of a cluster under 100 nodes); an error that is not ``ErrFailedAllocationOnNode`` (a CEL
runtime error, a claim over the device limit, an ``allocationMode: All`` request on a node with
an incomplete or invalid pool) is an error status there, which ends the scheduling attempt:
the pod is retried with backoff (SchedulerError), whatever the other nodes offer. :func:`scan`
runs :class:`~app.allocation.search.Search` node by node the same way, and skips what cannot
change its answer (see there).
"""

from __future__ import annotations

from collections.abc import Sequence

from app.allocation.inventory import Inventory
from app.allocation.plans import (
    ALLOCATION_RESULTS_MAX_SIZE,
    Abort,
    ClaimPlan,
    over_by_count,
    short,
)
from app.allocation.search import Search
from app.allocation.state import Allocations

__all__ = ["scan"]


def scan(
    plans: Sequence[ClaimPlan],
    inventory: Inventory,
    allocations: Allocations | None,
    *,
    ignore_taints: bool = False,
    every: bool = False,
    limit: int = ALLOCATION_RESULTS_MAX_SIZE,
) -> tuple[list[str], Abort | None]:
    """The nodes that can take every claim (the first one only, unless ``every``), and the error
    the scheduler would abort the pod on (a CEL runtime error, a claim over the device limit, an
    ``All`` request on a node with an incomplete or invalid pool). It filters every node (in a
    cluster under 100 nodes), and an error on any one of them fails the scheduling attempt,
    whatever the other nodes offer.

    When no selector errs, no ``All`` request meets an unusable pool and the wants know their
    totals, it searches no node for a request that matches fewer devices in the whole cluster
    than any of its alternatives needs (a node holds a part of the cluster's devices), and
    builds no search on a node with fewer devices than one request needs: both are answers the
    search itself would give there (its :meth:`Search._could`), without looking at a device.
    When a selector errs, each node's search also tries the devices of its
    ``perDeviceNodeSelection`` slices that do not reach it (:meth:`Inventory.ordered`)."""
    possible: list[str] = []
    wants = [w for p in plans for r in p.requests for w in r.alternatives]
    erring = any(w.erring for w in wants)
    # A node with an incomplete or invalid pool fails an All want there (the pod), and some node
    # may have more devices for an All want than a claim holds: every node is then searched,
    # even after one that can take the claims.
    whole = [w for w in wants if w.alternative.all_devices]
    broken = bool(whole) and bool(inventory.broken)
    crowded = broken or any(w.total is None or w.total > limit for w in whole)
    least = 0
    if not erring and not broken and all(w.total is not None for w in wants):
        over = over_by_count(plans, limit)
        if over is not None:
            return possible, over  # on every node
        if not crowded and any(short(r) for p in plans for r in p.requests):
            return possible, None
        least = max(
            (
                min((w.alternative.needed for w in r.alternatives), default=0)
                for p in plans
                for r in p.requests
            ),
            default=0,
        )
    for node, candidates in inventory.nodes.items():
        if len(candidates) < least:
            continue
        try:
            search = Search(
                plans,
                inventory.ordered(node) if erring else candidates,
                allocations,
                pools=inventory.pools.get(node, ()),
                ignore_taints=ignore_taints,
                node=node,
                limit=limit,
            )
            if search.run():
                possible.append(node)
                if not erring and not crowded and not every:
                    break  # no other node can abort the pod
        except Abort as abort:
            return [], abort
    return possible, None
