"""CEL selectors of ResourceClaims, ResourceClaimTemplates and DeviceClasses compile.

On the validating endpoint, every selector compiles
(``spec.devices.requests[i].exactly.selectors[j].cel.expression``, the same under
``firstAvailable[k]``, ``spec.spec...`` in a template, ``spec.selectors[j]`` in a DeviceClass);
one that does not is denied with its expression, line, column and message. Except where the
error is a gap of this webhook's CEL engine, not of the expression (:mod:`app.cel.gaps`: a
function Kubernetes' DRA environment declares and the engine lacks, such as ``cidr()`` or
``isIP()``, or nesting deeper than cel-cpp's parser allows): such a selector is allowed with a
warning that it was not checked, and the API server, which compiles every selector itself, has
the last word on it.

A claim or template whose selectors compile is then judged as the scheduler would place it
(:mod:`app.policies.satisfiability`), within the same review budget (`cel.reviewBudget`).

The server compiles a review's new selectors ahead of the check (:func:`compile_ahead`, the
registration's `prepare`), one per step, and lets other reviews in between the steps: thousands
of new selectors within the API server's limits would otherwise hold its event loop until the
compile budget ran out. The check then finds them compiled; what was not compiled ahead (offline
`check` compiles nothing ahead), it compiles itself, within the same budget of the review.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import suppress
from typing import Any

from app.cel.cost import COMPILE_CHARGE, Budget, BudgetExceededError
from app.cel.engine import SELECTOR
from app.cel.errors import CelCompileError, does_not_compile
from app.cel.gaps import engine_gap
from app.errors import ObjectShapeError
from app.k8s import claims
from app.k8s.claims import SELECTING, DeviceRequest
from app.policies import satisfiability
from app.policies.base import ALLOW, Context, Request, Result, Violation, failure_answer, subject
from app.policies.cel_runtime import CelRuntime, cel_runtime

READ_IN_ONE_STEP = 256
"""Selectors read from an object without a turn of the event loop after (about half a
millisecond: the API server's limits allow 8,192, several milliseconds)."""


def check(request: Request, ctx: Context) -> Result:
    """Deny selectors that do not compile; then warn or deny requests no device can satisfy
    (`satisfiability.claim_verdict`).

    All of it within the review's CEL budgets (`cel.reviewBudget`, `cel.compileBudget`): past
    one, the answer is per `failure.celBudget`, at once.
    """
    budget = request.cel_budget()
    try:
        return _check(request, ctx, budget)
    except BudgetExceededError as exc:
        return failure_answer(
            ctx.policy.failure.cel_budget,
            f"{subject(request)}: {exc}",
            skipped="selectors not fully checked",
            code=403,
            reason="Forbidden",
        )


def _check(request: Request, ctx: Context, budget: Budget) -> Result:
    obj = request.object
    if obj is None:
        return ALLOW
    runtime: CelRuntime = ctx.parts[cel_runtime]
    requests, selectors = _selectors(request, obj)
    budget.admit(e for _, e in selectors)
    violations, not_checked = compile_check(runtime, selectors, budget)
    if violations:
        return Result(
            violations=violations, warnings=not_checked, summary=_summary(request, "do not compile")
        )
    if not requests:
        return Result(warnings=not_checked) if not_checked else ALLOW
    return satisfiability.claim_verdict(request, ctx, budget, not_checked)


def compile_ahead(request: Request, ctx: Context) -> Iterator[None]:
    """The new selectors the check would compile, compiled ahead of it, a step per compile,
    within the review's budget (`Request.cel_budget`): the server runs other reviews between
    the steps. Reading more than READ_IN_ONE_STEP selectors is a step of its own. It stops
    where the budget does, and judges nothing: a compile error is cached for the check to
    report, a malformed object or a spent budget is left for it to answer."""
    obj = request.object
    if obj is None:
        return
    try:
        _, selectors = _selectors(request, obj)
    except ObjectShapeError:
        return
    if len(selectors) > READ_IN_ONE_STEP:
        yield
    runtime: CelRuntime = ctx.parts[cel_runtime]
    cache, engine = runtime.cache, runtime.engine
    budget = request.cel_budget()
    try:
        budget.admit(e for _, e in selectors)
        for _, expression in selectors:
            if cache.is_cached(engine, expression, SELECTOR, budget):
                continue
            budget.charge(COMPILE_CHARGE)
            with suppress(CelCompileError):  # (cached: the check reports it)
                cache.get(engine, expression, SELECTOR, budget)
            yield
    except BudgetExceededError:
        return


def compile_check(
    runtime: CelRuntime, selectors: Sequence[tuple[str, str]], budget: Budget | None = None
) -> tuple[tuple[Violation, ...], tuple[str, ...]]:
    """A violation per selector that does not compile, with position and message; a warning
    per selector this webhook's engine cannot check (:func:`app.cel.gaps.engine_gap`). Each
    selector not yet compiled costs `budget` a compile (and one of its new compiles)."""
    violations = []
    not_checked = []
    for path, expression in selectors:
        if budget is not None:
            cached = runtime.cache.is_cached(runtime.engine, expression, SELECTOR, budget)
            budget.charge(1 if cached else COMPILE_CHARGE)
        try:
            runtime.cache.get(runtime.engine, expression, SELECTOR, budget)
        except CelCompileError as error:
            gap = engine_gap(error)
            if gap is not None:
                not_checked.append(f"{path}: {_not_checked(gap)}")
                continue
            violations.append(Violation(path, f"CEL {does_not_compile(error, expression)}"))
    return tuple(violations), tuple(not_checked)


def _not_checked(gap: str) -> str:
    return (
        f"not checked: {gap} is not supported by this webhook's CEL engine "
        "(the API server still compiles it)"
    )


def _summary(request: Request, what: str) -> str:
    return f"{subject(request)}: CEL selectors {what}"


# -- reading the objects ----------------------------------------------------------------------


def _map(value: Any, path: str) -> Mapping[str, Any]:
    if type(value) is dict:  # the common case, without the ABC check
        return value
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ObjectShapeError(path, "must be an object")
    return value


def _selectors(
    request: Request, obj: Mapping[str, Any]
) -> tuple[tuple[DeviceRequest, ...], list[tuple[str, str]]]:
    """The device requests (none for a DeviceClass) and the (path, expression) of every
    selector of the object; a malformed one raises ObjectShapeError with its path."""
    if request.kind == "DeviceClass":
        selectors, errors = claims.device_class_selectors(obj)
        if errors:
            raise errors[0].exception()
        return (), list(selectors)
    requests = _device_requests(request, obj)
    return requests, [s for r in requests for a in r.alternatives for s in a.selectors]


def _device_requests(request: Request, obj: Mapping[str, Any]) -> tuple[DeviceRequest, ...]:
    """The device requests of a claim or template, from the claim model; a malformed one raises
    ObjectShapeError with its path (a spec that is not an object is reported at ``spec``, the
    template's inner one too, as this check always has)."""
    spec = _map(obj.get("spec"), "spec")
    if request.kind == "ResourceClaimTemplate":
        _map(spec.get("spec"), "spec")
    parsed = request.claim_spec()
    if parsed.malformed:
        parsed.check(SELECTING)
    return parsed.requests
