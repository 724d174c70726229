"""Near misses: a request for a name that is almost a legacy name (`nvidia.con/gpu`).

No node advertises such a name and no DeviceClass maps it, so the pod would wait Pending with
no message; nothing else says so, since it is no legacy name (app/translation/near_miss.py).
Warned of in every mode, on Pods and the pod templates of workloads; denied in dra-only
namespaces when the policy says `draOnly.nearMisses: deny` (on UPDATE only the ones the old
object did not have: what was admitted before can still be relabelled or finalized).

The chart's ValidatingAdmissionPolicy does not repeat this check (CEL has no edit distance):
where it enforces dra-only, a near miss reaches the webhook only for the checks the webhook
keeps (docs/runbook.md).
"""

from __future__ import annotations

from app.policies.base import ALLOW, Context, Mode, Request, Result, Violation
from app.policies.builders import near_miss_names
from app.policies.workloads import old_specs, templates
from app.translation.near_miss import near_misses


def check(request: Request, ctx: Context) -> Result:
    if request.object is None:
        return ALLOW
    found = [
        miss
        for t in templates(request, ctx)
        for miss in near_misses(
            t.spec, ctx.parts[near_miss_names], ctx.view.device_class_for_extended_resource
        )
    ]
    if not found:
        return ALLOW
    deny = ctx.mode is Mode.DRA_ONLY and ctx.policy.dra_only.near_misses == "deny"
    before = _old_paths(request, ctx) if deny and request.operation == "UPDATE" else set()
    new = [m for m in found if deny and m.path not in before]
    warnings = tuple(f"{m.path}: {m.message}" for m in found if m not in new)
    if not new:
        return Result(warnings=warnings)
    key = ctx.policy.namespace_modes.label
    return Result(
        violations=tuple(Violation(m.path, m.message) for m in new),
        warnings=warnings,
        summary=(
            f"namespace {request.namespace} is dra-only ({key}="
            f"{ctx.namespace_labels.get(key, '')}): a resource name is a near miss of a "
            "legacy GPU name (draOnly.nearMisses: deny)"
        ),
    )


def _old_paths(request: Request, ctx: Context) -> set[str]:
    near = ctx.parts[near_miss_names]
    mapped = ctx.view.device_class_for_extended_resource
    olds = old_specs(request, ctx).values()
    return {m.path for spec in olds for m in near_misses(spec, near, mapped)}
