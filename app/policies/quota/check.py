"""Claim quotas: per-namespace limits on DRA devices, checked before anything is scheduled.

Native ResourceQuota charges a ResourceClaim only when it is created, which for a Deployment is
after its pods exist: the user learns from Pending pods. This policy checks, at admission:

a. ResourceClaim CREATE: devices per request and per claim, devices and claims per namespace;
b. ResourceClaimTemplate CREATE: devices per request and per claim (a template that can never be
   admitted is refused now, not when its first pod is Pending);
c. Workloads and PodGroups (scheduling.k8s.io) with group claims: each group claim's template
   charged once for the group, not per pod (`groups.py`); a pod's entry that is its group's
   claim is not charged to the pod;
d. Pods and workloads whose pods will make claims (template references, in translate-mode
   namespaces the legacy requests translation turns into claims, and names a DeviceClass maps,
   which the scheduler serves through one claim per pod): pods x devices per pod against
   the namespace limit minus current usage, and against native ResourceQuota `hard` values for
   `<class>.deviceclass.resource.k8s.io/devices`. DaemonSets are counted per node, warn only.
   An object made by a controller this webhook already charged (a ReplicaSet of a Deployment, a
   Job of a CronJob, a Pod of a ReplicaSet/StatefulSet/DaemonSet/Job/ReplicationController) is
   not charged again: its owner's admission did the namespace arithmetic, and charging the
   controller's own writes would stall rollouts (the new ReplicaSet of a rolling update needs
   devices the old one still holds). Per-request and per-claim limits still apply to it.

Limits come from the policy file's `quotas` entries whose namespace selector matches. Every
matching entry applies; for each limit the strictest entry wins: the smallest exceeded `deny`
limit denies, otherwise the smallest exceeded `warn` limit warns. The count is advisory under
concurrency (two claims admitted at the same moment both see the old total); native
ResourceQuota is the hard stop.
"""

from __future__ import annotations

from app.cluster.usage import ClaimUsage
from app.k8s.claim_count import count_claim
from app.policies.base import ALLOW, Context, Mode, Obj, Request, Result, subject
from app.policies.groups import is_group
from app.policies.quota import shares
from app.policies.quota.demand import check_translated_requests, check_workload, native_limits
from app.policies.quota.findings import Findings, devices
from app.policies.quota.groups import check_group
from app.policies.quota.pods import translation
from app.policies.quota.rules import (
    PER_CLAIM,
    PER_NAMESPACE,
    PER_REQUEST,
    Breach,
    NamespaceQuota,
    quota_rules,
)
from app.policies.workloads import templates


def check(request: Request, ctx: Context) -> Result:
    obj = request.object
    if obj is None or request.operation not in ("CREATE", "UPDATE"):
        return ALLOW
    rules = ctx.parts[quota_rules]
    quota = rules.for_namespace(request.namespace, ctx.namespace_labels, ctx.view)
    if request.kind in ("ResourceClaim", "ResourceClaimTemplate"):
        if not quota or request.operation != "CREATE":
            return ALLOW
        found = _check_claim(request, obj, quota, ctx.view.index(ClaimUsage))
        if quota.capacity:
            shares.check_claim(request, obj, ctx, quota, found)
        return found.result(subject(request), request.namespace)
    if request.kind == "Pod" and request.operation != "CREATE":
        return ALLOW  # a pod's claims cannot change after creation
    native = native_limits(ctx, request.namespace)
    if not quota and not native:
        return ALLOW
    if is_group(request):
        return check_group(request, ctx, quota, native)
    return check_workload(request, obj, ctx, quota, native)


def check_translation(request: Request, ctx: Context) -> Result:
    """Mutating, in translate namespaces: the claims translation is about to make, against the
    namespace's per-request and per-claim limits, before any ResourceClaimTemplate is created.

    A template over a per-claim limit would be refused by this webhook's own validation of
    templates when the mutating answer creates it, and the pod would get an InternalError about
    a failed create instead of the arithmetic. Merged with translation's answer, this denial
    keeps the templates from being created at all (they are made only for an allowed pod).
    """
    obj = request.object
    if ctx.mode is not Mode.TRANSLATE or obj is None or request.operation != "CREATE":
        return ALLOW
    if request.kind != "Pod" and not ctx.policy.translation.translate_workloads:
        return ALLOW
    quota = ctx.parts[quota_rules].for_namespace(request.namespace, ctx.namespace_labels, ctx.view)
    if not quota:
        return ALLOW
    found = Findings()
    for template in templates(request, ctx):
        translated = translation(template.spec, request.namespace, ctx)
        check_translated_requests(translated, quota, found)
        if quota.capacity:
            shares.check_pod(
                request,
                template.spec,
                ctx,
                quota=quota,
                translated=translated,
                found=found,
                charged=True,
            )
    return found.result(subject(request), request.namespace)


def _check_claim(request: Request, obj: Obj, quota: NamespaceQuota, usage: ClaimUsage) -> Findings:
    template = request.kind == "ResourceClaimTemplate"
    parsed = request.claim_spec()
    path = parsed.path
    counted = count_claim(parsed)
    what = subject(request)
    found = Findings()

    for req in counted.requests:
        for device_class, amount in req.devices.items():
            if breach := quota.breach(PER_REQUEST, device_class, amount):
                found.add(
                    req.path,
                    f"request {req.name} asks for {devices(amount, device_class)}; "
                    f"at most {breach.limit} per request",
                    breach,
                )
        for device_class in req.unbounded:
            if breach := quota.breach(PER_REQUEST, device_class, None):
                found.add(req.path, _all_message(req.name, device_class, breach, "request"), breach)

    for device_class, amount in counted.devices.items():
        if breach := quota.breach(PER_CLAIM, device_class, amount):
            found.add(
                f"{path}.devices.requests",
                f"{what} asks for {devices(amount, device_class)}; "
                f"at most {breach.limit} per claim",
                breach,
            )
    for device_class in counted.unbounded:
        if breach := quota.breach(PER_CLAIM, device_class, None):
            message = _all_message(what, device_class, breach, "claim")
            found.add(f"{path}.devices.requests", message, breach)

    if not template:
        namespace = request.namespace
        for device_class, amount in counted.devices.items():
            used = usage.devices_of(namespace, device_class)
            if breach := quota.breach(PER_NAMESPACE, device_class, amount, used):
                found.add(
                    f"{path}.devices",
                    f"{what} needs {devices(amount, device_class)}; namespace {namespace} "
                    f"allows {breach.limit}, {used} in use",
                    breach,
                )
        for device_class in counted.unbounded:
            if breach := quota.breach(PER_NAMESPACE, device_class, None):
                found.add(
                    f"{path}.devices",
                    _all_message(what, device_class, breach, f"namespace {namespace}"),
                    breach,
                )
        used_claims = usage.claims(namespace)
        if breach := quota.claims_breach(used_claims, 1):
            found.add(
                "metadata",
                f"{what} would be one claim too many: namespace {namespace} allows "
                f"{breach.limit} ResourceClaims, {used_claims} in use",
                breach,
            )
    return found


def _all_message(what: str, device_class: str, breach: Breach, scope: str) -> str:
    who = f"request {what}" if scope == "request" else what
    where = f"per {scope}" if scope in ("request", "claim") else f"in {scope}"
    return (
        f"{who} asks for all devices of {device_class} (allocationMode: All), an unbounded "
        f"count where {breach.limit} are allowed {where}; use ExactCount"
    )
