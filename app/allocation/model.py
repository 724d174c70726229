"""The allocation model's entry point: never / not now / ok for claims that must share a node.

:meth:`Model.check` takes one or more claim specs (a ResourceClaim, a template, or all the claims
of a pod, which the scheduler allocates together on one node), and answers:

- **never**: on no node could the claims be allocated even if every device were free (or the
  scheduler would fail the pod with an error: a CEL runtime error, a claim over the device
  limit, ``allocationMode: All`` on a node with an incomplete or invalid pool; an error on any
  node fails the whole pod);
- **not now**: some node could, but what it needs is allocated to other claims;
- **ok**.

Each answer but ok comes with the nearest miss (:mod:`app.allocation.explain`, worded per
verdict by :mod:`~app.allocation.never` and :mod:`~app.allocation.not_now`). The check is
memoized by the claims' shape and the generations of the claims and classes it read: a repeated
shape costs a lookup. A verdict also records what it read of the slices, so a slice change
that touched none of it keeps the verdict (an ok verdict read the node that takes the claims,
or every node for an ``allocationMode: All`` request; only the changed slices are evaluated,
for a CEL error the scheduler would abort on); the other verdicts are computed again. The memo
is a BoundedCache (LRU, counted in /metrics).

Shortcuts at scale, each an answer the full search gives (compared with it on generated fleets
in tests/allocation/test_shortcuts.py, ``Model(exhaustive=True)`` being that search): a request
whose every alternative matches fewer devices in the whole cluster than it needs is answered
from the match counts, without a node; a node with fewer devices than a request needs gets no
search, and a node's search first counts the devices each request could take there
(:func:`~app.allocation.attempt.scan`); the nearest miss reads only the nodes it must.

The devices per node are gathered when the view has synced (:meth:`Model.warm`) and kept
current on slice and Node events (:meth:`Model.on_change`), never on a request. The nodes are
the cluster's Nodes when the view holds them (their labels decide which slices reach them), else
the names the slices give (:mod:`app.allocation.inventory`); a Node's new labels re-gather that
node, and a memoized verdict that read it is computed again, as after a slice change.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass
from typing import Any, Final

from app.allocation import explain
from app.allocation.attempt import scan
from app.allocation.claim_input import ClaimInput, shape_of
from app.allocation.explain import Offers, Problem, Resolved
from app.allocation.inventory import DeviceKey, Inventory
from app.allocation.never import never
from app.allocation.not_now import held_devices, not_now
from app.allocation.plans import SelectorError, counted, over_by_count
from app.allocation.search import ClaimPlan, Exhausted, RequestPlan, Want
from app.allocation.state import Allocations
from app.bounded import BoundedCache, CacheName
from app.cel.cost import Budget
from app.cel.errors import CelCompileError
from app.cel.gaps import engine_gap
from app.cluster.view import Kind
from app.devices.index import DeviceIndex, Match, class_selectors
from app.k8s.claims import Alternative

__all__ = ["NEVER", "NOT_NOW", "OK", "UNCHECKED", "ClaimInput", "Model", "Problem", "Verdict"]

NEVER: Final = "never"
NOT_NOW: Final = "not now"
OK: Final = "ok"
UNCHECKED: Final = "unchecked"
MEMO_SIZE: Final = 4096
TOUCHES_KEPT: Final = 4096


@dataclass(frozen=True, slots=True)
class Verdict:
    outcome: str
    problems: tuple[Problem, ...] = ()
    notes: tuple[Problem, ...] = ()
    """Parts not checked (a selector this engine cannot evaluate), as warnings."""
    held: frozenset[DeviceKey] = frozenset()
    """Not now: the devices the claims could use that other claims hold (`DeviceHolders.of` says
    which claims)."""


_Keys = tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...]
"""The device matches a verdict read: (class, its expressions, the request's) each."""


@dataclass(slots=True)
class _Kept:
    """A memoized verdict and what it read of the slices: the nodes (None: every node, or
    the nearest misses across them) and the device matches (class + selectors)."""

    verdict: Verdict
    nodes: frozenset[str] | None = None
    keys: _Keys = ()
    at: tuple[int, int] = (-1, -1)
    """The slice and Node generations it was computed (or last confirmed) at."""
    epoch: int = -1
    """The inventory's update count then (:meth:`Model._touched_since`)."""


class Model:
    """The allocator model over a device index (slices) and the claims' allocations."""

    def __init__(
        self,
        index: DeviceIndex,
        memo_size: int = MEMO_SIZE,
        max_bytes: int | None = None,
        *,
        exhaustive: bool = False,
    ) -> None:
        self.index = index
        self.exhaustive = exhaustive
        """Search every node in full, without the shortcuts a request's cluster-wide match
        count allows (:func:`app.allocation.attempt.scan`): the reference they are tested
        against, never used to serve."""
        self._inventory: Inventory | None = None
        self._facts: dict[str, Any] = {}
        self._labels: dict[str, Mapping[str, str]] = {}
        """The cluster's Nodes and their labels (empty: the view holds no Node)."""
        self._nodes_changed: set[str] = set()
        """Nodes added, removed or relabelled since the inventory was gathered."""
        self._node_generation = 0
        self._epoch = 0
        self._touched: deque[tuple[int, frozenset[str] | None]] = deque(maxlen=TOUCHES_KEPT)
        """(epoch, nodes re-gathered then, None for all) for each inventory update."""
        self._memo: BoundedCache[Any, _Kept] = BoundedCache(
            CacheName.SATISFIABILITY_VERDICTS, memo_size, max_bytes=max_bytes, size=_kept_bytes
        )
        self._offers = Offers()

    def warm(self, classes: Mapping[str, Any]) -> None:
        """Build what a first check would: the devices per node, and the devices each
        DeviceClass selects (its selectors once per slice version). Called when the cluster
        view has synced, before the webhook reports ready."""
        self.inventory()
        for name, device_class in classes.items():
            with suppress(CelCompileError):
                self.index.matching(name, class_selectors(device_class))

    def on_change(self, kind: Kind, old: Any, new: Any) -> None:
        """ClusterView listener (after the index's): follow the Nodes' labels, and once warm
        keep the devices per node current on every slice and Node event, so no request
        re-gathers them."""
        if kind is Kind.NODE:
            if not self._node_event(old, new):
                return
        elif kind is not Kind.RESOURCE_SLICE:
            return
        if self._inventory is not None:
            self.inventory()

    def _node_event(self, old: Any, new: Any) -> bool:
        """Take a Node event; whether its name or labels changed anything."""
        name = _node_name(new if new is not None else old)
        if name is None:
            return False
        if new is None:
            if self._labels.pop(name, None) is None:
                return False
        else:
            labels = _node_labels(new)
            if self._labels.get(name) == labels:
                return False  # a status or annotation change: the same node for the allocator
            self._labels[name] = labels
        self._nodes_changed.add(name)
        self._node_generation += 1
        return True

    @property
    def memo_hits(self) -> int:
        return self._memo.hits

    @property
    def memo_misses(self) -> int:
        return self._memo.misses

    @property
    def node_labels_known(self) -> bool:
        """Whether the nodes are the cluster's Nodes (else: the names the slices give)."""
        return bool(self._labels)

    def inventory(self) -> Inventory:
        """Devices per node at the index's generation and the Nodes' (updated, or built anew
        when Node objects appear or all go away)."""
        found = self._inventory
        generation = self.index.generation
        if (
            found is not None
            and found.generation == generation
            and found.node_generation == self._node_generation
        ):
            return found
        labels = self._labels or None
        touched: set[str] | None = None
        rebuilt = True
        if found is not None and (found.labels is None) == (labels is None):
            changed = (
                set()
                if found.generation == generation
                else self.index.changed_since(found.generation)
            )
            if changed is not None:
                touched = found.update(
                    self.index.by_name(),
                    generation,
                    self._facts,
                    changed,
                    nodes_changed=self._nodes_changed,
                    labels=labels,
                )
                rebuilt = False
        if found is None or rebuilt:
            found = Inventory.build(self.index.slices(), generation, self._facts, labels)
            self._inventory = found
        found.node_generation = self._node_generation
        self._nodes_changed.clear()
        self._epoch += 1
        self._touched.append((self._epoch, None if touched is None else frozenset(touched)))
        return found

    def _touched_since(self, epoch: int) -> set[str] | None:
        """The nodes re-gathered after ``epoch``, or None when all (or unknown)."""
        if not self._touched or self._touched[0][0] > epoch + 1:
            return None
        out: set[str] = set()
        for at, nodes in self._touched:
            if at > epoch:
                if nodes is None:
                    return None
                out |= nodes
        return out

    def check(
        self,
        claims: Sequence[ClaimInput],
        classes: Mapping[str, Any],
        allocations: Allocations,
        *,
        classes_generation: int = 0,
        budget: Budget | None = None,
    ) -> Verdict:
        """The verdict on ``claims`` taken together. A selector this engine cannot compile
        for want of a function Kubernetes has (:func:`app.cel.gaps.engine_gap`) leaves the
        claim unchecked, unless its counts alone pass the device limit (the scheduler counts
        them before any selector runs: never); one that does not compile at all is a
        problem."""
        key = (shape_of(claims), allocations.generation, classes_generation)
        found = self._memo.peek(key)
        at = (self.index.generation, self._node_generation)
        if found is not None and (found.at == at or self._still(found, budget)):
            found.at = at
            found.epoch = self._epoch
            self._memo.get(key)  # counted as a hit (and made the most recent) only when kept
            return found.verdict
        self._memo.misses += 1
        kept = self._check(claims, classes, allocations, budget)
        kept.at = at
        kept.epoch = self._epoch
        if budget is not None and not budget.memoize:
            return kept.verdict  # a review over the memo bound (app.cel.cost)
        return self._memo.put(key, kept).verdict

    def _still(self, kept: _Kept, budget: Budget | None) -> bool:
        """Whether a verdict from older slices or Nodes holds now: it read only some nodes
        (an ok verdict: the node that takes the claims), none of them was re-gathered since,
        and no selector errs on a device of the slices changed since (the scheduler would
        abort on it)."""
        if kept.nodes is None:
            return False
        self.inventory()
        touched = self._touched_since(kept.epoch)
        changed = self.index.changed_since(kept.at[0])
        if touched is None or changed is None or touched & kept.nodes:
            return False
        return not any(self.index.erring_in(*key, changed, budget) for key in kept.keys)

    def _check(
        self,
        claims: Sequence[ClaimInput],
        classes: Mapping[str, Any],
        allocations: Allocations,
        budget: Budget | None,
    ) -> _Kept:
        notes: list[Problem] = []
        problems: list[Problem] = []
        resolved = self._resolve(
            claims,
            classes,
            budget=budget,
            notes=notes,
            problems=problems,
        )
        if problems:  # read no slice
            return _Kept(Verdict(NEVER, tuple(problems), tuple(notes)), frozenset())
        if resolved is None:
            over = over_by_count([counted(c.label, c.prefix, c.spec) for c in claims])
            if over is not None:  # whatever the selectors it cannot evaluate match
                return _Kept(Verdict(NEVER, (explain.over_limit(over),)), frozenset())
            return _Kept(Verdict(UNCHECKED, (), tuple(notes)), frozenset())
        inventory = self.inventory()
        try:
            # The scheduler's own answer first: it skips a device another claim holds before
            # its selectors run, so an error on such a device does not abort the pod now.
            now, abort = scan(resolved.plans, inventory, allocations)
            if now and abort is None:
                return _Kept(Verdict(OK, (), tuple(notes)), *_read(resolved, now[0]))
            possible, free = scan(resolved.plans, inventory, None)
            if abort is None and isinstance(free, SelectorError):
                # an error only on devices other claims hold: not now, and said
                misses = not_now(resolved, inventory, allocations, None, self.index, held=free)
                held = held_devices(resolved, inventory, allocations)
                return _Kept(Verdict(NOT_NOW, tuple(misses), tuple(notes), held))
            if free is not None:
                problem = explain.cel_abort(abort or free, resolved, self.index, budget)
                return _Kept(Verdict(NEVER, (problem,), tuple(notes)))
            if not possible:
                misses = never(resolved, inventory, self.index, budget)
                return _Kept(Verdict(NEVER, tuple(misses), tuple(notes)))
            misses = not_now(resolved, inventory, allocations, abort, self.index)
            held = held_devices(resolved, inventory, allocations)
        except Exhausted:
            note = Problem(claims[0].prefix + claims[0].spec.path, explain.EXHAUSTED)
            return _Kept(Verdict(UNCHECKED, (), (*notes, note)))
        return _Kept(Verdict(NOT_NOW, tuple(misses), tuple(notes), held))

    def _resolve(
        self,
        claims: Sequence[ClaimInput],
        classes: Mapping[str, Any],
        *,
        budget: Budget | None,
        notes: list[Problem],
        problems: list[Problem],
    ) -> Resolved | None:
        plans = []
        matches: dict[int, tuple[Alternative, Match, tuple[str, ...]]] = {}
        unchecked = False
        for claim in claims:
            requests = []
            for request in claim.spec.requests:
                wants = []
                for alt in request.alternatives:
                    device_class = classes.get(alt.device_class)
                    path = claim.prefix + alt.path
                    if not alt.device_class:
                        unchecked = True
                        continue
                    if device_class is None:
                        problems.append(
                            Problem(
                                claim.prefix + request.path,
                                f"DeviceClass {alt.device_class} does not exist",
                            )
                        )
                        continue
                    class_expressions = class_selectors(device_class)
                    expressions = [e for _, e in alt.selectors]
                    try:
                        match = self.index.matching(
                            alt.device_class, class_expressions, expressions, budget
                        )
                    except CelCompileError as error:
                        gap = engine_gap(error)
                        unchecked = True
                        if gap is None:
                            problems.append(
                                Problem(
                                    claim.prefix + request.path,
                                    f"DeviceClass {alt.device_class} has a selector that "
                                    f"does not compile: {error}",
                                )
                            )
                        elif error.expression in class_expressions:
                            # (a request selector's gap is reported by the compile check)
                            notes.append(Problem(path, explain.class_gap(alt, gap)))
                        continue
                    want = Want(
                        request.name,
                        alt.name,
                        claim.prefix + request.path,
                        alt,
                        match.refs,
                        {(d.slice_name, d.name): m for d, m in match.erring},
                        None if self.exhaustive else match.count,
                    )
                    matches[id(want)] = (alt, match, class_expressions)
                    wants.append(want)
                requests.append(
                    RequestPlan(
                        request.name,
                        claim.prefix + request.path,
                        tuple(wants),
                        request.first_available is not None and request.exactly is None,
                    )
                )
            plans.append(
                ClaimPlan(
                    claim.label,
                    claim.prefix + claim.spec.path,
                    tuple(requests),
                    claim.spec.constraints,
                    claim.counters_back,
                )
            )
        if unchecked or any(not r.alternatives for p in plans for r in p.requests):
            return None
        return Resolved(tuple(plans), matches, self._offers)


def _read(resolved: Resolved, node: str) -> tuple[frozenset[str] | None, _Keys]:
    """What an ok verdict read of the slices: the node that takes the claims, and the device
    matches. Every node (None) when a selector errs on some device, or for an ``All`` request:
    a change on any node can then abort the pod (its devices over the claim limit, an
    incomplete or invalid pool there)."""
    plans = resolved.plans
    erring = any(m.erring for _, m, _ in resolved.matches.values())
    whole = any(
        w.alternative.all_devices for p in plans for r in p.requests for w in r.alternatives
    )
    keys = {
        (alt.device_class, tuple(exprs), tuple(e for _, e in alt.selectors))
        for alt, _, exprs in resolved.matches.values()
    }
    return (None if erring or whole else frozenset((node,))), tuple(keys)


def _node_name(node: Any) -> str | None:
    meta = node.get("metadata") if isinstance(node, Mapping) else None
    name = meta.get("name") if isinstance(meta, Mapping) else None
    return name if isinstance(name, str) and name else None


def _node_labels(node: Any) -> Mapping[str, str]:
    labels = node.get("metadata", {}).get("labels") if isinstance(node, Mapping) else None
    if not isinstance(labels, Mapping):
        return {}
    if all(isinstance(v, str) for v in labels.values()):
        return labels  # the view's own dict (read-only for everyone), not a copy
    return {k: v for k, v in labels.items() if isinstance(v, str)}


def _kept_bytes(kept: _Kept) -> int:
    """About what a memoized verdict holds: its texts, the nodes and shapes it read (the key,
    the claims' shape, is counted as the selectors it repeats), the held devices it names."""
    verdict = kept.verdict
    texts = sum(len(p.path) + len(p.message) for p in (*verdict.problems, *verdict.notes))
    selectors = sum(len(e) for key in kept.keys for e in (*key[1], *key[2]))
    held = 200 * len(verdict.held)  # a set slot and a tuple of three shared strings each
    return 600 + 2 * texts + 2 * selectors + 80 * len(kept.nodes or ()) + held
