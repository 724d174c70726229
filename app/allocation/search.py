"""The allocator's search on one node, as kube-scheduler runs it.

Mirrors ``allocateOne`` and ``allocateDevice`` of upstream's allocator
(k8s.io/dynamic-resource-allocation/structured, internal/incubating/allocator_incubating.go):
claims one after another, in each request after request, each device of a request tried in
the node's order (pools, then slices, by name) after the previous one, backtracking when a
later request cannot be met. For every device tried:

1. skipped when already in use (allocated to another claim, or picked for this attempt), before
   any selector runs: an admin request only skips the devices it took itself, and a selector
   that would err on a device another claim holds is never evaluated;
2. its DeviceClass's selectors, then the request's: false skips it, **an evaluation error
   aborts the whole search** (:class:`SelectorError`), even when other devices would match;
   then, in a ``perDeviceNodeSelection`` slice, the device's own node selection (a device of
   it that does not reach the node is tried this far: ``isSelectable``);
3. its consumable capacity must fit (:func:`app.allocation.state.fits`);
4. its counters must be left in its counter set (a whole GPU and its MIG partitions consume the
   same counters: :mod:`~app.allocation.counters`), unless it is a shareable device that
   already holds a share;
5. a ``NoSchedule`` or ``NoExecute`` taint must be tolerated by the request;
6. every constraint of the claim must still hold (:mod:`~app.allocation.constraints`).

A device refused at 5 or 6 keeps the counters 4 charged to it for the rest of the node's search,
as upstream's ``allocateDevice`` never gives them back there.

Before the search (``Allocate``'s loop over the claims and ``validateDeviceRequest``), the
devices of every ``allocationMode: All`` request or subrequest are fixed, pool by pool: an
incomplete or invalid pool of the node fails the pod (:class:`UnusablePool`), else every device
of the pool whose selectors match (held ones included: an error there aborts), that reaches the
node and whose consumable capacity fits what other claims left. The search must then take each
of them (4-6, and the capacity again after the claim's earlier requests took their shares), or
the request fails on that node: a device an earlier request used up is not quietly left out.

A claim holds at most :data:`ALLOCATION_RESULTS_MAX_SIZE` devices. A claim whose requests need
more (the fewest of each ``firstAvailable`` request's subrequests, every matching device of the
node for ``All``) fails the whole pod (:class:`OverLimit`), as API validation does not bound
``count``; during the search a subrequest that would pass the limit is not tried. A
``firstAvailable`` request takes the first of its subrequests that leads to a complete
allocation.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from app.allocation.capacity import fits
from app.allocation.constraints import ConstraintState
from app.allocation.counters import Counters
from app.allocation.inventory import Candidate, DeviceKey, Pool
from app.allocation.plans import (
    ALLOCATION_RESULTS_MAX_SIZE,
    Abort,
    ClaimPlan,
    DeviceRef,
    OverLimit,
    RequestPlan,
    SelectorError,
    UnusablePool,
    Want,
    fewest,
    short,
)
from app.allocation.state import Allocations
from app.k8s.claims import Alternative

# ClaimPlan, RequestPlan, Want and the errors are app.allocation.plans', named here too: the
# model asks the search in these terms.
__all__ = [
    "ALLOCATION_RESULTS_MAX_SIZE",
    "Abort",
    "ClaimPlan",
    "Exhausted",
    "OverLimit",
    "RequestPlan",
    "Search",
    "SelectorError",
    "UnusablePool",
    "Want",
    "fewest",
    "short",
    "taint_prevents",
]

MAX_STEPS = 20_000
"""Devices tried per node before the search gives up (a combinatorial claim): the verdict is
then "not checked" rather than a guess."""


class Exhausted(Exception):  # noqa: N818
    """The search tried more devices than :data:`MAX_STEPS` on one node."""


class _Exceeded(Exception):  # noqa: N818
    """Upstream's ``errAllocationResultMaxSizeExceeded``: not an answer, a way back up the
    search to the next subrequest or claim."""


def _ref(candidate: Candidate) -> DeviceRef:
    return (candidate.device.slice_name, candidate.device.name)


class Search:
    """One attempt to allocate ``claims`` on one node, from ``allocations`` (None: as if every
    device were free). ``candidates``: the node's devices in order, pool by pool; ``pools``:
    the pools the node gathered, in the same order, incomplete and invalid ones included (None:
    those the candidates belong to)."""

    def __init__(
        self,
        claims: Sequence[ClaimPlan],
        candidates: Sequence[Candidate],
        allocations: Allocations | None,
        *,
        pools: Sequence[Pool] | None = None,
        ignore_taints: bool = False,
        node: str | None = None,
        limit: int = ALLOCATION_RESULTS_MAX_SIZE,
    ) -> None:
        self.claims = claims
        self.candidates = candidates
        self.pools = pools if pools is not None else _pools_of(candidates)
        self.allocations = allocations
        self.ignore_taints = ignore_taints
        self.allocating: dict[DeviceKey, set[int]] = {}
        self.allocating_capacity: dict[DeviceKey, list[dict[str, Any]]] = {}
        self.counters = Counters(allocations)
        self.constraints = [[ConstraintState(c) for c in claim.constraints] for claim in claims]
        self.steps = 0
        self.chosen: list[tuple[int, str, Candidate]] = []
        self.held = [0] * len(claims)
        """Devices picked for each claim in this attempt (``len(alloc.result[c].devices)``)."""
        self.every: dict[int, list[Candidate]] = {}
        """id(Want) -> the devices an ``All`` want must take on this node, fixed before the
        search (``requestData.allDevices``)."""
        self.node = node
        self.counters_back = any(claim.counters_back for claim in claims)
        self.limit = limit
        """Devices a claim may hold (raised only to explain a miss, in never.py)."""

    def run(self) -> bool:
        """Whether every claim can be allocated on this node; raises :class:`Abort`. Wants
        with unknown totals (the reference) get the search alone, without :meth:`_could`."""
        self._validate()
        known = all(
            w.total is not None for c in self.claims for r in c.requests for w in r.alternatives
        )
        if known and not self._could():
            return False
        try:
            return self._one(0, 0, None, 0, 0)
        except _Exceeded:  # (cannot pass the checks of _validate: every claim fits at least)
            return False

    def _validate(self) -> None:
        """``Allocate``'s loop over the claims before the search: fix the devices of every
        ``All`` want (an incomplete or invalid pool raises :class:`UnusablePool`, a selector
        erring on a device of the node :class:`SelectorError`), then fail a claim whose requests
        need more devices than an allocation holds (:class:`OverLimit`), claim by claim in that
        order."""
        for claim in self.claims:
            counts = []
            for request in claim.requests:
                fewest = None
                for want in request.alternatives:
                    if want.alternative.all_devices:
                        every = self._all_devices(claim, want)
                        self.every[id(want)] = every
                        needed = len(every)
                    else:
                        needed = want.alternative.count
                    fewest = needed if fewest is None else min(fewest, needed)
                counts.append(fewest or 0)
            if sum(counts) > self.limit:
                raise OverLimit(claim, counts, self.node)

    def _could(self) -> bool:
        """False when some request has fewer devices on the node than it needs that it could
        take (matching, in a usable pool, and not allocated whole to another claim unless it
        asks for admin access), so the search cannot succeed. Only used when no selector errs
        on any device (then the scheduler's search, which would reach no error either, fails
        the same way)."""
        if any(w.erring for claim in self.claims for r in claim.requests for w in r.alternatives):
            return True
        for claim in self.claims:
            for request in claim.requests:
                if not any(self._enough(w) for w in request.alternatives):
                    return False
        return True

    def _enough(self, want: Want) -> bool:
        """Whether the node has ``needed`` devices the want could take, stopping as soon as
        the answer is known either way (the devices left cannot make up the difference)."""
        needed = want.alternative.needed
        whole = None if self.allocations is None or want.admin else self.allocations.whole
        matched = want.matched
        found = 0
        left = len(self.candidates)
        if left < needed:
            return False
        for candidate in self.candidates:
            left -= 1
            pool = candidate.pool
            if (
                not pool.incomplete
                and pool.invalid is None
                and candidate.reaches
                and (whole is None or candidate.key not in whole)
                and (candidate.device.slice_name, candidate.device.name) in matched
            ):
                found += 1
                if found >= needed:
                    return True
            elif found + left < needed:
                return False
        return False

    # -- upstream's allocateOne -----------------------------------------------------------------

    def _one(self, c: int, r: int, sub: int | None, d: int, start: int) -> bool:
        """Allocate device ``d`` of subrequest ``sub`` of request ``r`` of claim ``c``, trying
        the node's devices from ``start``, then everything after it. Raises :class:`_Exceeded`
        where upstream returns ``errAllocationResultMaxSizeExceeded``: the devices picked for
        the claim could not stay within the limit, whichever devices they are, so the callers
        up to the next subrequest (or claim) do not try other devices."""
        self.steps += 1
        if self.steps > MAX_STEPS:
            raise Exhausted
        if c >= len(self.claims):
            return True
        claim = self.claims[c]
        if r >= len(claim.requests):
            try:
                return self._one(c + 1, 0, None, 0, 0)
            except _Exceeded:
                return False  # another claim's limit: no reason to try other devices here
        request = claim.requests[r]
        if sub is None:
            return self._subrequests(c, r, request)
        want = request.alternatives[sub]
        alt = want.alternative
        if alt.all_devices:
            return self._every(c, r, sub, d, want)
        if d >= alt.count:
            return self._one(c, r + 1, None, 0, 0)
        if self.held[c] + alt.count - d > self.limit:
            raise _Exceeded
        for index in range(start, len(self.candidates)):
            candidate = self.candidates[index]
            if not self._pool_usable(candidate.pool):
                continue
            key = candidate.key
            if want.admin:
                if c in self.allocating.get(key, ()):
                    continue
            elif self._in_use(key):
                continue
            if not self._selectable(want, candidate) or not candidate.reaches:
                continue
            if not self._capacity_fits(want, candidate):
                continue
            undo = self._allocate(c, want, candidate)
            if undo is not None and self._next(undo, c, r, sub, d + 1, start=index + 1):
                return True
        return False

    def _subrequests(self, c: int, r: int, request: RequestPlan) -> bool:
        """Each subrequest in turn (one for a request without ``firstAvailable``); past the
        limit with every one of them, the requests before it have no solution either."""
        exceeded = True
        for k in range(len(request.alternatives)):
            try:
                if self._one(c, r, k, 0, 0):
                    return True
            except _Exceeded:
                continue  # the next subrequest may need fewer devices
            exceeded = False
        if exceeded and request.alternatives:
            raise _Exceeded
        return False

    def _every(self, c: int, r: int, sub: int, d: int, want: Want) -> bool:
        """Device ``d`` of an ``All`` want's fixed set: that one, or the request fails."""
        every = self.every[id(want)]
        if not every:
            return False
        if d >= len(every):
            return self._one(c, r + 1, None, 0, 0)
        if self.held[c] + len(every) - d > self.limit:
            raise _Exceeded
        undo = self._allocate(c, want, every[d])
        if undo is None:
            return False  # each device of the set, or none: no device is left out
        return self._next(undo, c, r, sub, d + 1, start=0)

    def _next(
        self, undo: Callable[[], None], c: int, r: int, sub: int, d: int, *, start: int
    ) -> bool:
        """Go on from a device just allocated; take it back (``undo``) unless that leads to a
        complete allocation."""
        try:
            if self._one(c, r, sub, d, start):
                return True
        except _Exceeded:
            undo()
            raise
        undo()
        return False

    def _all_devices(self, claim: ClaimPlan, want: Want) -> list[Candidate]:
        """``validateDeviceRequest`` for ``All``, pool by pool: an incomplete or invalid pool
        fails the pod (:class:`UnusablePool`: "all" cannot be known), else every device of the
        pool that matches (``isSelectable``: an error raises), reaches the node, and whose
        capacity fits what other claims left, before anything is picked for this attempt."""
        every = []
        candidates = self.candidates
        at = 0
        for pool in self.pools:
            if not self._pool_usable(pool):
                raise UnusablePool(claim, want, pool, self.node)
            while at < len(candidates) and candidates[at].pool is pool:
                candidate = candidates[at]
                at += 1
                if (
                    self._selectable(want, candidate)
                    and candidate.reaches
                    and self._capacity_fits(want, candidate)
                ):
                    every.append(candidate)
        return every

    @staticmethod
    def _pool_usable(pool: Pool) -> bool:
        return not pool.incomplete and pool.invalid is None

    def _in_use(self, key: DeviceKey) -> bool:
        if self.allocating.get(key):
            return True
        return self.allocations is not None and key in self.allocations.whole

    def _selectable(self, want: Want, candidate: Candidate) -> bool:
        ref = _ref(candidate)
        if ref in want.matched:
            return True
        error = want.erring.get(ref)
        if error is not None:
            raise SelectorError(error, candidate.label, want)
        return False

    def _capacity_fits(self, want: Want, candidate: Candidate) -> bool:
        return self._consumption(want, candidate) is not None

    def _consumption(self, want: Want, candidate: Candidate) -> dict[str, Any] | None:
        requests = want.alternative.capacity_requests
        if not requests and not candidate.allow_multiple:
            return {}
        taken = self.allocations.shared.get(candidate.key) if self.allocations else None
        allocating: dict[str, Any] = {}
        for share in self.allocating_capacity.get(candidate.key, ()):
            for name, amount in share.items():
                allocating[name] = allocating[name] + amount if name in allocating else amount
        return fits(candidate.key[0], candidate.capacity, requests, taken, allocating)

    # -- upstream's allocateDevice --------------------------------------------------------------

    def _allocate(self, c: int, want: Want, candidate: Candidate) -> Callable[[], None] | None:
        key = candidate.key
        multiple = candidate.allow_multiple
        if not multiple and want.admin and c in self.allocating.get(key, ()):
            return None
        if not want.admin and self._in_use(key):
            return None
        shared_in_use = multiple and (
            bool(self.allocating_capacity.get(key))
            or (self.allocations is not None and key in self.allocations.shared)
        )
        counted = False
        if not shared_in_use and candidate.consumes:
            if not self.counters.take(candidate):
                return None
            counted = True
        # Past the counters, a device refused for a taint or a constraint keeps them charged
        # until the node's search ends up to 1.36.2: upstream's allocateDevice returned without
        # deallocateCountersForDevice there, so they stayed out of reach for every device tried
        # after it on this node (a tainted MIG partition blocks its GPU's memory). From 1.36.3
        # its rollbackDevice gives them back (``counters_back``).
        if not self.ignore_taints and taint_prevents(candidate, want.alternative):
            if counted and self.counters_back:
                self.counters.release(candidate)
            return None
        added: list[ConstraintState] = []
        for state in self.constraints[c]:
            outcome = state.add(want.request, want.sub, candidate)
            if outcome is False:
                for done in added:
                    done.remove()
                if counted and self.counters_back:
                    self.counters.release(candidate)
                return None
            if outcome:
                added.append(state)
        share: dict[str, Any] | None = None
        if multiple:
            share = self._consumption(want, candidate)
            if share is None:
                for done in added:
                    done.remove()
                if counted:
                    self.counters.release(candidate)
                return None
            self.allocating_capacity.setdefault(key, []).append(share)
        else:
            self.allocating.setdefault(key, set()).add(c)
        self.chosen.append((c, want.request, candidate))
        self.held[c] += 1

        def undo() -> None:
            self.chosen.pop()
            self.held[c] -= 1
            for done in added:
                done.remove()
            if share is not None:
                self.allocating_capacity[key].remove(share)
            else:
                self.allocating[key].discard(c)
            if counted:
                self.counters.release(candidate)

        return undo


def _pools_of(candidates: Sequence[Candidate]) -> list[Pool]:
    """The pools the candidates belong to, in their order."""
    pools: list[Pool] = []
    for candidate in candidates:
        if not pools or pools[-1] is not candidate.pool:
            pools.append(candidate.pool)
    return pools


def taint_prevents(candidate: Candidate, alternative: Alternative) -> Mapping[str, Any] | None:
    """The first ``NoSchedule``/``NoExecute`` taint of the device the request does not
    tolerate (``taintPreventsAllocation``; other effects, ``None`` included, never prevent)."""
    for taint in candidate.taints:
        if taint.get("effect") not in ("NoSchedule", "NoExecute"):
            continue
        if not any(t.tolerates(taint) for t in alternative.device_tolerations):
            return taint
    return None
