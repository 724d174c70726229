"""gpu-mode=translate namespaces: legacy extended-resource requests become DRA resource claims.

A container asking for `nvidia.com/gpu: 2` is rewritten to ask for two devices of the mapped
DeviceClass through a pod-level claim made from a ResourceClaimTemplate; nothing else about the
pod changes. What a pod spec becomes is decided by `app.translation.plan` (its rules are written
out there and, for users, in docs/translation.md); this module is the admission side of it:

- The mutating policy turns a plan into a JSONPatch and the templates to create, or denies the
  pod listing every problem (or the cap it goes over).
- Running on its own output changes nothing: no legacy name is left to translate.
- A request the policy leaves to the scheduler (`translation.leaveMapped`, a `mappings` rule's
  `leaveToScheduler`: where a DeviceClass maps the name and the scheduler's own path gives the
  pod what translation would, app.translation.leave) stays as written, with a warning saying
  which class serves it; a pod with nothing else to translate gets no patch.

Pods are translated on CREATE; workload pod templates only with `translation.translateWorkloads`,
and otherwise validated at apply time (`validate`), so an untranslatable Deployment is refused
when it is applied rather than when its ReplicaSet silently fails to create pods.

An object a policy exception covers is left untranslated (and its workload not validated),
with the exception's warning. Translation rewrites a pod as a whole, so an exception that names
containers leaves it untranslated only when it covers every container with a legacy request;
otherwise the pod is translated and the warning says why the exception did not apply.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Iterable, Mapping
from contextlib import suppress
from typing import NamedTuple

import orjson

from app.allocation import ClaimInput, shaped
from app.bounded import BoundedCache, CacheName
from app.cluster.view import Kind
from app.errors import ObjectShapeError
from app.k8s import patch as jsonpatch
from app.k8s.claims import SELECTING, parse_claim_spec, template_claim_spec
from app.k8s.objects import PodSpecRef
from app.k8s.patch import PatchOp
from app.policies import satisfiability, translate_judged
from app.policies.base import ALLOW, Context, Mode, Request, Result, Violation, subject
from app.policies.builders import legacy_matcher, plan_for, sharing_rules
from app.policies.exceptions import cover, policy_exceptions
from app.policies.mapped import MappedRequest, left_to_scheduler
from app.policies.parts import Parts
from app.policies.workloads import combine, finding_result, findings, per_template
from app.translation import Problem, TranslationPlan, to_patch
from app.translation.legacy import legacy_requests, may_ask_legacy
from app.translation.naming import who
from app.translation.plan import Key
from app.translation.wants import request_key


def check_pod(request: Request, ctx: Context) -> Result:
    """Mutating, Pods on CREATE."""
    if ctx.mode is not Mode.TRANSLATE or request.object is None:
        return ALLOW
    return _translate(request, ctx)


def check_workload(request: Request, ctx: Context) -> Result:
    """Mutating, workloads on CREATE and UPDATE: only with `translation.translateWorkloads`."""
    if (
        ctx.mode is not Mode.TRANSLATE
        or request.object is None
        or not ctx.policy.translation.translate_workloads
    ):
        return ALLOW
    return _translate(request, ctx)


def validate(request: Request, ctx: Context) -> Result:
    """Validating, workloads: would their pods translate? Denied at apply time if not.

    On UPDATE only problems the old object did not have are denied, so a workload that predates
    the label can still be scaled, relabelled or deleted; the old problems are warned about.
    GPU requests outside the pod templates (an operator's own fields, Helm values) cannot be
    translated and are denied the same way.
    """
    if ctx.mode is not Mode.TRANSLATE or request.object is None or request.kind == "Pod":
        return ALLOW
    result = per_template(request, ctx, lambda spec, old: _validate_spec(request, ctx, spec, old))
    is_legacy = ctx.parts[legacy_matcher]
    found = findings(request, ctx, is_legacy)
    if not found:
        return result
    label = _mode_label(ctx)
    reported = finding_result(
        request,
        ctx,
        found,
        is_legacy,
        label=label,
        what=(
            f"namespace {request.namespace} translates device-plugin requests into DRA claims "
            f"({label}), but {subject(request)} asks for GPUs where dra-webhook cannot "
            "rewrite them:"
        ),
    )
    return combine((result, reported))


def validate_pod(request: Request, ctx: Context) -> Result:
    """Validating, Pods on CREATE in translate namespaces: a pod that this webhook's mutating
    call judged (it carries the judged-claims mark, which no value of its author's survives that
    call: `app.policies.translate_judged`) and that asks for legacy names translation would
    translate was changed after its translation, by a mutating webhook or admission policy
    ordered after this one, and would get its GPUs twice: denied, each name with its path. The
    chart's validating entry sends such a pod here (an extended resource fails its
    not-judged-at-mutation condition). A name translation leaves to the scheduler (leaveMapped,
    a mapping's leaveToScheduler) is no offence; an unmarked pod (admitted untranslated under a
    fail-open mutating entry) is not held to it."""
    if (
        ctx.mode is not Mode.TRANSLATE
        or request.object is None
        or not translate_judged.carried(request.object)
    ):
        return ALLOW
    return per_template(request, ctx, lambda spec, _: _asked_again(request, ctx, spec))


def _asked_again(request: Request, ctx: Context, spec: PodSpecRef) -> Result:
    excepted, _ = _exception(request, ctx, spec)
    if excepted is not None:
        return excepted
    planned = plan_for(spec, request.namespace, ctx)
    asked = [
        Violation(r.path, f"{who(r.container)} asks for {r.resource}: {r.amount}")
        for want in planned.wants
        for r in want.requests
    ]
    named = {v.path for v in asked}
    asked += [_violation(p) for p in planned.problems if p.path not in named]
    if not asked:
        return ALLOW
    return Result(
        violations=tuple(asked),
        summary=(
            f"namespace {request.namespace} translates device-plugin requests into DRA claims "
            f"({_mode_label(ctx)}), but {subject(request)} asks for legacy extended resources "
            "again after dra-webhook translated it:"
        ),
        details=(
            "A mutating webhook or admission policy that runs after dra-webhook added them; it "
            f"must leave translated pods alone (their {TRANSLATED_ANNOTATION} annotation says "
            "what was translated)."
        ),
    )


def _validate_spec(
    request: Request, ctx: Context, spec: PodSpecRef, old: PodSpecRef | None
) -> Result:
    excepted, notes = _exception(request, ctx, spec)
    if excepted is not None:
        return excepted
    planned = plan_for(spec, request.namespace, ctx)
    planned.notes[:0] = notes
    problems = planned.all_problems
    label = _mode_label(ctx)
    old_keys: frozenset[Key] = frozenset()
    if problems and old is not None:
        old_keys = frozenset(p.key for p in plan_for(old, request.namespace, ctx).all_problems)
    new = [p for p in problems if p.key not in old_keys]
    warnings = [
        f"predates this change, pods of this {request.kind} will be denied: {_violation(p)}"
        for p in problems
        if p.key in old_keys
    ]
    if new:
        return _denial(request, label, new, warnings)
    warnings += planned.notes
    warnings += [
        f"{who(w.legacy.container)}: {w.legacy.resource}: {w.legacy.amount} becomes a DRA claim "
        f"on DeviceClass {w.mapping.device_class_name} when its pods are created ({label})"
        for w in planned.wants
    ]
    warnings += [
        f"{who(left.legacy.container)}: {left.asked} is left to the scheduler when its pods are "
        f"created: {left.why} ({label})"
        for left in planned.left
    ]
    return Result(warnings=tuple(warnings))


def _translate(request: Request, ctx: Context) -> Result:
    return per_template(request, ctx, lambda spec, _: _translate_spec(request, ctx, spec))


SHAPES_KEPT = 1024
"""Distinct pod specs whose translation is remembered (`translations`)."""


class _Translated(NamedTuple):
    """What translating one pod spec makes, before the claims are judged against the cluster's
    devices now: the same for every pod of one spec (the pods of a Deployment, a Job, a retry)
    while the view's DeviceClasses and templates (and slices, for shares; claims, for a pod that
    names some) stay as they were. Read-only: shared by every review that finds it."""

    made: tuple[ClaimInput, ...]
    stale: Mapping[int, str]
    mapped: tuple[MappedRequest, ...]
    allowed: Result
    """The answer when the claims meet nothing in the cluster worth a word: one object, so
    that the pipeline's merge of it is remembered too (`app.verdict`)."""


