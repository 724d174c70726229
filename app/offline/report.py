"""`dra-webhook report` over a cluster dump (`kubectl get namespaces,nodes,deviceclasses,...
-A -o json`, its cluster objects the view: app.cluster.static.load_dump): which
namespaces are ready for dra-only, which objects a policy exception covers (and until when),
what the tenancy guards would refuse, which GPU workloads rely on preemption
(app.offline.preempting); `classify` and `merge` serve the live report too.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from app.cluster.view import ClusterView, Kind
from app.config import Policy
from app.errors import ObjectShapeError
from app.k8s.claim_count import count_claim_spec
from app.k8s.claims import template_claim_spec
from app.k8s.groups import GROUP_KINDS, group_claims
from app.offline.check import Served, as_request
from app.offline.preempting import PreemptingWorkload, preempting_workload
from app.offline.sources import Sources
from app.policies.admin_access import admin_access_rules, standing_admin_requests
from app.policies.base import Context, decode
from app.policies.builders import (
    legacy_matcher,
    mapping_resolver,
    near_miss_names,
    sharing_rules,
)
from app.policies.device_classes import class_allow_lists, standing_uses
from app.policies.exceptions import Clock, Exceptions, cover, policy_exceptions, system_clock
from app.policies.extended_names import cluster_conflicts
from app.policies.mapped import scheduler_class
from app.policies.parts import Parts
from app.policies.preemption import KnownClasses, known_classes
from app.policies.workloads import workload_catalogue
from app.translation.legacy import LegacyMatcher, MappingResolver, legacy_requests
from app.translation.near_miss import NearMisses, near_misses
from app.translation.sharing import SharingRules
from app.workloads import Catalogue, Template, builtin, counted, group_kind, scan

Obj = dict[str, Any]


@dataclass
class NamespaceReport:
    namespace: str
    mode: str
    objects: int = 0
    legacy_objects: list[str] = field(default_factory=list)
    resources: set[str] = field(default_factory=set)
    unmapped: set[str] = field(default_factory=set)
    invalid: list[str] = field(default_factory=list)
    excepted: dict[str, str] = field(default_factory=dict)
    """Legacy objects an active policy exception wholly covers -> `<exception> until <date>`:
    a dra-only label would admit them until that date."""
    unrewritable: list[str] = field(default_factory=list)
    """GPU requests outside the pod templates dra-webhook rewrites (an operator's own fields,
    Helm values, an unknown kind): `Kind/name: path: why`. A dra-only label denies them."""
    unserved: list[str] = field(default_factory=list)
    """DRA objects of an apiVersion the target cluster does not serve: `Kind/name: why`."""
    gpu_pods: dict[str, int] = field(default_factory=dict)
    """Pods asking for GPUs, by how they are served (app.offline.sources: device-plugin,
    dra-claim, dra-extended-resource, unscheduled); a pod served two ways counts in both."""
    mapped: dict[str, str] = field(default_factory=dict)
    """Legacy objects whose every legacy request a DeviceClass maps, where the policy lets such
    names through dra-only (`draOnly.mappedNames: allow`) -> `name -> DeviceClass`, ...: a
    dra-only label would admit them, the scheduler serving them from DRA devices."""
    near_misses: list[str] = field(default_factory=list)
    """Requests for names that are probably typos of a legacy name (`nvidia.con/gpu`), which
    no node serves: `Kind/name: path: name: amount: did you mean ...`."""
    counted: list[str] = field(default_factory=list)
    """Caps and quotas on legacy names (a NodePool's limits, a ClusterQueue's quota): no
    request, but they count nothing once the nodes serve GPUs through DRA."""
    group_claims: list[str] = field(default_factory=list)
    """Group claims of Workloads and PodGroups (one claim shared by every pod of the group,
    docs/quotas.md): `Kind/name: path: group claim <name> (template t): 4 devices of <class>`."""
    tenancy: list[str] = field(default_factory=list)
    """Stored objects the tenancy guards would refuse today (docs/tenancy.md): a DeviceClass
    outside the namespace's `deviceClasses` allow-list, admin access outside
    `adminAccess.namespaceSelector`: `Kind/name: path: why`."""
    device_taints: list[str] = field(default_factory=list)
    """The DeviceTaintRules in force that evict pods of the namespace, or keep their devices
    off new claims (app.offline.taints): `DeviceTaintRule name (taint) evicts pod-a, pod-b`."""
    preempting: list[PreemptingWorkload] = field(default_factory=list)
    """GPU workloads whose pods may evict lower-priority pods today, which DRA does not do
    (app.offline.preempting). A finding beside readiness, not part of it: what dra-only
    admits is `ready_for_dra_only`'s; this is what the move takes away."""

    @property
    def ready_for_dra_only(self) -> bool:
        return (
            not self.invalid
            and not self.unrewritable
            and all(o in self.excepted or o in self.mapped for o in self.legacy_objects)
        )


