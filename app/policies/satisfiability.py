"""Satisfiability: the allocation model's verdict (:mod:`app.allocation`) as an admission result.

A claim that no node could take even with every device free ("never": too few matching devices
in the cluster or on any one node, constraints, taints, shared counters, capacity, or a CEL
runtime error the scheduler aborts on) is warned about or denied (``cel.selectors`` in the
policy, per namespace mode), with the nearest miss ("asks for 4 devices on one node; the most on
any node is 2 (node-a, node-b)"); one that some node could take once other claims release their
devices ("not now") is always only warned about. A ``firstAvailable`` request is fine when any
of its alternatives is. A request whose selectors (or whose DeviceClass's selectors) hit a gap
of this webhook's CEL engine (:mod:`app.cel.gaps`) is not checked: it is taken as
satisfiable, with a warning.

Four callers: the selector check, for one claim or template once its selectors compile
(:func:`claim_verdict`); the ``pod-satisfiability`` check, for a pod's claims together
(:func:`check_pod`); the ``group-satisfiability`` check, for each group claim of a Workload or
PodGroup (:func:`check_group`); and translation, for the claims it is about to make
(:func:`pod_verdict`).

A group claim (`app.policies.groups`) is one claim for every pod of the group: it is judged
alone, when its Workload or PodGroup is created, and answered as a pod's claims are ("never"
per policy, "not now" warned), so a group whose shared devices no node can give learns at
apply time, not from a PodGroup that never schedules. A pod's entry that is its PodGroup's
claim is left out of the pod's joint check: the group holds that claim, judged with the group.

A pod's extended resources that a DeviceClass maps (``nvidia.com/gpu`` under
``spec.extendedResourceName``, ``deviceclass.resource.kubernetes.io/<class>``) are the one
claim the scheduler makes for them (:mod:`app.policies.mapped`), judged with the pod's own
claims, per node, in a pod and in a workload's pod templates: "spec.containers[0].resources.
limits[nvidia.com/gpu]: asks for 16 nvidia.com/gpu, which the scheduler serves from DeviceClass
gpu.nvidia.com (extendedResourceName): never: the most on any node is 8 (node-a)". Every node
counts as one without a device plugin for the name (the view holds no Node status): where a
plugin still serves it, the scheduler uses the plugin there, so a name a class maps through
`extendedResourceName` is only ever warned about; the implicit names, which no device plugin
can serve, are denied where the policy says so.

The scheduler would otherwise leave the pod Pending with no message. Devices come from the cluster
view through :class:`~app.devices.index.DeviceIndex`; the verdict is memoized by the claim's
shape and the view's generations, so a repeated claim shape costs a lookup.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from app.allocation import NEVER, NOT_NOW, Allocations, ClaimInput
from app.allocation.holders import DeviceHolders
from app.cel.cost import Budget, BudgetExceededError
from app.cluster.release import ServedRelease
from app.cluster.view import Kind
from app.errors import ObjectShapeError
from app.k8s import claims
from app.k8s.claim_spec import ClaimSpec
from app.k8s.claims import SELECTING
from app.k8s.groups import pod_claim_key
from app.k8s.objects import PodSpecRef
from app.k8s.priority import Priority
from app.policies import preemption
from app.policies.base import ALLOW, Context, Request, Result, Violation, failure_answer, subject
from app.policies.cel_runtime import cel_runtime
from app.policies.groups import claims_of, named_spec, shared_keys
from app.policies.mapped import MappedRequest, left_to_scheduler, reword, special_claim
from app.policies.workloads import combine, old_specs, templates

FIRST_DISTINCT_BY_VALUE = 35
"""Kubernetes 1.34's allocator (k8s.io/dynamic-resource-allocation v0.34, constraint.go
`matchesAttribute`) compares the attribute values' pointers, which differ for every device: a
`distinctAttribute` there only asks that each device have the attribute. 1.35 compares values."""


def as_scheduled(spec: ClaimSpec, release: ServedRelease) -> tuple[ClaimSpec, tuple[str, ...]]:
    """The claim as the release's scheduler allocates it, and what the author should know.

    On 1.34 a `distinctAttribute` holds for any devices that have the attribute, equal values
    included (seen on a real 1.34.12: two H100s given to a distinctAttribute on productName;
    a GPU with a MIG device lacking the attribute stays unschedulable; the seeded differential,
    tests/e2e/test_satisfiability_differential.py, agrees on both). The model checks it that way
    there, and the author is told the values may repeat."""
    minor = release.minor
    if minor is None or minor >= FIRST_DISTINCT_BY_VALUE:
        return spec, ()
    if not any(c.distinct_attribute for c in spec.constraints):
        return spec, ()
    constraints = tuple(
        replace(c, compares_values=False) if c.distinct_attribute else c for c in spec.constraints
    )
    said = tuple(
        str(
            Violation(
                c.path,
                f"not enforced: {release.name}'s scheduler checks only that each device has "
                f"distinctAttribute {c.distinct_attribute}, not that the values differ (fixed "
                f"in 1.35): requests {', '.join(c.requests) or '(all)'} may get devices that "
                "share it",
            )
        )
        for c in spec.constraints
        if c.distinct_attribute
    )
    return replace(spec, constraints=constraints), said


def claim_verdict(
    request: Request, ctx: Context, budget: Budget, not_checked: tuple[str, ...] = ()
) -> Result:
    """One claim or template alone, once its selectors compile (`selectors.check`, within its
    budget: a BudgetExceededError goes back to it). "Never" is denied or warned per
    `cel.selectors.unsatisfiable`, "not now" warned; `not_checked` are the compile check's
    warnings, kept in the answer."""
    action = _action(ctx)
    if action == "off" or Kind.RESOURCE_SLICE not in ctx.view.synced_kinds():
        return Result(warnings=not_checked) if not_checked else ALLOW
    release = ctx.view.release
    spec, unenforced = as_scheduled(request.claim_spec(), release)
    claim = ClaimInput(subject(request), spec, counters_back=release.frees_refused_counters)
    verdict = ctx.parts[cel_runtime].model.check(
        [claim],
        ctx.view.device_classes(),
        ctx.view.index(Allocations),
        classes_generation=ctx.view.generation(Kind.DEVICE_CLASS),
        budget=budget,
    )
    notes = tuple(str(Violation(n.path, n.message)) for n in verdict.notes)
    warnings = (*not_checked, *unenforced, *notes)
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
            summary=f"no device in the cluster can satisfy {subject(request)}",
            details="Its pods would stay Pending: change the selectors or the count, or add "
            "devices first.",
        )
    return Result(warnings=(*warnings, *(f"{path}: {problem}" for path, problem in problems)))


def check_pod(request: Request, ctx: Context) -> Result:
    """A pod's claims taken together: the scheduler allocates all of them on one node, and with
    them the claim it makes for the pod's mapped names (:mod:`app.policies.mapped`).

    Each claim was checked alone when it (or its template) was created; a pod with two or more
    claims is checked here jointly (a pod with two 2-GPU claims on 2-GPU nodes is never
    schedulable though each claim is fine); one with a single claim is not checked again,
    unless it also asks for a name a DeviceClass maps (`nvidia.com/gpu: 16` served from
    gpu.nvidia.com: never, on 8-GPU nodes). A named claim that is already allocated is left out:
    its devices are taken and its node is fixed, which the view (no allocation node selectors)
    cannot match against the others. Within the review's CEL budget, as the selector check.

    A workload (Deployment, Job, an operator's kind) is judged per pod template when its pods
    ask for mapped names, on CREATE and when an UPDATE changes them: its user learns at apply
    time, not from Pending pods.
    """
    obj = request.object
    if obj is None or _action(ctx) == "off":
        return ALLOW
    if request.kind != "Pod":
        return _check_templates(request, ctx)
    if request.operation != "CREATE":
        return ALLOW
    try:
        found = templates(request, ctx)  # (a Pod's one: its spec, as decoded)
    except ObjectShapeError:
        return ALLOW  # (dra-only and translation name the field)
    if not found:
        return ALLOW
    ref = found[0].spec
    entries = ref.spec.get("resourceClaims")
    mapped = _mapped(request.kind, ref, ctx)
    if not mapped and (not isinstance(entries, list) or len(entries) < 2):
        return ALLOW  # (most pods: nothing to read)
    if Kind.RESOURCE_SLICE not in ctx.view.synced_kinds():
        return ALLOW
    claims_in = _claims_of(ref, request.namespace, ctx)
    if not mapped and len(claims_in) < 2:
        return ALLOW
    return pod_verdict(
        ctx,
        claims_in,
        subject(request),
        mapped=mapped,
        spec_path=ref.path,
        priority=pod_priority(ref, ctx),
    )


def _check_templates(request: Request, ctx: Context) -> Result:
    """The pod templates of a workload whose pods ask for mapped names (new ones on UPDATE)."""
    if Kind.RESOURCE_SLICE not in ctx.view.synced_kinds():
        return ALLOW
    try:
        found = templates(request, ctx)
        old = old_specs(request, ctx)
    except ObjectShapeError:
        return ALLOW  # (dra-only and translation name the field)
    results = []
    for template in found:
        spec = template.spec
        mapped = _mapped(request.kind, spec, ctx)
        if not mapped:
            continue
        before = old.get(spec.path)
        if before is not None and _same(_mapped(request.kind, before, ctx), mapped):
            continue  # judged when it was written
        claims_in = _claims_of(spec, request.namespace, ctx)
        what = f"the pods of {subject(request)}"
        results.append(
            pod_verdict(
                ctx,
                claims_in,
                what,
                mapped=mapped,
                spec_path=spec.path,
                priority=pod_priority(spec, ctx),
            )
        )
    return combine(results)


def _mapped(kind: str, spec: PodSpecRef, ctx: Context) -> tuple[MappedRequest, ...]:
    """The spec's requests for names a DeviceClass maps that reach the scheduler as written."""
    try:
        return left_to_scheduler(kind, spec, ctx)
    except ObjectShapeError:
        return ()  # (dra-only and translation name the field)


def _same(a: Sequence[MappedRequest], b: Sequence[MappedRequest]) -> bool:
    def key(m: MappedRequest) -> tuple[str, str, int, str]:
        return (m.request_name, m.resource, m.count, m.device_class)

    return [key(m) for m in a] == [key(m) for m in b]


def _claims_of(spec: PodSpecRef, namespace: str, ctx: Context) -> list[ClaimInput]:
    """The claims of a pod spec's `resourceClaims` the view knows and can judge (not those of
    its PodGroup: the group's, judged with the group)."""
    entries = spec.spec.get("resourceClaims")
    group = shared_keys(spec.spec, namespace, ctx.view)
    claims_in = []
    for i, entry in enumerate(entries if isinstance(entries, list) else ()):
        if group and pod_claim_key(entry) in group:
            continue
        found = _pod_claim(entry, namespace, ctx)
        if found is not None:
            label, parsed = found
            where = f"{spec.path}.resourceClaims[{i}] ({label}) "
            scheduled, _ = as_scheduled(parsed, ctx.view.release)  # said when it was created
            claims_in.append(ClaimInput(label, scheduled, where))
    return claims_in


def check_group(request: Request, ctx: Context) -> Result:
    """Each group claim of a Workload or PodGroup, alone, on CREATE (the field is immutable):
    the claim or template it names, from the view; a named claim already allocated is left out.
    Raises ObjectShapeError for a malformed `resourceClaims`."""
    if request.object is None or request.operation != "CREATE" or _action(ctx) == "off":
        return ALLOW
    found = claims_of(request)
    if not found or Kind.RESOURCE_SLICE not in ctx.view.synced_kinds():
        return ALLOW
    results = []
    for claim in found:
        named = named_spec(claim, request.namespace, ctx.view)
        if named is None:
            continue
        stored, parsed = named
        status = stored.get("status")
        if claim.claim_name is not None and isinstance(status, dict) and status.get("allocation"):
            continue  # its devices are taken, its node fixed
        if parsed.first_error(SELECTING) is not None or not parsed.requests:
            continue  # its own admission reports that
        scheduled, _ = as_scheduled(parsed, ctx.view.release)  # said when it was created
        where = f"{claim.field} ({claim.label}) "
        what = f"group claim {claim.name} of {subject(request)}"
        results.append(pod_verdict(ctx, [ClaimInput(claim.label, scheduled, where)], what))
    return combine(results)


def pod_verdict(
    ctx: Context,
    claims_in: Sequence[ClaimInput],
    what: str,
    *,
    mapped: Sequence[MappedRequest] = (),
    spec_path: str = "spec",
    priority: Priority | None = None,
) -> Result:
    """The allocation model's verdict on claims a pod uses together, as an admission result:
    "never" denied or warned per `cel.selectors.unsatisfiable`, "not now" warned. Also what
    translation asks about the claims it is about to make (`policies.translate`). `mapped`:
    the pod's requests the scheduler serves from DeviceClasses, judged as the one claim it
    makes for them (`mapped.special_claim`), their problems put on the containers' fields.
    `priority`: the pod's, when known; a "not now" then also says whether the devices are held
    by pods of lower priority, which DRA will not preempt (`preemption.held_by`)."""
    action = _action(ctx)
    if action == "off" or Kind.RESOURCE_SLICE not in ctx.view.synced_kinds():
        return ALLOW
    if mapped:
        claims_in = [*claims_in, special_claim(mapped, spec_path)]
    back = ctx.view.release.frees_refused_counters
    claims_in = [
        c if c.counters_back == back else replace(c, counters_back=back) for c in claims_in
    ]
    budget = Budget(ctx.policy.cel.review_budget, ctx.policy.cel.compile_budget)
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
        # open whatever failure.celBudget says: each claim was judged alone, under it, when it
        # was admitted; the budget only cut the joint check short
        return failure_answer("open", f"{what}: {exc}", skipped="claims not checked together")
    found = verdict.problems
    if mapped:
        words = "never" if verdict.outcome == NEVER else "not now"
        found = reword(found, mapped, words, spec_path)
    problems = tuple(Violation(p.path, p.message) for p in found)
    if any(not m.implicit for m in mapped):
        # never from the class's devices, yet a node whose device plugin still advertises the
        # name would take the pod: not ours to refuse (app.policies.mapped, "Nodes with a
        # device plugin")
        action = "warn"
    if verdict.outcome == NEVER and action == "deny":
        if not mapped:
            return Result(
                violations=problems,
                summary=f"no node in the cluster can satisfy the claims of {what}",
                details="The scheduler allocates all of a pod's claims on one node; it would "
                "stay Pending.",
            )
        claims = "claims and " if len(claims_in) > 1 else ""
        return Result(
            violations=problems,
            summary=f"no node in the cluster can satisfy the {claims}extended resources of {what}",
            details="The scheduler allocates all of a pod's claims, and the claim it makes for "
            "the extended resources a DeviceClass serves, on one node; it would stay Pending.",
        )
    if verdict.outcome == NOT_NOW and priority is not None and verdict.held:
        holders = ctx.view.index(DeviceHolders).of(verdict.held)
        said = preemption.held_by(ctx, holders, priority) if holders else None
        if said is not None:
            problems = (*problems, Violation(spec_path, f"not now: {said}"))
    if verdict.outcome in (NEVER, NOT_NOW):
        return Result(warnings=tuple(str(p) for p in problems))
    return ALLOW


def pod_priority(spec: PodSpecRef, ctx: Context) -> Priority | None:
    """The priority of the pods of `spec` (app.k8s.priority), None when its class is unknown."""
    return ctx.parts[preemption.known_classes].classes(ctx.view).of_spec(spec.spec)


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


def _action(ctx: Context) -> str:
    checks = ctx.policy.cel.selectors
    if ctx.mode is not None:
        for mode, action in checks.unsatisfiable_by_mode.items():
            if mode == ctx.mode.value:
                return action
    return checks.unsatisfiable
