"""Pods and workloads against the namespace's limits: what every pod of an object will hold
at once, before any of them exists.

A pod holds the claims of its templates, those translation will give its legacy requests
(in translate-mode namespaces), and the one claim the scheduler makes for the names a
DeviceClass maps (`app.policies.mapped`: `nvidia.com/gpu: 2` served from gpu.nvidia.com, as
ResourceQuota charges it); a workload's pods are counted from the catalogue (replicas,
group sizes, parallelism; a DaemonSet per node with devices, warn only). The total is checked
against the policy's per-namespace limits and the namespace's native ResourceQuota `hard`
values for `<class>.deviceclass.resource.k8s.io/devices`, with the arithmetic in the message;
on UPDATE only what the change adds is charged. An object made by a controller this webhook
already charged is not charged again (`check.py` says why).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from app.cluster.usage import ClaimUsage, TemplateCounts
from app.cluster.view import Kind
from app.errors import ObjectShapeError
from app.k8s.groups import pod_claim_key
from app.k8s.objects import PodSpecRef, list_field
from app.k8s.quantity import whole_count
from app.policies.base import ALLOW, Context, Obj, Request, Result, subject
from app.policies.groups import shared_keys
from app.policies.mapped import MappedRequest, left_to_scheduler
from app.policies.quota import shares
from app.policies.quota.findings import Findings, devices
from app.policies.quota.pods import pods_of, translation
from app.policies.quota.rules import (
    PER_CLAIM,
    PER_NAMESPACE,
    PER_REQUEST,
    Breach,
    NamespaceQuota,
    quota_rules,
)
from app.policies.workloads import old_templates, templates
from app.translation import TranslationPlan

RESOURCE_QUOTA_SUFFIX = ".deviceclass.resource.k8s.io/devices"
"""ResourceQuota `hard` key of a DeviceClass's device count: `<class>` + this."""


@dataclass(frozen=True, slots=True)
class NativeLimit:
    quota: str
    hard: int
    used: int


@dataclass(frozen=True, slots=True)
class PodDemand:
    """What one pod of a workload will claim, by DeviceClass."""

    devices: Mapping[str, int]
    unbounded: frozenset[str]
    claims: int
    served: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """DeviceClass -> the extended resources the scheduler serves from it (mapped names,
    `app.policies.mapped`): part of `devices`, said in the arithmetic."""

    def __bool__(self) -> bool:
        return bool(self.devices or self.unbounded or self.claims)


@dataclass(frozen=True, slots=True)
class _Part:
    """One pod template of a workload as quota counts it."""

    spec: PodSpecRef
    demand: PodDemand
    pods: int
    unit: str


def check_workload(
    request: Request,
    obj: Obj,
    ctx: Context,
    quota: NamespaceQuota,
    native: Mapping[str, list[NativeLimit]],
) -> Result:
    if request.kind == "PodTemplate":
        return ALLOW
    found_templates = templates(request, ctx)
    if not found_templates:
        return ALLOW
    what = subject(request)
    found = Findings()
    charged = _charged_at_owner(request.kind, obj)
    parts: list[_Part] = []
    for template in found_templates:
        spec = template.spec
        translated = translation(spec, request.namespace, ctx)
        check_translated_requests(translated, quota, found)
        mapped = left_to_scheduler(request.kind, spec, ctx)
        check_mapped_requests(mapped, spec.path, quota, found)
        if quota.capacity:
            shares.check_pod(
                request,
                spec,
                ctx,
                quota=quota,
                translated=translated,
                found=found,
                charged=charged or (template.pods is None and not template.per_node),
                pods=pods_of(request.kind, template, ctx.view),
            )
        if charged:
            continue
        counted = pods_of(request.kind, template, ctx.view)
        if counted is None:
            continue  # a blueprint (a training runtime): its pods are counted where it is used
        demand = _pod_demand(spec, request.namespace, ctx, translated, mapped)
        if demand:
            parts.append(_Part(spec, demand, *counted))
    if parts:
        _check_demand(request, ctx, quota, native, parts, found, what)
    return found.result(what, request.namespace)