@dataclass(frozen=True, slots=True)
class ReportRules:
    """What the report reads of the policy, built as the webhook builds it."""

    legacy: LegacyMatcher
    mappings: MappingResolver
    sharing: SharingRules
    exceptions: Exceptions
    catalogue: Catalogue
    annotations: tuple[str, ...] = ()
    parts: Parts | None = None
    """The policy's parts, when it has tenancy guards (the checks' own code judges them)."""
    mapped_allowed: bool = False
    """`draOnly.mappedNames: allow`: names a DeviceClass maps pass dra-only."""
    near: NearMisses | None = None
    """Names that are probably typos of a legacy name."""
    classes: KnownClasses | None = None
    """The PriorityClasses (the view's, then the policy's `preemption.priorityClasses`), for
    the preemption finding; None with `preemption.warn: false`."""

    @classmethod
    def build(cls, policy: Policy, clock: Clock = system_clock) -> ReportRules:
        parts = Parts(policy, clock=clock)
        allow_lists, admin = parts.build(class_allow_lists), parts.build(admin_access_rules)
        guarded = bool(allow_lists) or (admin.enabled and admin.claim_namespaces is not None)
        return cls(
            parts.build(legacy_matcher),
            parts.build(mapping_resolver),
            parts.build(sharing_rules),
            parts.build(policy_exceptions),
            parts.build(workload_catalogue),
            policy.legacy_resources.annotations,
            parts if guarded else None,
            policy.dra_only.allows_mapped_names,
            parts.build(near_miss_names),
            parts.build(known_classes) if policy.preemption.warn else None,
        )


def sources_for(policy: Policy, view: ClusterView) -> Sources:
    """Where each pod's GPUs come from, judged by the policy's legacy names and the view's
    DeviceClass `extendedResourceName` mappings."""
    parts = Parts(policy)
    return Sources(
        parts.build(legacy_matcher),
        parts.build(workload_catalogue),
        view.device_class_for_extended_resource,
    )


def conflicts(rules: ReportRules, view: ClusterView) -> list[str]:
    """DeviceClass `extendedResourceName` collisions, cluster-wide (app.policies.extended_names)."""
    return list(cluster_conflicts(view, rules.mappings, rules.sharing))


