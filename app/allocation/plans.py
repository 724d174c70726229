"""What the search on one node is asked, and the errors that stop the scheduler outright.

The claims of a pod as the allocation model plans them (:class:`ClaimPlan`, :class:`RequestPlan`,
:class:`Want`: a request or subrequest with the devices its class and selectors match, as
upstream's ``requestData``), the device limit of a claim (upstream's
``resourceapi.AllocationResultsMaxSize``) with the fewest devices a request counts against it,
and the errors of ``Allocate`` that fail the whole pod rather than one node (:class:`Abort`): a
CEL runtime error (:class:`SelectorError`), a claim over the limit (:class:`OverLimit`), an
``allocationMode: All`` request on a node with an incomplete or invalid pool
(:class:`UnusablePool`). The search itself is :mod:`app.allocation.search`.
"""

from __future__ import annotations

from collections.abc import Container, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from app.allocation.pools import Pool
from app.k8s.claims import Alternative, ClaimSpec, Constraint

__all__ = [
    "ALLOCATION_RESULTS_MAX_SIZE",
    "Abort",
    "ClaimPlan",
    "DeviceRef",
    "OverLimit",
    "RequestPlan",
    "SelectorError",
    "UnusablePool",
    "Want",
    "counted",
    "fewest",
    "over_by_count",
    "short",
]

DeviceRef = tuple[str, str]
"""(slice name, device name): one device of one slice version."""
ALLOCATION_RESULTS_MAX_SIZE: Final = 32
"""The most devices one claim's allocation holds (``resourceapi.AllocationResultsMaxSize``).
API validation bounds the number of requests by it, never a request's ``count``: only the
allocator refuses a claim that needs more."""


class Abort(Exception):  # noqa: N818 (upstream's word)
    """The scheduler would stop here with an error for the whole pod: ``Allocate`` returns an
    error that is not ``ErrFailedAllocationOnNode``, the DRA plugin's Filter answers with an
    error status (SchedulerError), and the pod is retried with backoff, whatever other nodes
    offer."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class SelectorError(Abort):
    """A CEL runtime error of a class's or a request's selector (``selectorsMatch``)."""

    def __init__(self, message: str, device: str, want: Want) -> None:
        super().__init__(message)
        self.device = device
        self.want = want


class OverLimit(Abort):
    """A claim needing more devices than an allocation holds: ``Allocate``'s check of
    ``minDevicesPerClaim`` ("number of requested devices N exceeds the claim limit of 32")."""

    def __init__(self, claim: ClaimPlan, counts: Sequence[int], node: str | None) -> None:
        super().__init__(
            f"{claim.label}: number of requested devices {sum(counts)} exceeds the claim limit "
            f"of {ALLOCATION_RESULTS_MAX_SIZE}"
        )
        self.claim = claim
        self.counts = tuple(counts)
        """The fewest devices each request of the claim takes (on ``node``, for ``All``)."""
        self.node = node
        """The node whose matching devices an ``All`` request counts; None when the counts
        hold on every node (``count`` alone passes the limit)."""


class UnusablePool(Abort):
    """``validateDeviceRequest`` for ``allocationMode: All``: the node gathered a pool that is
    incomplete or invalid (whichever driver's, met in pool order, after the devices of the
    pools before it), so "all" cannot be known. Not ``ErrFailedAllocationOnNode``: the pod
    fails, whatever other nodes offer."""

    def __init__(self, claim: ClaimPlan, want: Want, pool: Pool, node: str | None) -> None:
        state = "being updated" if pool.incomplete else "invalid"
        super().__init__(
            f"{claim.label}, request {want.sub or want.request}: asks for all devices, but "
            f"resource pool {pool.label} is currently {state}"
        )
        self.want = want
        self.pool = pool
        self.node = node


@dataclass(frozen=True, slots=True)
class Want:
    """One request or subrequest with the devices its class and selectors match."""

    request: str
    sub: str
    path: str
    """The request's field path (with the claim's prefix), where messages about it go."""
    alternative: Alternative
    matched: Container[DeviceRef]
    """The devices its class and selectors match (``ref in matched``)."""
    erring: Mapping[DeviceRef, str] = field(default_factory=dict)
    total: int | None = None
    """How many devices match in the whole cluster (``Match.count``), which lets the search
    (``scan``) answer without a node when it is short and skip the nodes with too few devices;
    None: every node is searched in full (what those shortcuts are tested against)."""

    @property
    def admin(self) -> bool:
        return self.alternative.admin_access


@dataclass(frozen=True, slots=True)
class RequestPlan:
    name: str
    path: str
    alternatives: tuple[Want, ...]
    first_available: bool = False


@dataclass(frozen=True, slots=True)
class ClaimPlan:
    label: str
    """How messages name the claim (``claim ns/name`` or the pod's claim entry)."""
    path: str
    """The claim spec's field path (with the pod's prefix)."""
    requests: tuple[RequestPlan, ...]
    constraints: tuple[Constraint, ...] = ()
    counters_back: bool = False
    """A device refused for a taint or a constraint gives its counters back at once (upstream
    from 1.36.3, ``rollbackDevice``); before, they stay charged until the node's search ends."""


def fewest(request: RequestPlan) -> int:
    """The fewest devices the request takes whatever the node (``count``; an ``All``
    alternative may take none), the least ``Allocate`` counts for it against the limit."""
    return min(
        (0 if w.alternative.all_devices else w.alternative.count for w in request.alternatives),
        default=0,
    )


def short(request: RequestPlan) -> bool:
    """Whether every alternative of the request matches fewer devices in the whole cluster
    than it needs (False when a total is unknown): no node can take it."""
    return all(w.total is not None and w.total < w.alternative.needed for w in request.alternatives)


def counted(label: str, prefix: str, spec: ClaimSpec) -> ClaimPlan:
    """A claim as ``Allocate``'s device limit counts it before any selector runs: every
    alternative, nothing matched (``prefix``: put before its field paths)."""
    return ClaimPlan(
        label,
        prefix + spec.path,
        tuple(
            RequestPlan(
                request.name,
                prefix + request.path,
                tuple(
                    Want(request.name, alt.name, prefix + request.path, alt, ())
                    for alt in request.alternatives
                ),
                request.first_available is not None and request.exactly is None,
            )
            for request in spec.requests
        ),
        spec.constraints,
    )


def over_by_count(
    plans: Sequence[ClaimPlan], limit: int = ALLOCATION_RESULTS_MAX_SIZE
) -> OverLimit | None:
    """The first claim whose requests need more devices than a claim holds on every node, by
    their counts alone (:func:`fewest`): ``Allocate`` fails the pod on it whatever the
    selectors match (an ``All`` request counts none here)."""
    for plan in plans:
        counts = [fewest(r) for r in plan.requests]
        if sum(counts) > limit:
            return OverLimit(plan, counts, None)
    return None