def translations(parts: Parts) -> BoundedCache[Hashable, _Translated]:
    """Builder: translated pod specs by the spec's JSON and what the plan read from the view,
    one memo per pipeline (the policy it was built from is part of every entry)."""
    return BoundedCache(CacheName.TRANSLATED_SPECS, SHAPES_KEPT)


def _memo_key(request: Request, ctx: Context, spec: PodSpecRef) -> Hashable | None:
    """The key of a pod's translation in `translations`: a Pod's CREATE only (an UPDATE redoes
    an earlier translation, a workload's templates are rarer and annotated elsewhere). What the
    plan and its patch read of the spec, as JSON (orjson): each container's field, name,
    restartPolicy and resources, and the pod's resourceClaims; not the rest, which differs from
    pod to pod of one workload (the service account's token volume the API server adds has a
    name of its own per pod). Then whether the pod has metadata and annotations maps (the
    annotation's op), the served release, and the generations of what the plan reads from the
    view: DeviceClasses (mappings, the scheduler's names), ResourceClaimTemplates (the caps,
    the templates made before), ResourceSlices where shares are translated (published
    capacities) and ResourceClaims where the pod names some (their DeviceClasses)."""
    if (
        request.kind != "Pod"
        or request.operation != "CREATE"
        or request.object is None
        or spec.error is not None
    ):
        return None
    raw = spec.spec
    claims = raw.get("resourceClaims")
    read = [
        (ref.field, ref.name, ref.container.get("restartPolicy"), ref.container.get("resources"))
        for ref in spec.read
    ]
    try:
        text = orjson.dumps((read, claims))
    except (TypeError, orjson.JSONEncodeError):
        return None
    meta = request.object.get("metadata")
    view = ctx.view
    release = view.release
    return (
        request.namespace,
        text,
        isinstance(meta, dict),
        isinstance(meta, dict) and isinstance(meta.get("annotations"), dict),
        release.version,
        release.features,
        view.generation(Kind.DEVICE_CLASS),
        view.generation(Kind.RESOURCE_CLAIM_TEMPLATE),
        view.generation(Kind.RESOURCE_SLICE) if ctx.parts[sharing_rules] else 0,
        view.generation(Kind.RESOURCE_CLAIM) if claims else 0,
    )


