"""Capacity quotas at admission: claims and templates, translated shares, workloads' pods.

The rounding and the reading of asks are in `capacity.py`; this module adds them up against
`maxCapacityPerClaim` and `maxCapacityPerNamespace` with the arithmetic in the message, as the
device-count checks (`check.py`, `demand.py`) do.
"""

from __future__ import annotations

from collections.abc import Mapping

from app.errors import ObjectShapeError
from app.k8s.capacity import Ask, written_asks
from app.k8s.objects import PodSpecRef, list_field
from app.k8s.quantity import Quantity
from app.policies.base import Context, Obj, Request, subject
from app.policies.cel_runtime import cel_runtime
from app.policies.quota import capacity
from app.policies.quota.findings import Findings
from app.policies.quota.pods import pods_of, translation
from app.policies.quota.rules import (
    PER_CLAIM,
    PER_NAMESPACE,
    CapacityBreach,
    NamespaceQuota,
)
from app.policies.workloads import old_templates
from app.translation import TranslationPlan, Want


def check_claim(
    request: Request, obj: Obj, ctx: Context, quota: NamespaceQuota, found: Findings
) -> None:
    """maxCapacityPerClaim, and for a ResourceClaim maxCapacityPerNamespace."""
    asks = capacity.asks_of(request.claim_spec())
    if not asks:
        return
    counter = capacity.Counter(ctx.view, ctx.parts[cel_runtime].index)
    counted = counter.count(asks)
    label = subject(request)
    path = f"{asks[0].path.split('.devices.', 1)[0]}.devices.requests"
    namespace = request.namespace
    used: capacity.Counted | None = None
    for key in sorted(counted.totals.keys() | counted.unbounded):
        amount = counted.totals.get(key)
        mine = [a for a in asks if (a.device_class, a.capacity) == key]
        terms = _terms(counter, mine)
        # one request asks for it: its own path; several: the list they are in
        where = mine[0].path if len({a.path for a in mine}) == 1 else path
        if breach := quota.capacity_breach(PER_CLAIM, key, amount):
            found.add(where, f"{label} asks for {terms}; at most {breach.limit} per claim", breach)
        if request.kind != "ResourceClaim":
            continue
        if used is None:
            used = counter.count(capacity.namespace_asks(ctx.view, namespace))
        in_use = used.totals.get(key)
        if breach := quota.capacity_breach(PER_NAMESPACE, key, amount, in_use):
            found.add(
                where,
                f"{label} asks for {terms}; namespace {namespace} allows {breach.limit}, "
                f"{in_use or 0} in use",
                breach,
            )


def _terms(counter: capacity.Counter, asks: list[Ask], times: int = 1) -> str:
    """`2 x 4000Mi (4Gi by the devices' requestPolicy) of memory of <class> = 8Gi`."""
    parts: list[str] = []
    total: Quantity | None = None
    for ask in asks:
        if ask.unbounded:
            return (
                f"{ask.capacity} of {ask.device_class} from every matching device "
                "(allocationMode: All), an unbounded amount"
            )
        rounded = counter.rounded(ask)
        each = str(ask.amount)
        if rounded != ask.amount:
            each += f" (counted {rounded}: the devices' requestPolicy)"
        parts.append(f"{ask.count} x {each}")
        amount = rounded.mul(ask.count * times)
        total = amount if total is None else total + amount
    first = asks[0]
    pods = f"{times} pods x " if times != 1 else ""
    joined = " + ".join(parts)
    if len(parts) > 1 or pods:
        joined = f"({joined})" if len(parts) > 1 and pods else joined
    return f"{pods}{joined} of {first.capacity} of {first.device_class} = {total}"


