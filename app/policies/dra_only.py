"""dra-only namespaces: legacy extended resources are denied, audit namespaces are warned.

Checked in every container kind (containers, initContainers and sidecars, ephemeralContainers),
in both requests and limits, on Pods and on the pod templates of workloads, so a user learns at
`kubectl apply` of the Deployment rather than from a ReplicaSet that silently makes no pods.

On UPDATE only offences the old object did not have are denied: a pod that predates the label can
still be relabelled or finalized, and is warned about instead.

A denial's text (the offences, the fix, the resourceClaims snippet) depends only on the shape of
the offending requests, the namespace and the DeviceClasses: pods of one Deployment, or one
user retrying, repeat it. It is built once per shape and reused (`answers`); the scan for
legacy requests still runs on every review, since the memo is keyed by what it finds (on
CREATE straight over the dicts, `_raw_shape`, so a known shape builds no objects).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable

from app.bounded import BoundedCache, CacheName
from app.cluster.view import Kind
from app.k8s.objects import CONTAINER_FIELDS, PodSpecRef
from app.k8s.quantity import is_zero
from app.policies.base import ALLOW, Context, Mode, Request, Result, Violation
from app.policies.builders import legacy_matcher, mapping_resolver, plan_for, translation_rules
from app.policies.exceptions import Applied, cover, policy_exceptions
from app.policies.mapped import scheduler_class
from app.policies.parts import Parts
from app.policies.workloads import combine, finding_result, findings, per_template, templates
from app.translation.legacy import (
    DeviceMapping,
    LegacyMatcher,
    LegacyRequest,
    legacy_requests,
    offence_keys,
)
from app.translation.templates import readable_name
from app.workloads import counted

ANSWERS_KEPT = 4096
"""Distinct shapes remembered; shapes come from users, so the memo is bounded (LRU)."""


def answers(parts: Parts) -> BoundedCache[Hashable, Result]:
    """Builder: dra-only's answers by request shape, one memo per pipeline (the policy it was
    built from is part of every answer)."""
    return BoundedCache(CacheName.DRA_ONLY_ANSWERS, ANSWERS_KEPT)


def _shape(found: list[LegacyRequest]) -> tuple[Hashable, ...]:
    """What the text of a finding depends on: where, which container, which resource, how much
    (as text: the messages print it), and whether it was a limit or a request."""
    return tuple(
        (
            r.container.path,
            r.container.name,
            r.container.is_sidecar,
            r.resource,
            r.limit is not None,
            str(r.amount),
        )
        for r in found
    )


def _raw_shape(spec: PodSpecRef, is_legacy: LegacyMatcher) -> tuple[Hashable, ...] | None:
    """`_shape(legacy_requests(spec, is_legacy))` read straight from the containers as decoded
    (`PodSpecRef.read`), without the LegacyRequest objects; None when a container could not be
    read (the caller then takes that path, which raises with the field path)."""
    if spec.error is not None:
        return None
    shape: list[Hashable] = []
    for ref in spec.read:
        if ref.error is not None:
            return None
        limits = ref.limits
        requests = ref.requests
        if not limits and not requests:
            continue
        names = [n for n in limits if is_legacy(n)]
        names += [n for n in requests if n not in limits and is_legacy(n)]
        if not names:
            continue
        # a count of zero asks for nothing (`legacy_requests` leaves it out too)
        names = [n for n in names if not (is_zero(limits.get(n)) and is_zero(requests.get(n)))]
        for resource in names:
            in_limits = resource in limits
            amount = limits[resource] if in_limits else requests[resource]
            shape.append((ref.path, ref.name, ref.is_sidecar, resource, in_limits, str(amount)))
    return tuple(shape)


def check(request: Request, ctx: Context) -> Result:
    if ctx.mode not in (Mode.DRA_ONLY, Mode.AUDIT) or request.object is None:
        return ALLOW
    specs = templates(request, ctx)
    if len(specs) == 1 and request.operation == "CREATE":  # a Pod, a Deployment: the hot path
        result = _check_spec(request, ctx, specs[0].spec, None)
    else:
        result = per_template(request, ctx, lambda spec, old: _check_spec(request, ctx, spec, old))
    is_legacy = ctx.parts[legacy_matcher]
    said = counted(request.group, request.kind, request.object, is_legacy)
    if said:  # a NodePool's limits, a ClusterQueue's quota: no request, never denied
        result = combine((result, Result(warnings=said)))
    found = findings(request, ctx, is_legacy)
    if not found:
        return result
    reported = finding_result(
        request,
        ctx,
        found,
        is_legacy,
        label=_label(ctx),
        what=(
            f"namespace {request.namespace} is dra-only ({_label(ctx)}): request GPUs through "
            "DRA resourceClaims; dra-webhook cannot rewrite these"
        ),
    )
    return combine((result, reported))


def _check_spec(request: Request, ctx: Context, spec: PodSpecRef, old: PodSpecRef | None) -> Result:
    """The rule over one pod spec of the object (`old`: the old object's at the same path)."""
    exceptions = ctx.parts[policy_exceptions]
    if exceptions:
        selecting = exceptions.selecting(request.kind, spec, ctx.namespace_labels)
        if selecting:
            return _excepted(request, ctx, spec, old, selecting)
    is_legacy = ctx.parts[legacy_matcher]
    if request.operation == "CREATE" and not ctx.policy.dra_only.allows_mapped_names:
        # the common case: a shape seen before costs a scan of the dicts and a lookup
        shape = _raw_shape(spec, is_legacy)
        if shape == ():
            return ALLOW
        if shape is not None:
            key = _memo_key(request, ctx, spec, shape, frozenset(), warned=_warned(request, ctx))
            known = ctx.parts[answers].get(key)
            if known is not None:
                return known
    found, mapped = _found(spec, ctx)
    result = (
        _judge(request, ctx, spec, old, found, warned=_warned(request, ctx)) if found else ALLOW
    )
    return _served(ctx, result, mapped, old) if mapped else result


def _found(
    spec: PodSpecRef, ctx: Context
) -> tuple[list[LegacyRequest], list[tuple[LegacyRequest, str]]]:
    """The legacy requests of a pod spec the rule is about, and (with `draOnly.mappedNames:
    allow`) those it lets through because a DeviceClass maps their name, with that class."""
    found = legacy_requests(spec, ctx.parts[legacy_matcher])
    if not found or not ctx.policy.dra_only.allows_mapped_names:
        return found, []
    offences, mapped = [], []
    for r in found:
        served = scheduler_class(r.resource, ctx.view)
        if served is None:
            offences.append(r)
        else:
            mapped.append((r, served[0]))
    return offences, mapped


def _served(
    ctx: Context,
    result: Result,
    mapped: list[tuple[LegacyRequest, str]],
    old: PodSpecRef | None,
) -> Result:
    """`result` with a warning per legacy request let through because a DeviceClass maps its
    name (`draOnly.mappedNames: allow`): which class serves it, and that a node still running
    the device plugin for the name serves it there, outside DRA (the scheduler prefers the
    plugin where one advertises the name). Said when the object (or its pod template) is new;
    an UPDATE of what was admitted before is not told again."""
    if old is not None:
        return result
    effect = "allowed" if ctx.mode is Mode.DRA_ONLY else "would be allowed in dra-only"
    warnings = tuple(
        f"{r.path}: {_offence(r)}: {effect}: the scheduler serves it from DeviceClass "
        f"{device_class}; nodes still running the device plugin would serve it there"
        for r, device_class in mapped
    )
    return dataclasses.replace(result, warnings=(*result.warnings, *warnings))


def _judge(
    request: Request,
    ctx: Context,
    spec: PodSpecRef,
    old: PodSpecRef | None,
    found: list[LegacyRequest],
    *,
    warned: bool = False,
) -> Result:
    """The rule over legacy requests `found` (not empty), memoized by their shape. `warned`:
    the chart's admission policy already warned the user of them (audit, see `_warned`)."""
    existing: frozenset[tuple[str, str, str]] = frozenset()
    if old is not None:
        existing = offence_keys(legacy_requests(old, ctx.parts[legacy_matcher]))
    memo_key = _memo_key(request, ctx, spec, _shape(found), existing, warned=warned)
    memo = ctx.parts[answers]
    known = memo.get(memo_key)
    if known is not None:
        return known
    label = _label(ctx)
    return memo.put(
        memo_key,
        _decide(
            request, ctx, spec=spec, found=found, label=label, existing=existing, warned=warned
        ),
    )


def _excepted(
    request: Request,
    ctx: Context,
    spec: PodSpecRef,
    old: PodSpecRef | None,
    selecting: tuple[Applied, ...],
) -> Result:
    """An object some policy exception selects: what an active one covers is allowed (in
    audit namespaces: not reported as an offence) with the exception's warning, the rest is
    judged as usual. Not memoized: the answer depends on the date."""
    found, mapped = _found(spec, ctx)
    if not found:
        return _served(ctx, ALLOW, mapped, old) if mapped else ALLOW
    coverage = cover(selecting, found)
    result = _judge(request, ctx, spec, old, coverage.rest) if coverage.rest else ALLOW
    effect = (
        "allowed in this dra-only namespace"
        if ctx.mode is Mode.DRA_ONLY
        else "would be allowed in a dra-only namespace"
    )
    ended = [f"exception {a.name} {a.when()} no longer applies" for a in coverage.ended]
    if mapped:
        result = _served(ctx, result, mapped, old)
    return dataclasses.replace(
        result,
        warnings=(*coverage.warnings(effect), *result.warnings),
        details="\n".join(t for t in (*ended, result.details) if t) if result.denied else "",
        excepted=tuple(a.name for a in coverage.used),
    )


def _label(ctx: Context) -> str:
    key = ctx.policy.namespace_modes.label
    return f"{key}={ctx.namespace_labels.get(key, '')}"


def _memo_key(
    request: Request,
    ctx: Context,
    spec: PodSpecRef,
    shape: tuple[Hashable, ...],
    existing: frozenset[tuple[str, str, str]],
    *,
    warned: bool,
) -> Hashable:
    """Everything a dra-only answer depends on besides the policy (one memo per Pipeline)."""
    unlisted = ctx.parts[translation_rules].unlisted_counts
    return (
        ctx.mode,
        warned,
        request.namespace,
        _label(ctx),
        spec.path,
        ctx.view.generation(Kind.DEVICE_CLASS),  # mappings through extendedResourceName
        shape,
        existing,
        _amounts(spec, unlisted) if unlisted else (),
    )


def _amounts(spec: PodSpecRef, names: frozenset[str]) -> tuple[Hashable, ...]:
    """Where each of `names` is asked for and how much (as text), limits before requests."""
    found: list[Hashable] = []
    for field in CONTAINER_FIELDS:
        items = spec.spec.get(field)
        for index, container in enumerate(items if type(items) is list else ()):
            resources = container.get("resources") if type(container) is dict else None
            for kind in ("limits", "requests"):
                asked = resources.get(kind) if type(resources) is dict else None
                if type(asked) is dict:
                    found += [(field, index, kind, n, str(asked[n])) for n in names if n in asked]
    return tuple(found)


def _decide(
    request: Request,
    ctx: Context,
    *,
    spec: PodSpecRef,
    found: list[LegacyRequest],
    label: str,
    existing: frozenset[tuple[str, str, str]],
    warned: bool,
) -> Result:
    if ctx.mode is Mode.AUDIT and warned:
        return Result(findings=len(found))  # counted; the admission policy said it to the user
    if ctx.mode is Mode.AUDIT:
        return Result(
            warnings=tuple(
                f"{r.path}: {_offence(r)}: would be denied in a dra-only namespace ({label}); "
                f"use DRA resourceClaims instead"
                for r in found
            ),
            findings=len(found),
        )
    new = [r for r in found if (r.container.field, r.container.name, r.resource) not in existing]
    kept = [r for r in found if (r.container.field, r.container.name, r.resource) in existing]
    warnings = tuple(
        f"{_offence(r)}: predates the {label} label; new objects like it will be denied"
        for r in kept
    )
    if not new:
        return Result(warnings=warnings)

    sharing = ctx.parts[translation_rules].sharing
    mappings = ctx.parts[mapping_resolver]
    shared = {id(r): text for r in new if (text := sharing.fix(r)) is not None}
    resolved = [
        (r, None if id(r) in shared else mappings.resolve(r.resource, ctx.view)) for r in new
    ]
    # the claims translation (and `migrate`) would make, named as `migrate` names their
    # templates: the fix, the translated pod and the rewritten manifest agree
    details = (
        fix_snippet(spec, request.namespace, ctx) if any(m for _, m in resolved) or shared else ""
    )
    return Result(
        violations=tuple(
            Violation(r.path, f"{_offence(r)} -> {shared.get(id(r)) or _fix(mapping, r)}")
            for r, mapping in resolved
        ),
        warnings=warnings,
        summary=(
            f"namespace {request.namespace} is dra-only ({label}): "
            "request GPUs through DRA resourceClaims, not extended resources"
        ),
        details=details,
    )


ADMISSION_POLICY_KINDS = frozenset(
    {
        ("", "Pod"),
        ("", "ReplicationController"),
        ("apps", "Deployment"),
        ("apps", "ReplicaSet"),
        ("apps", "StatefulSet"),
        ("apps", "DaemonSet"),
        ("batch", "Job"),
        ("batch", "CronJob"),
    }
)
"""What the chart's ValidatingAdmissionPolicy matches (templates/admissionpolicy.yaml), CREATE
only."""


def _warned(request: Request, ctx: Context) -> bool:
    """Whether the chart's admission policy warns of this object's offences in audit
    namespaces itself (CREATE of a kind it matches). Not for an object a policy exception
    selects: the admission policy skips those, and the webhook says which requests the exception
    leaves uncovered."""
    return (
        ctx.policy.dra_only.audit_warned_by_admission_policy
        and request.operation == "CREATE"
        and (request.group, request.kind) in ADMISSION_POLICY_KINDS
    )


def _offence(r: LegacyRequest) -> str:
    kind = {"initContainers": "init container", "ephemeralContainers": "ephemeral container"}
    what = (
        "sidecar container" if r.container.is_sidecar else kind.get(r.container.field, "container")
    )
    return f"{what} {r.container.name} asks for {r.resource}: {r.amount}"


def _fix(mapping: DeviceMapping | None, r: LegacyRequest) -> str:
    if mapping is None:
        return (
            f"no DeviceClass is known for {r.resource}; ask the cluster admin to add a "
            "`mappings` entry for it to the dra-webhook policy"
        )
    return f"use DeviceClass {mapping.device_class_name} (count {r.amount})"


MIGRATE_HINT = (
    "Manifests kept in Git: `dra-webhook migrate --write FILE...` makes this change and writes "
    "the templates (docs/migrate.md)."
)


def fix_snippet(spec: PodSpecRef, namespace: str, ctx: Context) -> str:
    """The claims translation would make, from its plan: the same claims, init-container layout
    and capacity requests as a translated pod, with the template names `migrate` writes."""
    planned = plan_for(spec, namespace, ctx)
    prefix = ctx.policy.translation.template_name_prefix
    lines = [f"Remove the resources above and add to {spec.path}:", "  resourceClaims:"]
    for claim in planned.claims:
        if claim.template is None:
            continue
        exactly = claim.template.template["spec"]["spec"]["devices"]["requests"][0]["exactly"]
        body = f"deviceClassName: {exactly['deviceClassName']}, count: {exactly['count']}"
        if "capacity" in exactly:
            requests = ", ".join(f"{k}: {v}" for k, v in exactly["capacity"]["requests"].items())
            body += f", capacity: {{requests: {{{requests}}}}}"
        if "selectors" in exactly:
            body += f", selectors: {[s['cel']['expression'] for s in exactly['selectors']]}"
        template = readable_name(prefix, claim.mapping, claim.count) or claim.template.name
        lines += [
            f"  - name: {claim.name}",
            f"    resourceClaimTemplateName: {template}  # a ResourceClaimTemplate "
            f"with devices.requests[0].exactly: {{{body}}}",
        ]
    for pointer, claims in planned.claims_of.items():
        ref = planned.removed()[pointer][0]
        lines += [f"  {ref.field}:", f"  - name: {ref.name}", "    resources:", "      claims:"]
        lines += [f"      - name: {c}" for c in claims]
    lines += [f"  # not translatable: {p.path}: {p.message}" for p in planned.all_problems]
    lines.append(MIGRATE_HINT)
    return "\n".join(lines)