def _translate_spec(request: Request, ctx: Context, spec: PodSpecRef) -> Result:
    if not may_ask_legacy(spec, ctx.parts[legacy_matcher]):
        return ALLOW  # (a DRA pod: nothing to plan, as `plan` finds; no key to build for it)
    excepted, notes = _exception(request, ctx, spec)
    if excepted is not None:
        return excepted
    key = _memo_key(request, ctx, spec) if not notes else None
    if key is None:
        made = _made(request, ctx, spec, notes)
        return _judged(request, ctx, spec, made) if isinstance(made, _Translated) else made
    memo = ctx.parts[translations]
    known = memo.get(key)
    if known is None:
        made = _made(request, ctx, spec, notes)
        if not isinstance(made, _Translated):
            return made
        known = memo.put(key, made._replace(allowed=dataclasses.replace(made.allowed, kept=True)))
    return _judged(request, ctx, spec, known)


def _judged(request: Request, ctx: Context, spec: PodSpecRef, made: _Translated) -> Result:
    """A translation judged against the cluster's devices now: the claims it makes with those
    the pod already names, all on one node as the scheduler allocates them."""
    if not made.made:
        return made.allowed
    kept = _claims_kept(spec, made.stale, request.namespace, ctx)
    verdict = satisfiability.pod_verdict(
        ctx,
        [*kept, *made.made],
        subject(request),
        mapped=made.mapped,
        spec_path=spec.path,
        priority=satisfiability.pod_priority(spec, ctx),
    )
    if verdict.denied:
        return verdict
    if not verdict.warnings:
        return made.allowed
    # (made for this review: not the kept Result)
    warnings = (*made.allowed.warnings, *verdict.warnings)
    return dataclasses.replace(made.allowed, warnings=warnings, kept=False)


