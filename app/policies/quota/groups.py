"""Group claims against the namespace's limits: one claim per group, not one per pod.

A PodGroup's `resourceClaims` entry naming a ResourceClaimTemplate makes one ResourceClaim for
the whole group (the resource claim controller, owned by and reserved for the PodGroup), however
many pods share it; a Workload's pod group template gives one to each PodGroup made from it
(at least one: the Workload does not say how many its controller makes). So a group is charged
the template's devices and one claim, once, at its CREATE (the field is immutable), against the
policy's per-namespace limits and the namespace's native ResourceQuota `hard` values, with the
arithmetic in the message. An entry naming an existing ResourceClaim adds nothing: that claim is
already in the namespace's usage. The pods of the group are not charged again for the entries
that are the group's (`demand._pod_demand`, `app.policies.groups.shared_keys`).
"""

from __future__ import annotations

from collections.abc import Mapping

from app.cluster.usage import ClaimUsage, TemplateCounts
from app.policies.base import ALLOW, Context, Request, Result, subject
from app.policies.groups import GroupClaim, claims_of
from app.policies.quota.demand import RESOURCE_QUOTA_SUFFIX, NativeLimit
from app.policies.quota.findings import Findings, devices
from app.policies.quota.rules import PER_NAMESPACE, Breach, NamespaceQuota, quota_rules


def check_group(
    request: Request, ctx: Context, quota: NamespaceQuota, native: Mapping[str, list[NativeLimit]]
) -> Result:
    """A Workload's or PodGroup's group claims, each charged once. Raises ObjectShapeError for a
    malformed `resourceClaims`."""
    if request.operation != "CREATE":
        return ALLOW  # immutable: charged when the object was created
    namespace = request.namespace
    counts = ctx.view.index(TemplateCounts)
    charged: list[tuple[GroupClaim, Mapping[str, int], frozenset[str]]] = []
    for claim in claims_of(request):
        if claim.template_name is None:
            continue  # an existing claim: already in the namespace's usage
        counted = counts.get(ctx.view, claim.template_name, namespace)
        if counted is None:
            continue  # not known (yet): nothing to count
        charged.append((claim, counted.devices, counted.unbounded))
    found = Findings()
    if not charged:
        return found.result(subject(request), namespace)
    what = subject(request)
    each = " for each PodGroup made from it" if request.kind == "Workload" else ""
    usage = ctx.view.index(ClaimUsage)
    path = charged[0][0].field if len(charged) == 1 else "spec"
    for device_class in sorted({c for _, d, _ in charged for c in d}):
        mine = [(claim, d[device_class]) for claim, d, _ in charged if device_class in d]
        total = sum(n for _, n in mine)
        terms = " + ".join(f"group claim {c.name} ({c.label}): {n}" for c, n in mine)
        needs = (
            f"{what} needs {terms} = {devices(total, device_class)}{each}, once for the group "
            "(its pods share the claim)"
        )
        used = usage.devices_of(namespace, device_class)
        if breach := quota.breach(PER_NAMESPACE, device_class, total, used):
            found.add(
                path, f"{needs}; namespace {namespace} allows {breach.limit}, {used} in use", breach
            )
        for limit in native.get(device_class, ()):
            in_use = max(limit.used, used)
            if in_use + total > limit.hard:
                deny = ctx.parts[quota_rules].resource_quotas == "deny"
                found.add(
                    path,
                    f"{needs}; ResourceQuota {limit.quota} allows {limit.hard} "
                    f"({device_class}{RESOURCE_QUOTA_SUFFIX}), {in_use} in use",
                    Breach(limit.hard, "", deny),
                )
    for device_class in sorted({c for _, _, u in charged for c in u}):
        if breach := quota.breach(PER_NAMESPACE, device_class, None):
            found.add(
                path,
                f"{what}'s group claim asks for all devices of {device_class} (allocationMode: "
                f"All); namespace {namespace} allows {breach.limit}",
                breach,
            )
    used_claims = usage.claims(namespace)
    if breach := quota.claims_breach(used_claims, len(charged)):
        found.add(
            path,
            f"{what} makes {len(charged)} group claim{'s' if len(charged) != 1 else ''}{each}; "
            f"namespace {namespace} allows {breach.limit} ResourceClaims, {used_claims} in use",
            breach,
        )
    return found.result(what, namespace)
