"""Preemption: what a GPU pod that may preempt loses when its request becomes a DRA claim.

kube-scheduler evicts lower-priority pods to make room for a pending pod whose
`preemptionPolicy` is PreemptLowerPriority, for every node resource a device plugin advertises
(`nvidia.com/gpu`), but it does not preempt for DRA devices (the Kubernetes DRA docs,
"Limitations"; `ServedRelease.preempts_for_dra` knows the releases that do: none up to 1.37). A
high-priority inference pod that evicts low-priority training today stays Pending once it asks
through a ResourceClaim, until a device frees up by itself. Nothing refuses it and nothing says
so; this check does, as a warning (docs/translation.md, "Preemption"):

- translate namespaces: the pod (or the workload whose pods will be) is translated, and told what
  it loses;
- dra-only and audit namespaces: the same sentence beside the fix (the denial, or the audit
  finding): the fix is to ask through DRA, which is what loses it.

Whether a pod may preempt is app.k8s.priority's: a Pod's own `spec.priority` and
`preemptionPolicy` (the Priority admission plugin has set them before any webhook), a workload
template's `priorityClassName` (or the globalDefault class) resolved through the PriorityClasses
the cluster view holds and then the policy's `preemption.priorityClasses`. A template naming a
class known to neither is not warned about (nothing known is not a finding).

Said once per object: on CREATE, and on UPDATE only for a template that did not warrant it
before. Nothing on a release whose scheduler preempts for DRA.

`held_by` words the other half, for satisfiability's "not now": the devices a pod waits for are
held by pods of lower priority, which DRA will not preempt.

`preempting` is the judgement itself, for one pod spec: `migrate` (a workload it moves to
claims) and `report` (the GPU workloads that rely on preemption today) ask it too.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from app.cluster.release import ServedRelease
from app.cluster.view import ClusterReader, Kind
from app.config.preemption import DeclaredClass
from app.k8s.objects import PodSpecRef
from app.k8s.priority import Classes, Priority, PriorityClass
from app.policies.base import ALLOW, Context, Mode, Request, Result, subject
from app.policies.builders import legacy_matcher
from app.policies.parts import Parts
from app.policies.workloads import per_template
from app.translation.legacy import LegacyMatcher, LegacyRequest, legacy_requests

HOLDERS_NAMED = 3
"""Holders a "not now" names before "and N more"."""


class KnownClasses:
    """The PriorityClasses a check resolves a template's class through: the view's, over the
    policy's. Rebuilt only when the view's classes change (a handful of objects), so a review
    costs one generation compare."""

    def __init__(self, declared: Iterable[PriorityClass]) -> None:
        self._declared = tuple(declared)
        self._at = -1
        self._classes = Classes(declared=self._declared)

    def classes(self, view: ClusterReader) -> Classes:
        generation = view.generation(Kind.PRIORITY_CLASS)
        if generation != self._at:
            found = (PriorityClass.read(o) for o in view.objects(Kind.PRIORITY_CLASS).values())
            self._classes = Classes((c for c in found if c is not None), self._declared)
            self._at = generation
        return self._classes


def known_classes(parts: Parts) -> KnownClasses:
    """Builder: the policy's declared classes, under the view's."""
    return KnownClasses(declared_classes(parts.policy.preemption.priority_classes))


def declared_classes(entries: Iterable[DeclaredClass]) -> list[PriorityClass]:
    """The policy's `preemption.priorityClasses` as PriorityClasses."""
    return [PriorityClass(e.name, e.value, e.preemption_policy, e.global_default) for e in entries]


@dataclass(frozen=True, slots=True)
class Preempting:
    """A pod spec whose pods may evict lower-priority pods for the legacy GPUs they ask for."""

    priority: Priority
    requests: tuple[LegacyRequest, ...]

    @property
    def resources(self) -> tuple[str, ...]:
        """The legacy names asked for, once each, in container order."""
        return tuple(dict.fromkeys(r.resource for r in self.requests))


def preempting(spec: PodSpecRef, legacy: LegacyMatcher, classes: Classes) -> Preempting | None:
    """Whether the pods of `spec` ask for legacy GPUs (a request of zero asks for none) at a
    priority that may preempt (app.k8s.priority: the spec's own priority, else its class or
    the global default resolved through `classes`); None otherwise, and for a class `classes`
    does not know."""
    # the priority first: most pods may not preempt, and it is a lookup (the requests a walk;
    # this runs on every pod review)
    priority = classes.of_spec(spec.spec)
    if priority is None or not classes.may_preempt(priority):
        return None
    found = legacy_requests(spec, legacy, zeros=False)
    if not found:
        return None
    return Preempting(priority, tuple(found))


def loses(
    who: str, priority: Priority, resources: Iterable[str], release: ServedRelease, how: str
) -> str:
    """The sentence (within kubectl's 256 characters for the usual names): what `who` at
    `priority` asking for `resources` loses `how` (`translated to DRA`, `through DRA claims`)."""
    names = ", ".join(dict.fromkeys(resources))
    return (
        f"{who} ({priority.describe()}) may evict lower-priority pods for {names} today; {how} "
        f"it will not: {release.name} does not preempt for DRA devices, it waits until one "
        "frees up"
    )


