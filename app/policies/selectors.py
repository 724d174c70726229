"""CEL selectors of ResourceClaims, ResourceClaimTemplates and DeviceClasses.

Two checks, both on the validating endpoint:

1. Every selector compiles (``spec.devices.requests[i].exactly.selectors[j].cel.expression``, the
   same under ``firstAvailable[k]``, ``spec.spec...`` in a template, ``spec.selectors[j]`` in a
   DeviceClass); one that does not is denied with its expression, line, column and message.
   Except where the error is a gap of this webhook's CEL engine, not of the expression
   (:mod:`app.cel.gaps`: a function Kubernetes' DRA environment declares and the engine lacks,
   such as ``cidr()`` or ``isIP()``, or nesting deeper than cel-cpp's parser allows): such a
   selector is allowed with a warning that it was not checked, and the API server, which
   compiles every selector itself, has the last word on it.
2. Satisfiability as the scheduler sees it (:mod:`app.allocation`): a claim that no node could
   take even with every device free ("never": too few matching devices in the cluster or on any
   one node, constraints, taints, shared counters, capacity, or a CEL runtime error the
   scheduler aborts on) is warned about or denied (``cel.selectors`` in the policy, per
   namespace mode), with the nearest miss ("asks for 4 devices on one node; the most on any
   node is 2 (node-a, node-b)"); one that some node could take once other claims release their
   devices ("not now") is always only warned about. A ``firstAvailable`` request is fine when
   any of its alternatives is.

A request whose selectors (or whose DeviceClass's selectors) hit such a gap is not checked for
satisfiability either: it is taken as satisfiable, with the same warning.

The scheduler would otherwise leave the pod Pending with no message. Devices come from the cluster
view through :class:`~app.devices.index.DeviceIndex`; the verdict is memoized by the claim's
shape and the view's generations, so a repeated claim shape costs a lookup.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from app.allocation import NEVER, NOT_NOW, Allocations, ClaimInput
from app.cel.cost import COMPILE_CHARGE, Budget, BudgetExceededError
from app.cel.engine import SELECTOR
from app.cel.errors import CelCompileError, does_not_compile
from app.cel.gaps import engine_gap
from app.cluster.view import Kind
from app.errors import ObjectShapeError
from app.k8s import claims
from app.k8s.claims import SELECTING, DeviceRequest
from app.policies.base import ALLOW, Context, Request, Result, Violation, failure_answer
from app.policies.cel_runtime import CelRuntime, cel_runtime


def check(request: Request, ctx: Context) -> Result:
    """Deny selectors that do not compile; warn or deny requests no device can satisfy.

    All of it within the review's CEL budget (`cel.reviewBudget`): past it, the answer is per
    `failure.celBudget`.
    """
    budget = Budget(ctx.policy.cel.review_budget)
    try:
        return _check(request, ctx, budget)
    except BudgetExceededError as exc:
        text = f"{request.kind} {request.name}: {exc}".replace("  ", " ")
        return failure_answer(
            ctx.policy.failure.cel_budget,
            text,
            skipped="selectors not fully checked",
            code=403,
            reason="Forbidden",
        )


def _check(request: Request, ctx: Context, budget: Budget) -> Result:
    obj = request.object
    if obj is None:
        return ALLOW
    runtime: CelRuntime = ctx.parts[cel_runtime]
    if request.kind == "DeviceClass":
        selectors, errors = claims.device_class_selectors(obj)
        if errors:
            raise errors[0].exception()  # (malformed: ObjectShapeError with its path)
        budget.memoize_unless_over(e for _, e in selectors)
        violations, not_checked = compile_check(runtime, selectors, budget)
        if violations:
            return Result(
                violations=violations,
                warnings=not_checked,
                summary=_summary(request, "do not compile"),
            )
        return Result(warnings=not_checked) if not_checked else ALLOW

    requests = _device_requests(request, obj)
    parsed = request.claim_spec()
    expressions = [s for r in requests for a in r.alternatives for s in a.selectors]
    budget.memoize_unless_over(e for _, e in expressions)
    violations, not_checked = compile_check(runtime, expressions, budget)
    if violations:
        return Result(
            violations=violations, warnings=not_checked, summary=_summary(request, "do not compile")
        )

    action = _action(ctx)
    if action == "off" or not requests or Kind.RESOURCE_SLICE not in ctx.view.synced_kinds():
        return Result(warnings=not_checked) if not_checked else ALLOW
    label = f"{request.kind} {request.namespace}/{request.name}".replace(" /", " ")
    verdict = runtime.model.check(
        [ClaimInput(label, parsed)],
        ctx.view.device_classes(),
        ctx.view.index(Allocations),
        classes_generation=ctx.view.generation(Kind.DEVICE_CLASS),
        budget=budget,
    )
    notes = tuple(str(Violation(n.path, n.message)) for n in verdict.notes)
    warnings = (*not_checked, *notes)
    if verdict.outcome == NOT_NOW:
        later = tuple(str(Violation(p.path, p.message)) for p in verdict.problems)
        return Result(warnings=(*warnings, *later))
    if verdict.outcome != NEVER:
        return Result(warnings=warnings) if warnings else ALLOW
    problems = [(p.path, p.message) for p in verdict.problems]
    if action == "deny":
        return Result(
            violations=tuple(Violation(path, problem) for path, problem in problems),
            warnings=warnings,
            summary=f"no device in the cluster can satisfy {request.kind} {request.name}".strip(),
            details="Its pods would stay Pending: change the selectors or the count, or add "
            "devices first.",
        )
    return Result(warnings=(*warnings, *(f"{path}: {problem}" for path, problem in problems)))


def check_pod(request: Request, ctx: Context) -> Result:
    """A pod's claims taken together: the scheduler allocates all of them on one node.

    Each claim was checked alone when it (or its template) was created; a pod with two or more
    claims is checked here jointly (a pod with two 2-GPU claims on 2-GPU nodes is never
    schedulable though each claim is fine); one with a single claim is not checked again. A named
    claim that is already allocated is left out: its devices are taken and its node is fixed,
    which the view (no Node objects, no allocation node selectors) cannot match against the
    others. Within the review's CEL budget, as :func:`check`.
    """
    obj = request.object
    spec = obj.get("spec") if obj is not None else None
    entries = spec.get("resourceClaims") if isinstance(spec, Mapping) else None
    action = _action(ctx)
    if not isinstance(entries, list) or len(entries) < 2 or action == "off":
        return ALLOW  # (most pods: nothing to read)
    if Kind.RESOURCE_SLICE not in ctx.view.synced_kinds():
        return ALLOW
    claims_in = []
    for i, entry in enumerate(entries):
        found = _pod_claim(entry, request.namespace, ctx)
        if found is not None:
            label, parsed = found
            claims_in.append(ClaimInput(label, parsed, f"spec.resourceClaims[{i}] ({label}) "))
    if len(claims_in) < 2:
        return ALLOW
    return pod_verdict(ctx, claims_in, f"Pod {request.name}".strip())


def pod_verdict(ctx: Context, claims_in: Sequence[ClaimInput], subject: str) -> Result:
    """The allocation model's verdict on claims a pod uses together, as an admission result:
    "never" denied or warned per `cel.selectors.unsatisfiable`, "not now" warned. Also what
    translation asks about the claims it is about to make (`policies.translate`)."""
    action = _action(ctx)
    if action == "off" or Kind.RESOURCE_SLICE not in ctx.view.synced_kinds():
        return ALLOW
    budget = Budget(ctx.policy.cel.review_budget)
    alternatives = (a for c in claims_in for r in c.spec.requests for a in r.alternatives)
    budget.memoize_unless_over(e for a in alternatives for _, e in a.selectors)
    try:
        verdict = ctx.parts[cel_runtime].model.check(
            claims_in,
            ctx.view.device_classes(),
            ctx.view.index(Allocations),
            classes_generation=ctx.view.generation(Kind.DEVICE_CLASS),
            budget=budget,
        )
    except BudgetExceededError as exc:
        return Result(warnings=(f"{subject}: {exc}; claims not checked together",))
    problems = tuple(Violation(p.path, p.message) for p in verdict.problems)
    if verdict.outcome == NEVER and action == "deny":
        return Result(
            violations=problems,
            summary=f"no node in the cluster can satisfy the claims of {subject}",
            details="The scheduler allocates all of a pod's claims on one node; it would stay "
            "Pending.",
        )
    if verdict.outcome in (NEVER, NOT_NOW):
        return Result(warnings=tuple(str(p) for p in problems))
    return ALLOW


def _pod_claim(entry: Any, namespace: str, ctx: Context) -> tuple[str, claims.ClaimSpec] | None:
    """The claim spec behind a pod's ``resourceClaims`` entry (named claim or template), from
    the view; None when it is unknown, already allocated, or malformed (its own admission
    reports that)."""
    if not isinstance(entry, Mapping):
        return None
    name, template = entry.get("resourceClaimName"), entry.get("resourceClaimTemplateName")
    if isinstance(name, str) and name:
        claim = ctx.view.get(Kind.RESOURCE_CLAIM, name, namespace)
        if claim is None or (claim.get("status") or {}).get("allocation"):
            return None
        parsed = claims.parse_claim_spec(claim.get("spec"))
        label = f"claim {name}"
    elif isinstance(template, str) and template:
        found = ctx.view.get(Kind.RESOURCE_CLAIM_TEMPLATE, template, namespace)
        if found is None:
            return None
        try:
            inner, path = claims.template_claim_spec(found)
        except ObjectShapeError:
            return None
        parsed = claims.parse_claim_spec(inner, path)
        label = f"template {template}"
    else:
        return None
    if parsed.first_error(SELECTING) is not None or not parsed.requests:
        return None
    return label, parsed


def compile_check(
    runtime: CelRuntime, selectors: Sequence[tuple[str, str]], budget: Budget | None = None
) -> tuple[tuple[Violation, ...], tuple[str, ...]]:
    """A violation per selector that does not compile, with position and message; a warning
    per selector this webhook's engine cannot check (:func:`app.cel.gaps.engine_gap`). Each
    selector not yet compiled costs `budget` a compile."""
    violations = []
    not_checked = []
    for path, expression in selectors:
        if budget is not None:
            cached = runtime.cache.is_cached(runtime.engine, expression, SELECTOR)
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
    return f"{request.kind} {request.name}: CEL selectors {what}".replace("  ", " ")


def _action(ctx: Context) -> str:
    checks = ctx.policy.cel.selectors
    if ctx.mode is not None:
        for mode, action in checks.unsatisfiable_by_mode.items():
            if mode == ctx.mode.value:
                return action
    return checks.unsatisfiable


# -- reading the objects ----------------------------------------------------------------------


def _map(value: Any, path: str) -> Mapping[str, Any]:
    if type(value) is dict:  # the common case, without the ABC check
        return value
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ObjectShapeError(path, "must be an object")
    return value


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
