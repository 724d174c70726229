"""The allocation model's entry point: never / not now / ok for claims that must share a node.

:meth:`Model.check` takes one or more claim specs (a ResourceClaim, a template, or all the claims
of a pod, which the scheduler allocates together on one node), and answers:

- **never**: on no node could the claims be allocated even if every device were free (or the
  scheduler would abort on a CEL runtime error: an error on any node fails the whole pod);
- **not now**: some node could, but what it needs is allocated to other claims;
- **ok**.

Each answer but ok comes with the nearest miss (:mod:`app.allocation.explain`). The check is
memoized by the claims' shape and the generations of what it read (slices, claims, classes):
a repeated shape costs a lookup. The memo is a BoundedCache (LRU, counted in /metrics).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from app.allocation import explain
from app.allocation.explain import Problem, Resolved
from app.allocation.inventory import Inventory
from app.allocation.search import ClaimPlan, Exhausted, RequestPlan, Want, scan
from app.allocation.state import Allocations
from app.bounded import BoundedCache, CacheName
from app.cel.cost import Budget
from app.cel.errors import CelCompileError
from app.cel.index import DeviceIndex, Match, class_selectors
from app.k8s.claims import Alternative, ClaimSpec

__all__ = ["NEVER", "NOT_NOW", "OK", "UNCHECKED", "ClaimInput", "Model", "Problem", "Verdict"]

NEVER: Final = "never"
NOT_NOW: Final = "not now"
OK: Final = "ok"
UNCHECKED: Final = "unchecked"
MEMO_SIZE: Final = 4096

Gap = Callable[[CelCompileError], "str | None"]


def _no_gap(_: CelCompileError) -> str | None:
    return None


@dataclass(frozen=True, slots=True)
class ClaimInput:
    label: str
    """How messages name the claim: "claim ns/name", "claim gpu (template t)"."""
    spec: ClaimSpec
    prefix: str = ""
    """Put before the claim's field paths (a pod's ``spec.resourceClaims[0]`` -> ...)."""


@dataclass(frozen=True, slots=True)
class Verdict:
    outcome: str
    problems: tuple[Problem, ...] = ()
    notes: tuple[Problem, ...] = ()
    """Parts not checked (a selector this engine cannot evaluate), as warnings."""


class Model:
    """The allocator model over a device index (slices) and the claims' allocations."""

    def __init__(self, index: DeviceIndex, memo_size: int = MEMO_SIZE) -> None:
        self.index = index
        self._inventory: Inventory | None = None
        self._facts: dict[str, Any] = {}
        self._memo: BoundedCache[Any, Verdict] = BoundedCache(
            CacheName.SATISFIABILITY_VERDICTS, memo_size
        )

    @property
    def memo_hits(self) -> int:
        return self._memo.hits

    @property
    def memo_misses(self) -> int:
        return self._memo.misses

    def inventory(self) -> Inventory:
        """Devices per node at the index's generation (built once per generation)."""
        found = self._inventory
        generation = self.index.generation
        if found is None or found.generation != generation:
            found = Inventory.build(self.index.slices(), generation, self._facts)
            self._inventory = found
        return found

    def check(
        self,
        claims: Sequence[ClaimInput],
        classes: Mapping[str, Any],
        allocations: Allocations,
        *,
        classes_generation: int = 0,
        budget: Budget | None = None,
        engine_gap: Gap = _no_gap,
    ) -> Verdict:
        """The verdict on ``claims`` taken together. ``engine_gap`` tells a selector this
        engine cannot compile (a function it lacks: the claim is then not checked) from one
        that does not compile at all."""
        key = (
            _shape(claims),
            self.index.generation,
            allocations.generation,
            classes_generation,
        )
        return self._memoized(
            key, lambda: self._check(claims, classes, allocations, budget, engine_gap)
        )

    def _memoized(self, key: Any, compute: Callable[[], Verdict]) -> Verdict:
        found = self._memo.get(key)
        if found is not None:
            return found
        return self._memo.put(key, compute())

    def _check(
        self,
        claims: Sequence[ClaimInput],
        classes: Mapping[str, Any],
        allocations: Allocations,
        budget: Budget | None,
        engine_gap: Gap,
    ) -> Verdict:
        notes: list[Problem] = []
        problems: list[Problem] = []
        resolved = self._resolve(
            claims,
            classes,
            budget=budget,
            engine_gap=engine_gap,
            notes=notes,
            problems=problems,
        )
        if problems:
            return Verdict(NEVER, tuple(problems), tuple(notes))
        if resolved is None:
            return Verdict(UNCHECKED, (), tuple(notes))
        inventory = self.inventory()
        try:
            possible, abort = scan(resolved.plans, inventory.nodes, None)
            if abort is not None:
                problem = explain.cel_abort(abort, resolved, self.index, budget)
                return Verdict(NEVER, (problem,), tuple(notes))
            if not possible:
                misses = explain.never(resolved, inventory, self.index, budget)
                return Verdict(NEVER, tuple(misses), tuple(notes))
            now, abort = scan(resolved.plans, inventory.nodes, allocations)
            if now and abort is None:
                return Verdict(OK, (), tuple(notes))
            misses = explain.not_now(resolved, inventory, allocations, abort, self.index)
        except Exhausted:
            note = Problem(claims[0].prefix + claims[0].spec.path, explain.EXHAUSTED)
            return Verdict(UNCHECKED, (), (*notes, note))
        return Verdict(NOT_NOW, tuple(misses), tuple(notes))

    def _resolve(
        self,
        claims: Sequence[ClaimInput],
        classes: Mapping[str, Any],
        *,
        budget: Budget | None,
        engine_gap: Gap,
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
                        frozenset((d.slice_name, d.name) for d in match.devices),
                        {(d.slice_name, d.name): m for d, m in match.erring},
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
                )
            )
        if unchecked or any(not r.alternatives for p in plans for r in p.requests):
            return None
        return Resolved(tuple(plans), matches)


def _shape(claims: Sequence[ClaimInput]) -> Any:
    return tuple(
        (
            claim.label,
            claim.prefix,
            claim.spec.path,
            tuple(
                (
                    request.name,
                    request.path,
                    request.first_available is not None and request.exactly is None,
                    tuple(
                        (
                            alt.name,
                            alt.path,
                            alt.device_class,
                            alt.selectors,
                            alt.allocation_mode,
                            alt.count,
                            alt.admin_access,
                            tuple(sorted((k, str(v)) for k, v in alt.capacity_requests.items())),
                            alt.device_tolerations,
                        )
                        for alt in request.alternatives
                    ),
                )
                for request in claim.spec.requests
            ),
            tuple(
                (c.requests, c.match_attribute, c.distinct_attribute)
                for c in claim.spec.constraints
            ),
        )
        for claim in claims
    )