def _pod_asks(
    spec: PodSpecRef, namespace: str, ctx: Context, translated: TranslationPlan | None
) -> list[Ask]:
    """The capacity one pod's claims will ask for: its template claims, plus the shares
    translation will give it."""
    asks: list[Ask] = []
    for entry in list_field(spec.spec, "resourceClaims", spec.path):
        name = entry.get("resourceClaimTemplateName") if isinstance(entry, dict) else None
        if isinstance(name, str) and name:
            asks += capacity.template_asks(ctx.view, name, namespace)
    for claim in translated.claims if translated is not None else ():
        asks += written_asks(
            spec.path, claim.name, claim.device_class, claim.mapping.capacity, claim.count
        )
    return asks


def check_pod(
    request: Request,
    spec: PodSpecRef,
    ctx: Context,
    *,
    quota: NamespaceQuota,
    translated: TranslationPlan | None,
    found: Findings,
    charged: bool,
    pods: tuple[int, str] | None = (1, "pod"),
) -> None:
    """Capacity per claim of the claims translation makes, and unless the owner was charged,
    pods x per-pod capacity against maxCapacityPerNamespace (`pods`: how many pods of `spec`
    run at once and what to call them; None: not counted).

    A workload with several pod templates is checked one template at a time against the
    namespace's capacity (each template's pods with what the namespace already uses)."""
    namespace = request.namespace
    counter = capacity.Counter(ctx.view, ctx.parts[cel_runtime].index)
    wants = translated.wants if translated is not None else []
    by_claim = {translated.claim_for.get(_key(w)): w for w in wants} if translated else {}
    for claim in translated.claims if translated is not None else ():
        want = by_claim.get(claim.name) if claim.name else None
        if want is None or not claim.mapping.capacity:
            continue
        asks = written_asks(
            want.legacy.path, claim.name, claim.device_class, claim.mapping.capacity, claim.count
        )
        for key, amount in counter.count(asks).totals.items():
            if breach := quota.capacity_breach(PER_CLAIM, key, amount):
                mine = [a for a in asks if (a.device_class, a.capacity) == key]
                found.add(
                    want.legacy.path,
                    f"{_translated_what(want)}, which translation turns into a claim asking for "
                    f"{_terms(counter, mine)}; at most {breach.limit} per claim",
                    breach,
                )
    if charged or pods is None:
        return
    asks = _pod_asks(spec, namespace, ctx, translated)
    if not asks:
        return
    pods_count, unit = pods
    before: Mapping[tuple[str, str], Quantity] = {}
    try:
        for template in old_templates(request, ctx):
            old_pods = pods_of(request.kind, template, ctx.view)
            if template.spec.path != spec.path or old_pods is None:
                continue
            old_plan = translation(template.spec, namespace, ctx)
            old = _pod_asks(template.spec, namespace, ctx, old_plan)
            before = counter.count(old, old_pods[0]).totals
    except ObjectShapeError:
        before = {}
    counted = counter.count(asks, pods_count)
    used: capacity.Counted | None = None
    for key, total in sorted(counted.totals.items()):
        more = total - before[key] if key in before else total
        if more.sign() <= 0:
            continue
        if used is None:
            used = counter.count(capacity.namespace_asks(ctx.view, namespace))
        in_use = used.totals.get(key)
        if breach := quota.capacity_breach(PER_NAMESPACE, key, more, in_use):
            if request.kind == "DaemonSet":
                breach = CapacityBreach(breach.limit, breach.entry, deny=False)
            mine = [a for a in asks if (a.device_class, a.capacity) == key]
            needs = f"{subject(request)} needs {_terms(counter, mine, pods_count)}"
            if pods_count != 1:
                needs += f" ({pods_count} {unit})"
            if key in before:
                needs += f" ({before[key]} before this change)"
            found.add(
                spec.path,
                f"{needs}; namespace {namespace} allows {breach.limit}, {in_use or 0} in use",
                breach,
            )


def _key(want: Want) -> tuple[str, str, str]:
    legacy = want.legacy
    return legacy.container.field, legacy.container.name, legacy.resource


def _translated_what(want: Want) -> str:
    asked = ", ".join(f"{r.resource}: {r.amount}" for r in want.requests)
    return f"container {want.legacy.container.name} asks for {asked}"