def check(request: Request, ctx: Context) -> Result:
    """Validating, pod-bearing kinds on CREATE and UPDATE (a Pod on CREATE, in translate
    namespaces within its one mutating call); workloads translated by
    `translation.translateWorkloads` are told by `check_translated` instead."""
    if not _applies(request, ctx):
        return ALLOW
    if request.kind == "Pod":
        if request.operation != "CREATE":
            return ALLOW
        found = request.templates()
        if len(found) == 1:  # every pod review: its one spec, no per-template bookkeeping
            return _judge(request, ctx, found[0].spec, None)
    elif ctx.mode is Mode.TRANSLATE and ctx.policy.translation.translate_workloads:
        return ALLOW  # (its mutating call saw the template before translation)
    return per_template(request, ctx, lambda spec, old: _judge(request, ctx, spec, old))


def check_translated(request: Request, ctx: Context) -> Result:
    """Mutating, workloads in translate namespaces with `translation.translateWorkloads`: the
    template as written, before translation rewrites it."""
    if (
        not _applies(request, ctx)
        or ctx.mode is not Mode.TRANSLATE
        or not ctx.policy.translation.translate_workloads
    ):
        return ALLOW
    return per_template(request, ctx, lambda spec, old: _judge(request, ctx, spec, old))


def _applies(request: Request, ctx: Context) -> bool:
    return (
        ctx.policy.preemption.warn
        and ctx.mode is not None
        and request.object is not None
        and not ctx.view.release.preempts_for_dra
    )


def _judge(request: Request, ctx: Context, spec: PodSpecRef, old: PodSpecRef | None) -> Result:
    legacy = ctx.parts[legacy_matcher]
    classes = ctx.parts[known_classes].classes(ctx.view)
    found = preempting(spec, legacy, classes)
    if found is None:
        return ALLOW
    if old is not None and preempting(old, legacy, classes) is not None:
        return ALLOW  # said when it was written
    return Result(warnings=(_sentence(request, ctx, spec, found),))


def _sentence(request: Request, ctx: Context, spec: PodSpecRef, found: Preempting) -> str:
    who = subject(request) if request.kind == "Pod" else f"the pods of {subject(request)}"
    how = {
        Mode.TRANSLATE: "translated to DRA",
        Mode.DRA_ONLY: "through DRA claims (the fix)",
    }.get(ctx.mode or Mode.AUDIT, "under dra-only")
    text = loses(who, found.priority, found.resources, ctx.view.release, how)
    return f"{spec.path}: {text}"


def held_by(
    ctx: Context,
    claims: Iterable[tuple[str, str]],
    priority: Priority | None,
) -> str | None:
    """The sentence for a "not now" whose devices `claims` (namespace, name) hold, for a pod
    of `priority` (None: a claim on its own, whose pods are not known): "DRA will not preempt
    the lower-priority pods holding the devices: ml/train-0 (0)". The holders are the pods the
    claims' `status.reservedFor` names, with their priority from the view's Pods; where the view
    does not hold a holder (no permission to watch pods, a pod not bound yet, or its event not in
    yet) the claims are named instead. None where there is nothing to say: a release that
    preempts for DRA, a pod that may not preempt, holders all of its priority or above."""
    if not ctx.policy.preemption.warn or ctx.view.release.preempts_for_dra:
        return None
    classes = ctx.parts[known_classes].classes(ctx.view)
    if priority is not None and not classes.may_preempt(priority):
        return None
    lower: list[str] = []
    unknown: list[str] = []
    for namespace, name in sorted(set(claims)):
        claim = ctx.view.get(Kind.RESOURCE_CLAIM, name, namespace)
        consumers = ((claim or {}).get("status") or {}).get("reservedFor") or []
        pods = [c for c in consumers if isinstance(c, dict) and c.get("resource") == "pods"]
        if not pods:
            unknown.append(f"{namespace}/{name}")
            continue
        for consumer in pods:
            pod = ctx.view.get(Kind.POD, str(consumer.get("name", "")), namespace)
            meta = (pod or {}).get("metadata") or {}
            value = ((pod or {}).get("spec") or {}).get("priority")
            if pod is None or meta.get("uid") != consumer.get("uid") or type(value) is not int:
                unknown.append(f"{namespace}/{name}")
            elif priority is None or value < priority.value:
                lower.append(f"{namespace}/{consumer.get('name')} ({value})")
    if lower:
        return f"DRA will not preempt the lower-priority pods holding the devices: {_few(lower)}"
    if unknown:
        return f"DRA will not preempt the allocated claims holding the devices: {_few(unknown)}"
    return None


def _few(items: list[str]) -> str:
    items = list(dict.fromkeys(items))
    shown = ", ".join(items[:HOLDERS_NAMED])
    more = len(items) - HOLDERS_NAMED
    return f"{shown} and {more} more" if more > 0 else shown