def _check_demand(  # noqa: PLR0917 - one call site, every argument named there
    request: Request,
    ctx: Context,
    quota: NamespaceQuota,
    native: Mapping[str, list[NativeLimit]],
    parts: list[_Part],
    found: Findings,
    what: str,
) -> None:
    """The namespace's limits against what every pod of the workload will hold at once: the
    sum over its templates of pods x per pod (a PyTorchJob's 1 Master + 8 Workers x 4)."""
    before, claims_before = _before(request, ctx)
    namespace = request.namespace
    usage = ctx.view.index(ClaimUsage)
    path = parts[0].spec.path if len(parts) == 1 else _common_path(p.spec.path for p in parts)
    warn_only = request.kind == "DaemonSet"
    classes = sorted({c for p in parts for c in p.demand.devices})
    for device_class in classes:
        mine = [p for p in parts if device_class in p.demand.devices]
        total = sum(p.demand.devices[device_class] * p.pods for p in mine)
        more = total - before.get(device_class, 0)
        if more <= 0:
            continue
        if len(parts) == 1:
            only = parts[0]
            needs = _arithmetic(
                request.kind,
                what,
                pods=only.pods,
                unit=only.unit,
                per_pod=only.demand.devices[device_class],
                device_class=device_class,
                total=total,
            )
        else:
            terms = " + ".join(
                f"{p.spec.path}: {p.pods} {p.unit} x {p.demand.devices[device_class]}" for p in mine
            )
            needs = f"{what} needs {terms} = {devices(total, device_class)}"
        served = list(dict.fromkeys(n for p in mine for n in p.demand.served.get(device_class, ())))
        if served:
            needs += f" ({', '.join(served)}: the scheduler serves {_it(served)} from this class)"
        if device_class in before:
            needs += f" ({before[device_class]} before this change)"
        used = usage.devices_of(namespace, device_class)
        if breach := quota.breach(PER_NAMESPACE, device_class, more, used):
            if warn_only:
                breach = Breach(breach.limit, breach.entry, deny=False)
            found.add(
                path, f"{needs}; namespace {namespace} allows {breach.limit}, {used} in use", breach
            )
        for limit in native.get(device_class, ()):
            in_use = max(limit.used, used)
            if in_use + more > limit.hard:
                deny = ctx.parts[quota_rules].resource_quotas == "deny" and not warn_only
                found.add(
                    path,
                    f"{needs}; ResourceQuota {limit.quota} allows {limit.hard} "
                    f"({device_class}{RESOURCE_QUOTA_SUFFIX}), {in_use} in use",
                    Breach(limit.hard, "", deny),  # the message names the ResourceQuota
                )
    for device_class in sorted({c for p in parts for c in p.demand.unbounded}):
        if breach := quota.breach(PER_NAMESPACE, device_class, None):
            if warn_only:
                breach = Breach(breach.limit, breach.entry, deny=False)
            found.add(
                path,
                f"{what} claims all devices of {device_class} "
                f"(allocationMode: All) in each pod; namespace {namespace} allows {breach.limit}",
                breach,
            )
    claims = sum(p.demand.claims * p.pods for p in parts)
    more_claims = claims - claims_before
    if more_claims > 0:
        used_claims = usage.claims(namespace)
        if breach := quota.claims_breach(used_claims, more_claims):
            if warn_only:
                breach = Breach(breach.limit, breach.entry, deny=False)
            if len(parts) == 1:
                only = parts[0]
                makes = f"{only.pods} {only.unit} x {only.demand.claims} ResourceClaims"
            else:
                makes = " + ".join(
                    f"{p.spec.path}: {p.pods} {p.unit} x {p.demand.claims}" for p in parts
                )
                makes += " ResourceClaims"
            found.add(
                path,
                f"{what} makes {makes} = {claims}; namespace {namespace} allows "
                f"{breach.limit}, {used_claims} in use",
                breach,
            )


def _common_path(paths: Iterable[str]) -> str:
    """The field path all of a workload's pod specs are under (`spec`)."""
    split = [p.split(".") for p in paths]
    common: list[str] = []
    for names in zip(*split, strict=False):
        if len(set(names)) != 1:
            break
        common.append(names[0])
    return ".".join(common) or "spec"


