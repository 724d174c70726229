"""gpu-mode=translate namespaces: legacy extended-resource requests become DRA resource claims.

A container asking for `nvidia.com/gpu: 2` is rewritten to ask for two devices of the mapped
DeviceClass through a pod-level claim made from a ResourceClaimTemplate; nothing else about the
pod changes. What a pod spec becomes is decided by `app.translation.plan` (its rules are written
out there and, for users, in docs/translation.md); this module is the admission side of it:

- The mutating policy turns a plan into a JSONPatch and the templates to create, or denies the
  pod listing every problem (or the cap it goes over).
- Running on its own output changes nothing: no legacy name is left to translate.

Pods are translated on CREATE; workload pod templates only with `translation.translateWorkloads`,
and otherwise validated at apply time (`validate`), so an untranslatable Deployment is refused
when it is applied rather than when its ReplicaSet silently fails to create pods.
"""

from __future__ import annotations

from collections.abc import Iterable

from app.k8s.objects import PodSpecRef, pod_spec
from app.policies.base import ALLOW, Context, Mode, Request, Result, Violation
from app.policies.defaults import claim_defaults, translation_hook
from app.policies.parts import Parts
from app.translation import Problem, TranslationPlan, TranslationRules, plan, to_patch
from app.translation.legacy import LegacyMatcher, MappingResolver
from app.translation.plan import Key, who
from app.translation.templates import TemplateBuilder


def legacy_matcher(parts: Parts) -> LegacyMatcher:
    """Builder: which resource names are legacy extended resources (`legacyResources`)."""
    return LegacyMatcher(parts.policy.legacy_resources)


def mapping_resolver(parts: Parts) -> MappingResolver:
    """Builder: legacy resource -> DeviceClass (`mappings`, then the view's DeviceClasses)."""
    return MappingResolver(parts.policy.mappings)


def translation_rules(parts: Parts) -> TranslationRules:
    """Builder: what `translation.plan` takes; its templates carry the DeviceClass defaults."""
    defaults = parts.build(claim_defaults)
    hooks = (translation_hook(defaults),) if defaults.classes else ()
    templates = TemplateBuilder(parts.policy.translation.template_name_prefix, hooks=hooks)
    return TranslationRules(
        parts.build(legacy_matcher),
        parts.build(mapping_resolver),
        templates,
        parts.policy.translation,
    )


def plan_for(
    spec: PodSpecRef, namespace: str, ctx: Context, *, replace_own: bool = False
) -> TranslationPlan:
    """The translation plan of a pod spec under the policy and cluster view of `ctx`."""
    return plan(spec, namespace, ctx.parts[translation_rules], ctx.view, replace_own=replace_own)


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
    """
    if ctx.mode is not Mode.TRANSLATE or request.object is None or request.kind == "Pod":
        return ALLOW
    spec = pod_spec(request.kind, request.object)
    if spec is None:
        return ALLOW
    planned = plan_for(spec, request.namespace, ctx)
    problems = planned.all_problems
    label = _mode_label(ctx)
    old_keys: frozenset[Key] = frozenset()
    if problems and request.operation == "UPDATE" and request.old_object is not None:
        old_spec = pod_spec(request.kind, request.old_object)
        if old_spec is not None:
            old = plan_for(old_spec, request.namespace, ctx)
            old_keys = frozenset(p.key for p in old.all_problems)
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
    return Result(warnings=tuple(warnings))


def _translate(request: Request, ctx: Context) -> Result:
    assert request.object is not None
    spec = pod_spec(request.kind, request.object)
    if spec is None:
        return ALLOW
    planned = plan_for(spec, request.namespace, ctx, replace_own=request.operation == "UPDATE")
    if planned.problems:
        return _denial(request, _mode_label(ctx), planned.problems, planned.notes)
    if not planned.wants:
        return ALLOW
    if planned.over_cap is not None:
        return _denial(request, _mode_label(ctx), [planned.over_cap], planned.notes)
    return Result(
        patch=tuple(to_patch(planned)),
        warnings=tuple(planned.notes + planned.warnings),
        templates=tuple(planned.templates.values()),
    )


def _violation(problem: Problem) -> Violation:
    return Violation(problem.path, problem.message)


def _mode_label(ctx: Context) -> str:
    key = ctx.policy.namespace_modes.label
    return f"{key}={ctx.namespace_labels.get(key, '')}"


def _denial(
    request: Request, label: str, problems: list[Problem], warnings: Iterable[str]
) -> Result:
    what = f"{request.kind} {request.name}".strip() if request.name else request.kind
    return Result(
        violations=tuple(_violation(p) for p in problems),
        warnings=tuple(warnings),
        summary=(
            f"namespace {request.namespace} translates device-plugin requests into DRA claims "
            f"({label}), but {what} cannot be translated:"
        ),
    )