def _made(
    request: Request, ctx: Context, spec: PodSpecRef, notes: list[str]
) -> Result | _Translated:
    """What translating `spec` makes, or the answer when there is nothing to make (a denial,
    no legacy request)."""
    planned = plan_for(spec, request.namespace, ctx, replace_own=request.operation == "UPDATE")
    planned.notes[:0] = notes
    if planned.problems:
        return _denial(request, _mode_label(ctx), planned.problems, planned.notes)
    if not planned.wants and not planned.left:
        return ALLOW
    if planned.over_cap is not None:
        return _denial(request, _mode_label(ctx), [planned.over_cap], planned.notes)
    # Nobody else is told whether the claims made here can be allocated: the templates are
    # created by this webhook, so their own admission answers to it, not to the pod's author.
    # They are judged with the claims the pod already has and the one the scheduler makes for
    # what is left to it, all on one node as the scheduler allocates them: the pod's validation
    # need not judge them again (app.pipeline).
    made = _claims_made(planned, ctx.view.release.frees_refused_counters)
    mapped = left_to_scheduler(request.kind, spec, ctx) if made and planned.left else ()
    patch = to_patch(planned) if planned.wants or planned.stale else []
    allowed = Result(
        patch=(*patch, *(_annotate(request, spec, planned) if planned.wants else ())),
        warnings=(
            *planned.notes,
            *(left.warning() for left in planned.left),
            *planned.warnings,
        ),
        templates=tuple(planned.templates.values()),
        translated=(
            *(_rule(w.mapping.source) for w in planned.wants),
            *(left.rule for left in planned.left),
        ),
    )
    return _Translated(
        made=tuple(shaped(claim) for claim in made),
        stale=planned.stale,
        mapped=mapped,
        allowed=allowed,
    )


TRANSLATED_ANNOTATION = "dra-webhook/translated"
"""On a translated pod (or a translated workload's pod template): what became which claim."""
MAX_ANNOTATION_CHARS = 1024


def _annotate(request: Request, spec: PodSpecRef, planned: TranslationPlan) -> list[PatchOp]:
    """The op that writes TRANSLATED_ANNOTATION on the pods of `spec`: `nvidia.com/gpu=2 ->
    claim gpu-cuda (template dra-gpu-nvidia-com-2-88d43609dc)`, one entry a claim, cut to
    MAX_ANNOTATION_CHARS. A pod spec written inline in an object (not a template) has no pod
    metadata of its own to carry it."""
    if request.kind == "Pod":
        meta_pointer, meta = "/metadata", request.object.get("metadata") if request.object else None
    elif spec.pointer.endswith("/spec"):
        meta_pointer = spec.pointer[: -len("/spec")] + "/metadata"
        try:
            parent = jsonpatch.resolve(request.object, spec.pointer[: -len("/spec")])
        except (KeyError, IndexError, ValueError, TypeError):
            return []
        meta = parent.get("metadata") if isinstance(parent, dict) else None
    else:
        return []
    by_claim = {c.name: c for c in planned.claims}
    entries = []
    for want in planned.wants:
        name = planned.claim_for.get(request_key(want.legacy))
        claim = by_claim.get(name) if name else None
        asked = f"{want.legacy.resource}={want.legacy.amount}"
        if claim is None:
            entries.append(f"{asked} -> removed")  # a count of zero: nothing to claim
            continue
        template = f" (template {claim.template.name})" if claim.template else ""
        entries.append(f"{asked} -> claim {name}{template}")
    text = "; ".join(dict.fromkeys(entries))
    if len(text) > MAX_ANNOTATION_CHARS:
        text = text[: MAX_ANNOTATION_CHARS - 1] + "…"
    if not isinstance(meta, dict):
        return [jsonpatch.add(meta_pointer, {"annotations": {TRANSLATED_ANNOTATION: text}})]
    if not isinstance(meta.get("annotations"), dict):
        return [jsonpatch.add(f"{meta_pointer}/annotations", {TRANSLATED_ANNOTATION: text})]
    key = jsonpatch.pointer(TRANSLATED_ANNOTATION)
    return [jsonpatch.add(f"{meta_pointer}/annotations{key}", text)]