_CHARGED_AT_OWNER: Mapping[str, frozenset[tuple[str, str]]] = {
    "ReplicaSet": frozenset({("apps", "Deployment")}),
    "Job": frozenset({("batch", "CronJob")}),
    "Pod": frozenset(
        {
            ("apps", "ReplicaSet"),
            ("apps", "StatefulSet"),
            ("apps", "DaemonSet"),
            ("batch", "Job"),
            ("", "ReplicationController"),
        }
    ),
}
"""Kind -> the (group, kind) of controllers whose own admission charged that kind's pods."""


def _charged_at_owner(kind: str, obj: Obj) -> bool:
    """Whether the object's controller (ownerReferences, controller: true) is of a kind whose
    admission already did the namespace arithmetic for it.

    The API server validated the references before this webhook sees them; anything else is
    read as "no controller", which leaves the object charged as usual.
    """
    owners = _CHARGED_AT_OWNER.get(kind)
    if owners is None:
        return False
    meta = obj.get("metadata")
    refs = meta.get("ownerReferences") if isinstance(meta, dict) else None
    if not isinstance(refs, list):
        return False
    for ref in refs:
        if not isinstance(ref, dict) or ref.get("controller") is not True:
            continue
        api_version, owner_kind = ref.get("apiVersion"), ref.get("kind")
        if isinstance(api_version, str) and isinstance(owner_kind, str):
            return (api_version.rpartition("/")[0], owner_kind) in owners
    return False


def _before(request: Request, ctx: Context) -> tuple[dict[str, int], int]:
    """On UPDATE, the devices by class and the claims the old object already accounted for."""
    devices: dict[str, int] = {}
    claims = 0
    try:
        for template in old_templates(request, ctx):
            counted = pods_of(request.kind, template, ctx.view)
            if counted is None:
                continue
            spec = template.spec
            demand = _pod_demand(
                spec,
                request.namespace,
                ctx,
                translation(spec, request.namespace, ctx),
                left_to_scheduler(request.kind, spec, ctx),
            )
            for device_class, n in demand.devices.items():
                devices[device_class] = devices.get(device_class, 0) + n * counted[0]
            claims += demand.claims * counted[0]
    except ObjectShapeError:
        return {}, 0
    return devices, claims


def _arithmetic(
    kind: str, what: str, *, pods: int, unit: str, per_pod: int, device_class: str, total: int
) -> str:
    if kind == "Pod":
        return f"{what} needs {devices(per_pod, device_class)}"
    if kind == "DaemonSet":
        return f"{what} needs {devices(per_pod, device_class)} per node x {pods} {unit} = {total}"
    return f"{what} needs {pods} {unit} x {devices(per_pod, device_class)} = {total}"


def pod_demand(spec: PodSpecRef, namespace: str, ctx: Context, kind: str = "Pod") -> PodDemand:
    """Devices and claims one pod of `spec` (of an object of `kind`) will hold in `namespace`,
    as quota counts them."""
    return _pod_demand(
        spec,
        namespace,
        ctx,
        translation(spec, namespace, ctx),
        left_to_scheduler(kind, spec, ctx),
    )


def _pod_demand(
    spec: PodSpecRef,
    namespace: str,
    ctx: Context,
    translated: TranslationPlan | None,
    mapped: Sequence[MappedRequest] = (),
) -> PodDemand:
    """Devices and claims one pod will hold: its template claims (not those its PodGroup
    shares: the group's, charged once), the claims translation will give it for its legacy
    requests, and the one claim the scheduler makes for the names a DeviceClass maps
    (`mapped`: what reaches the scheduler as written)."""
    devices: dict[str, int] = {}
    unbounded: set[str] = set()
    claims = 0
    templates = ctx.view.index(TemplateCounts)
    group = shared_keys(spec.spec, namespace, ctx.view)
    for index, entry in enumerate(list_field(spec.spec, "resourceClaims", spec.path)):
        path = f"{spec.path}.resourceClaims[{index}]"
        if not isinstance(entry, dict):
            raise ObjectShapeError(path, "must be an object")
        if group and pod_claim_key(entry) in group:
            continue  # its PodGroup's claim: charged once, for the group (`groups.py`)
        template_name = entry.get("resourceClaimTemplateName")
        if not template_name:
            continue  # a shared, existing claim: already counted in the namespace's usage
        if not isinstance(template_name, str):
            raise ObjectShapeError(f"{path}.resourceClaimTemplateName", "must be a string")
        counted = templates.get(ctx.view, template_name, namespace)
        if counted is None:
            continue  # not known (yet): nothing to count
        claims += 1
        for device_class, amount in counted.devices.items():
            devices[device_class] = devices.get(device_class, 0) + amount
        unbounded |= counted.unbounded
    if translated is not None:
        for claim in translated.claims:
            devices[claim.device_class] = devices.get(claim.device_class, 0) + claim.count
            claims += 1
    served: dict[str, tuple[str, ...]] = {}
    if mapped:
        claims += 1  # one claim per pod, whatever it holds
        for m in mapped:
            devices[m.device_class] = devices.get(m.device_class, 0) + m.count
            served[m.device_class] = tuple(
                dict.fromkeys((*served.get(m.device_class, ()), m.resource))
            )
    return PodDemand(devices, frozenset(unbounded), claims, served)