def report(
    policy: Policy,
    view: ClusterView,
    objects: Iterable[tuple[str, Obj]],
    clock: Clock = system_clock,
    served: Served | None = None,
    *,
    sources: Sources | None = None,
) -> list[NamespaceReport]:
    """Per namespace: which objects still ask for legacy extended resources, and which DRA
    objects the target cluster does not serve; exceptions are judged at `clock`'s time.
    `sources` (from `sources_for`) is given every Pod and Node, and each namespace's
    `gpu_pods` is taken from it."""
    rules = ReportRules.build(policy, clock)
    label = policy.namespace_modes.label
    found: dict[str, NamespaceReport] = {}
    owned_by_workload: set[tuple[str, str]] = set()
    pods: list[tuple[str, Obj]] = []
    for where, obj in objects:
        meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
        assert isinstance(meta, dict)
        ns = str(meta.get("namespace") or "")
        if sources is not None and obj["kind"] in ("Pod", "Node"):
            if obj["kind"] == "Node":
                sources.add_node(obj)
            else:
                sources.add_pod(obj)
        if not ns:
            continue
        if ns not in found:
            labels = view.namespace_labels(ns) or {}
            found[ns] = NamespaceReport(ns, labels.get(label, "-"))
        unserved = served(obj) if served is not None else None
        if unserved is not None:
            found[ns].unserved.append(f"{obj['kind']}/{meta.get('name', '?')}: {unserved}")
        if obj["kind"] == "Pod" and meta.get("ownerReferences"):
            pods.append((where, obj))  # counted through their workload when it is listed
            continue
        _count(found[ns], where, obj, rules, view)
        owned_by_workload.add((ns, str(meta.get("name", ""))))
    for where, obj in pods:
        ns = obj["metadata"]["namespace"]
        owners = {
            str(o.get("name")) for o in obj["metadata"]["ownerReferences"] if isinstance(o, dict)
        }
        if not any((ns, owner) in owned_by_workload for owner in owners):
            _count(found[ns], where, obj, rules, view)
    if sources is not None:
        for ns, counts in sources.by_namespace.items():
            if ns in found:
                found[ns].gpu_pods = dict(sorted(counts.items()))
    return sorted(found.values(), key=lambda r: r.namespace)


def _count(
    entry: NamespaceReport,
    where: str,
    obj: Obj,
    rules: ReportRules,
    view: ClusterView,
) -> None:
    group, kind = group_kind(obj)
    name = f"{kind}/{obj.get('metadata', {}).get('name', '?')}"
    if rules.parts is not None:
        _tenancy(entry, name, obj, rules.parts, view)
    entry.counted += [f"{name}: {line}" for line in counted(group, kind, obj, rules.legacy)]
    if (group, kind) in GROUP_KINDS:
        _group_claims(entry, name, kind, obj, view)
        return
    try:
        templates = rules.catalogue.templates(group, kind, obj)
        specs = tuple(t.spec for t in templates)
        found = scan(group, kind, obj, rules.catalogue, rules.legacy, annotations=rules.annotations)
        if rules.near is not None:
            mapped = view.device_class_for_extended_resource
            entry.near_misses += [
                f"{name}: {m.path}: {m.message}"
                for spec in specs
                for m in near_misses(spec, rules.near, mapped)
            ]
        if not specs and not found:
            return
        entry.objects += 1
        legacy = [r for spec in specs for r in legacy_requests(spec, rules.legacy)]
    except ObjectShapeError as exc:
        entry.invalid.append(f"{name}: {exc}")
        return
    entry.unrewritable += [f"{name}: {f.path}: {f.message}" for f in found]
    entry.resources |= {f.resource for f in found}
    if legacy or found:
        entry.legacy_objects.append(name)
        for item in legacy:
            entry.resources.add(item.resource)
            shared = rules.sharing.fix(item) is not None
            if not shared and rules.mappings.resolve(item.resource, view) is None:
                entry.unmapped.add(item.resource)
        if rules.exceptions:
            labels = view.namespace_labels(entry.namespace) or {}
            rest = list(legacy)
            used: dict[str, str] = {}
            for spec in specs:
                mine = [r for r in rest if r.container.path.startswith(spec.path + ".")]
                coverage = cover(rules.exceptions.selecting(kind, spec, labels), mine)
                if mine and not coverage.rest:
                    used |= {a.name: f"{a.name} {a.when()}" for a in coverage.used}
                    rest = [r for r in rest if r not in mine]
            if not rest:
                entry.excepted[name] = ", ".join(used.values())
        if legacy and name not in entry.excepted:
            _preempting(entry, name, templates, rules, view)
        if rules.mapped_allowed and legacy and not found:
            classes = {r.resource: scheduler_class(r.resource, view) for r in legacy}
            if all(classes.values()):
                entry.mapped[name] = ", ".join(
                    f"{resource} -> DeviceClass {found[0]}"
                    for resource, found in sorted(classes.items())
                    if found is not None
                )


def _preempting(
    entry: NamespaceReport,
    name: str,
    templates: tuple[Template, ...],
    rules: ReportRules,
    view: ClusterView,
) -> None:
    """The preemption finding of a workload asking for legacy GPUs (app.offline.preempting)."""
    if rules.classes is None or view.release.preempts_for_dra:
        return
    found = preempting_workload(name, templates, rules.legacy, rules.classes.classes(view))
    if found is not None:
        entry.preempting.append(found)