def _rule(source: str) -> str:
    """The metric label of a mapping's source: config rules are `mapping`."""
    return "mapping" if source == "config" else source


def _claims_made(planned: TranslationPlan, counters_back: bool) -> list[ClaimInput]:
    """The claims translation adds, as the allocation model reads them (taken together: the
    scheduler puts all of a pod's claims on one node) on a release whose allocator gives a
    refused device's counters back or not (`counters_back`)."""
    made = []
    for claim in planned.claims:
        if claim.template is None:
            continue
        spec = claim.template.template["spec"]["spec"]
        label = f"claim {claim.name} (template {claim.template.name})"
        made.append(ClaimInput(label, parse_claim_spec(spec), f"{label}: ", counters_back))
    return made


def _claims_kept(
    spec: PodSpecRef, stale: Mapping[int, str], namespace: str, ctx: Context
) -> list[ClaimInput]:
    """The claims the pod already names (not an earlier translation's, which the plan
    replaces), as the pod's own satisfiability check reads them (`satisfiability.check_pod`):
    from the view; one that is unknown, already allocated (its node is fixed) or malformed is
    left out, its own admission answers for it."""
    entries = spec.spec.get("resourceClaims")
    if not isinstance(entries, list):
        return []
    kept = []
    for index, entry in enumerate(entries):
        if index in stale or not isinstance(entry, dict):
            continue
        name, template = entry.get("resourceClaimName"), entry.get("resourceClaimTemplateName")
        parsed, label = None, ""
        if isinstance(name, str) and name:
            claim = ctx.view.get(Kind.RESOURCE_CLAIM, name, namespace)
            if claim is not None and not (claim.get("status") or {}).get("allocation"):
                parsed, label = parse_claim_spec(claim.get("spec")), f"claim {name}"
        elif isinstance(template, str) and template:
            found = ctx.view.get(Kind.RESOURCE_CLAIM_TEMPLATE, template, namespace)
            with suppress(ObjectShapeError):
                if found is not None:
                    parsed = parse_claim_spec(*template_claim_spec(found))
                    label = f"template {template}"
        if parsed is None or parsed.first_error(SELECTING) is not None or not parsed.requests:
            continue
        where = f"{spec.path}.resourceClaims[{index}] ({label}) "
        kept.append(ClaimInput(label, parsed, where))
    return kept


def _exception(request: Request, ctx: Context, spec: PodSpecRef) -> tuple[Result | None, list[str]]:
    """(the answer for an object an active exception wholly covers, or None; notes for the
    translation otherwise: exceptions that ended, or that cover only some containers)."""
    exceptions = ctx.parts[policy_exceptions]
    if not exceptions:
        return None, []
    assert request.object is not None
    selecting = exceptions.selecting(request.kind, spec, ctx.namespace_labels)
    if not selecting:
        return None, []
    found = legacy_requests(spec, ctx.parts[legacy_matcher])
    coverage = cover(selecting, found)
    if found and not coverage.rest:
        return (
            Result(
                warnings=tuple(coverage.warnings("left untranslated")),
                excepted=tuple(a.name for a in coverage.used),
            ),
            [],
        )
    notes = [f"exception {a.name} {a.when()} no longer applies" for a in coverage.ended]
    for applied in coverage.used:
        names = ", ".join(sorted({r.container.name for r in coverage.rest}))
        notes.append(
            f"exception {applied.name} {applied.when()} does not cover container(s) {names}: "
            "the pod is translated as a whole"
        )
    return None, notes


def _violation(problem: Problem) -> Violation:
    return Violation(problem.path, problem.message)


def _mode_label(ctx: Context) -> str:
    key = ctx.policy.namespace_modes.label
    return f"{key}={ctx.namespace_labels.get(key, '')}"


def _denial(
    request: Request, label: str, problems: list[Problem], warnings: Iterable[str]
) -> Result:
    return Result(
        violations=tuple(_violation(p) for p in problems),
        warnings=tuple(warnings),
        summary=(
            f"namespace {request.namespace} translates device-plugin requests into DRA claims "
            f"({label}), but {subject(request)} cannot be translated:"
        ),
    )
