"""The live report's running totals: objects go in one at a time, counts and findings stay.

Each object is classified by `app.offline.classify`, the same verdict the dump-based `report`
gives, and added to its namespace's `NamespaceReport` with `offline.merge`; the object itself is
dropped at once. What is kept grows with namespaces, legacy workloads and owners, never with
the objects listed:

- per namespace, one `NamespaceReport` (counts, the legacy objects' names) and its pass count;
- one small `Finding` per object with a legacy request or a spec that does not parse (the
  PolicyReport needs one result each), and one more for a GPU workload that relies on
  preemption (app.offline.preempting);
- the (namespace, kind, name) of every listed object that can own another pod-bearing one, so
  that pods are counted under their ReplicaSet, Job, StatefulSet..., ReplicaSets under their
  Deployment and Jobs under their CronJob, as `kubectl get` users think of them. Owners are
  listed first (`app.report.listing.WORKLOADS`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from app import offline
from app.cluster.view import ClusterView, Kind
from app.config import Policy
from app.offline import NamespaceReport, taints
from app.policies.device_classes import WARN_ONLY

Obj = dict[str, Any]

OWNER_KINDS = frozenset(
    {"CronJob", "Deployment", "StatefulSet", "DaemonSet", "ReplicationController"}
    | {"ReplicaSet", "Job"}
)
"""Kinds whose objects own other pod-bearing objects (Jobs, ReplicaSets, Pods)."""
NO_MODE = "-"
"""The mode column of a namespace without the mode label (as the dump-based report prints)."""


@dataclass(frozen=True)
class Finding:
    """One object the PolicyReport has a result for: legacy requests, or a spec that does not
    parse (`invalid` holds the field path and what is wrong)."""

    kind: str
    api_version: str
    name: str
    uid: str
    resources: tuple[str, ...] = ()
    unmapped: tuple[str, ...] = ()
    invalid: str = ""
    unrewritable: str = ""
    """GPU requests outside the pod templates dra-webhook rewrites (path: why)."""
    excepted: str = ""
    """The policy exceptions (with their end dates) that allow every legacy request of it."""
    tenancy: str = ""
    """What the tenancy guards would refuse of it today (path: why; ...)."""
    tenancy_warns: bool = False
    """Only warn-only allow-list entries object to it."""
    device_taint: str = ""
    """A DeviceTaintRule (this finding's object) that evicts pods of the namespace, or keeps
    their devices off new claims: what it does there."""
    taint_evicts: bool = False
    preemption: str = ""
    """Its pods may preempt for legacy GPUs today, which DRA does not do (the finding's text)."""
    priority_class: str = ""


@dataclass
class Namespace:
    """A namespace's totals: the dump report's entry, the objects that pass, the findings."""

    report: NamespaceReport
    passed: int = 0
    findings: list[Finding] = field(default_factory=list)


class Tally:
    """Classify objects as they stream by; keep counts and findings only."""

    def __init__(self, policy: Policy, view: ClusterView) -> None:
        self._rules = offline.ReportRules.build(policy)
        self._view = view
        self._label = policy.namespace_modes.label
        self.namespaces: dict[str, Namespace] = {}
        self.owned = 0
        """Objects counted under their owner instead of on their own."""
        self._owners: set[tuple[str, str, str]] = set()
        self._operator_kinds = frozenset(kind for _, kind in self.operator_kinds())
        self.sources = offline.sources_for(policy, view)
        """Where each pod's GPUs come from: every Pod and Node goes through it."""
        self.keep_claims = False
        """Keep the allocated ResourceClaims in the view (slimmed: their devices and holders),
        for the DeviceTaintRules in force (`add_taint_rules`); only when there are some."""

    @property
    def rules(self) -> offline.ReportRules:
        return self._rules

    def conflicts(self) -> list[str]:
        """DeviceClass extendedResourceName collisions in the listed cluster."""
        return offline.conflicts(self._rules, self._view)

    def operator_kinds(self) -> frozenset[tuple[str, str]]:
        """(group, kind) of the catalogue's kinds outside the core API groups."""
        return frozenset(
            (e.group, e.kind) for e in self._rules.catalogue.entries() if not e.built_in
        )

    def mode(self, namespace: str) -> str:
        labels = self._view.namespace_labels(namespace) or {}
        return labels.get(self._label, NO_MODE)

    def namespace(self, name: str) -> Namespace:
        found = self.namespaces.get(name)
        if found is None:
            found = self.namespaces[name] = Namespace(NamespaceReport(name, self.mode(name)))
        return found

    def add(self, obj: Obj) -> None:
        """Classify one object (with `kind` and `apiVersion` set) into its namespace's totals."""
        meta = obj.get("metadata")
        if obj.get("kind") == "Node":
            self.sources.add_node(obj)
            return
        if not isinstance(meta, dict) or not isinstance(meta.get("namespace"), str):
            return
        ns, kind, name = meta["namespace"], str(obj.get("kind")), str(meta.get("name", ""))
        if kind == "ResourceClaim" and self.keep_claims and _allocated(obj):
            self._view.apply(Kind.RESOURCE_CLAIM, obj)
        if kind == "Pod":
            served = self.sources.add_pod(obj).sources
            if served:
                counts = self.namespace(ns).report.gpu_pods
                for source in served:
                    counts[source] = counts.get(source, 0) + 1
        if kind in OWNER_KINDS or kind in self._operator_kinds:
            self._owners.add((ns, kind, name))
        if self._owned(ns, meta.get("ownerReferences")):
            self.owned += 1
            return
        entry = self.namespace(ns)
        part = offline.classify(
            f"{kind} {ns}/{name}", obj, entry.report.mode, self._rules, self._view
        )
        offline.merge(entry.report, part)
        if part.tenancy:
            entry.findings.append(
                Finding(
                    kind=kind,
                    api_version=str(obj.get("apiVersion", "")),
                    name=name,
                    uid=str(meta.get("uid", "")),
                    tenancy="; ".join(t.split(": ", 1)[1] for t in part.tenancy),
                    tenancy_warns=all(t.endswith(WARN_ONLY) for t in part.tenancy),
                )
            )
        if part.invalid or part.legacy_objects or part.unrewritable:
            entry.findings.append(
                Finding(
                    kind=kind,
                    api_version=str(obj.get("apiVersion", "")),
                    name=name,
                    uid=str(meta.get("uid", "")),
                    resources=tuple(sorted(part.resources)),
                    unmapped=tuple(sorted(part.unmapped)),
                    invalid="; ".join(part.invalid),
                    unrewritable="; ".join(part.unrewritable),
                    excepted="; ".join(part.excepted.values()),
                )
            )
        elif part.objects and not part.tenancy:
            entry.passed += 1
        for workload in part.preempting:
            entry.findings.append(
                Finding(
                    kind=kind,
                    api_version=str(obj.get("apiVersion", "")),
                    name=name,
                    uid=str(meta.get("uid", "")),
                    resources=workload.resources,
                    preemption=workload.describe(),
                    priority_class=workload.priority_class,
                )
            )

    def add_taint_rules(self, rules: list[taints.RuleInForce]) -> None:
        """Each rule's part in the namespaces it reaches: a line of their report, and a
        finding (a PolicyReport result) naming the rule."""
        for rule in rules:
            for namespace in rule.consumers:
                self.namespace(namespace)  # (reached, though nothing of it was counted)
        reports = [entry.report for entry in self.namespaces.values()]
        taints.add_to_reports(rules, reports, self.mode)
        for rule in rules:
            for namespace in rule.consumers:
                self.namespace(namespace).findings.append(
                    Finding(
                        kind="DeviceTaintRule",
                        api_version=rule.api_version,
                        name=rule.name,
                        uid=rule.uid,
                        device_taint=rule.in_namespace(namespace),
                        taint_evicts=rule.evicts,
                    )
                )

    def _owned(self, namespace: str, owners: Any) -> bool:
        if not isinstance(owners, list):
            return False
        return any(
            isinstance(o, dict) and (namespace, o.get("kind"), o.get("name")) in self._owners
            for o in owners
        )

    def reports(self) -> Iterator[Namespace]:
        """The namespaces in name order."""
        for name in sorted(self.namespaces):
            yield self.namespaces[name]


def _allocated(claim: Obj) -> bool:
    status = claim.get("status")
    return isinstance(status, dict) and isinstance(status.get("allocation"), dict)