def _group_claims(
    entry: NamespaceReport, name: str, kind: str, obj: Obj, view: ClusterView
) -> None:
    """A Workload's or PodGroup's group claims, with the devices of the templates the view
    holds: one claim for the whole group, however many pods it has."""
    try:
        found = group_claims(obj, kind)
    except ObjectShapeError as exc:
        entry.invalid.append(f"{name}: {exc}")
        return
    for claim in found:
        line = f"{name}: {claim.field}: group claim {claim.name} ({claim.label})"
        if claim.template_name is not None:
            stored = view.get(Kind.RESOURCE_CLAIM_TEMPLATE, claim.template_name, entry.namespace)
            try:
                count = count_claim_spec(*template_claim_spec(stored)) if stored else None
            except ObjectShapeError:
                count = None
            if count is not None:
                held = [f"{n} device{'s' * (n != 1)} of {c}" for c, n in count.devices.items()]
                held += [f"all devices of {c}" for c in sorted(count.unbounded)]
                if held:
                    line += f": {', '.join(held)}"
        suffix = " for each PodGroup made from it" if kind == "Workload" else ""
        entry.group_claims.append(f"{line}, one claim shared by the group's pods{suffix}")


GENERATED_CLAIM_ANNOTATIONS = (
    "resource.kubernetes.io/pod-claim-name",
    "resource.kubernetes.io/extended-resource-claim",
)
"""A claim made for a pod, from its template or its extended resources: judged there."""


def _tenancy(entry: NamespaceReport, name: str, obj: Obj, parts: Parts, view: ClusterView) -> None:
    """What the tenancy guards would refuse of a stored object, with the checks' own code."""
    kind = obj.get("kind")
    meta = obj.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, dict) else None
    if (
        kind == "ResourceClaim"
        and isinstance(annotations, dict)
        and any(a in annotations for a in GENERATED_CLAIM_ANNOTATIONS)
    ):
        return
    labels = view.namespace_labels(entry.namespace) or {}
    ctx = Context(view=view, policy=parts.policy, parts=parts, mode=None, namespace_labels=labels)
    catalogue = parts[workload_catalogue] if workload_catalogue in parts else builtin()
    request = decode(as_request(obj, entry.namespace, "report"), catalogue, parts.policy.cel)
    try:
        found = standing_uses(request, ctx)
        if kind in ("ResourceClaim", "ResourceClaimTemplate"):
            found += standing_admin_requests(request, ctx)
    except ObjectShapeError as exc:
        if kind in ("ResourceClaim", "ResourceClaimTemplate"):  # a pod spec's: the scan's
            entry.invalid.append(f"{name}: {exc}")
        return
    entry.tenancy += [f"{name}: {line}" for line in found]


def classify(
    where: str, obj: Obj, mode: str, rules: ReportRules, view: ClusterView
) -> NamespaceReport:
    """One object's verdict, as the report of a namespace holding only it.

    For callers that stream objects (`app.report`, over the live cluster): the classification is
    the one `report` applies, object by object, and `merge` adds it to a namespace's totals.
    """
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    assert isinstance(meta, dict)
    entry = NamespaceReport(str(meta.get("namespace") or ""), mode)
    _count(entry, where, obj, rules, view)
    return entry


def merge(into: NamespaceReport, part: NamespaceReport) -> None:
    """Add `part`'s counts and findings to `into`, field by field (numbers add, lists extend,
    sets join), so a field added to NamespaceReport is carried without a change here."""
    for name in into.__dataclass_fields__:
        mine, theirs = getattr(into, name), getattr(part, name)
        if isinstance(mine, (bool, str)):
            continue
        if isinstance(mine, int):
            setattr(into, name, mine + theirs)
        elif isinstance(mine, list):
            mine.extend(theirs)
        elif isinstance(mine, set):
            mine |= theirs
        elif isinstance(mine, dict):
            mine.update(theirs)