def _it(names: Sequence[str]) -> str:
    return "it" if len(names) == 1 else "them"


def check_mapped_requests(
    mapped: Sequence[MappedRequest], spec_path: str, quota: NamespaceQuota, found: Findings
) -> None:
    """Per-request and per-claim limits for the claim the scheduler makes for a pod's mapped
    names: a request per container and name, one claim holding them all."""
    if not quota or not mapped:
        return
    by_class: dict[str, list[MappedRequest]] = {}
    for m in mapped:
        by_class.setdefault(m.device_class, []).append(m)
        if breach := quota.breach(PER_REQUEST, m.device_class, m.count):
            found.add(
                m.path,
                f"{m.resource}: {m.count} is a request for {devices(m.count, m.device_class)} "
                f"in the claim the scheduler makes; at most {breach.limit} per request",
                breach,
            )
    for device_class, mine in by_class.items():
        total = sum(m.count for m in mine)
        if len(mine) == 1 and quota.breach(PER_REQUEST, device_class, total):
            continue  # said of its one request
        if breach := quota.breach(PER_CLAIM, device_class, total):
            names = ", ".join(dict.fromkeys(m.resource for m in mine))
            where = mine[0].path if len(mine) == 1 else spec_path
            found.add(
                where,
                f"the claim the scheduler makes for {names} holds "
                f"{devices(total, device_class)}; at most {breach.limit} per claim",
                breach,
            )


def check_translated_requests(
    translated: TranslationPlan | None, quota: NamespaceQuota, found: Findings
) -> None:
    """Per-request and per-claim limits for the claims translation will make."""
    if not quota or translated is None:
        return
    for want in translated.wants:
        if want.count <= 0:
            continue
        device_class = want.mapping.device_class_name
        for scope, word in ((PER_REQUEST, "request"), (PER_CLAIM, "claim")):
            if breach := quota.breach(scope, device_class, want.count):
                legacy = want.legacy
                found.add(
                    legacy.path,
                    f"container {legacy.container.name} asks for {legacy.resource}: "
                    f"{legacy.amount}, which translation turns into a claim for "
                    f"{devices(want.count, device_class)}; at most {breach.limit} per {word}",
                    breach,
                )
                break


def native_limits(ctx: Context, namespace: str) -> Mapping[str, list[NativeLimit]]:
    """DeviceClass -> device limits of the namespace's ResourceQuotas."""
    if ctx.parts[quota_rules].resource_quotas == "ignore":
        return {}
    quotas = ctx.view.in_namespace(Kind.RESOURCE_QUOTA, namespace)
    if not quotas:
        return {}
    found: dict[str, list[NativeLimit]] = {}
    for name, quota in quotas.items():
        spec = quota.get("spec")
        hard = spec.get("hard") if isinstance(spec, dict) else None
        if not isinstance(hard, dict):
            continue
        status = quota.get("status")
        used = status.get("used") if isinstance(status, dict) else None
        for key, value in hard.items():
            if not isinstance(key, str) or not key.endswith(RESOURCE_QUOTA_SUFFIX):
                continue
            limit = whole_count(value)
            if limit is None:
                continue
            in_use = whole_count(used.get(key)) if isinstance(used, dict) else None
            device_class = key.removesuffix(RESOURCE_QUOTA_SUFFIX)
            found.setdefault(device_class, []).append(NativeLimit(name, limit, in_use or 0))
    return found
