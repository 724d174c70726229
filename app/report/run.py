"""One live report: list, classify, and (with `--policy-reports`) write one report per namespace.

Namespaces (for their mode label), DeviceClasses (for `spec.extendedResourceName` mappings)
and PriorityClasses (which GPU workloads rely on preemption: app.offline.preempting; optional,
as Nodes are) are listed first into a `ClusterView`, the same view the offline report and the
webhook read; then the DeviceTaintRules, where the cluster serves them, with the ResourceSlices
when there are any (what each rule evicts or keeps off, `app.offline.taints`); then, a page at
a time into the `Tally`: Nodes (the legacy names their device plugins
advertise, `app.offline.sources`), every pod-bearing kind, owners first (the operators' kinds of
the workload catalogue the API server serves, found through discovery), then
ResourceClaimTemplates and ResourceClaims (the tenancy guards judge them, docs/tenancy.md), and
Workloads and PodGroups where the release serves them (their group claims, docs/quotas.md).
Nothing else is held: the peak memory is one page of objects plus the totals
(docs/benchmarks.md, "Live report").

PolicyReports are written for every namespace with a pod-bearing object or the mode label, by
server-side apply: created on the first run, updated in place after (never a duplicate), with no
read first. A namespace being deleted refuses new objects (kube-apiserver's NamespaceLifecycle
admission: 403 "unable to create new content in namespace X because it is being terminated",
and 404 once it is gone): its report is skipped and named in `Outcome.skipped`, the others are
written. The report would go with the namespace anyway, and an hourly CronJob must not leave
every other namespace's report stale because one namespace was being deleted when it ran.
Which it was is asked of the API server after the write failed, not read from the error: that
403 looks like RBAC's, and the lister reads a 404 there as the CRD missing.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from app.cluster.listing import (
    CLAIMS,
    DEVICE_CLASSES,
    NAMESPACES,
    NODES,
    POLICY_REPORTS,
    PRIORITY_CLASSES,
    RESOURCE_SLICES,
    WORKLOADS,
    Cluster,
    ReportError,
    Resource,
    connect,
    device_taint_rules,
    group_resources,
)
from app.cluster.release import ServedRelease
from app.cluster.view import ClusterView, Kind
from app.config import Policy
from app.offline import taints
from app.report.policyreport import Fix, policy_report
from app.report.progress import Progress
from app.report.tally import NO_MODE, Tally

logger = logging.getLogger(__name__)

NAME_LABEL = "kubernetes.io/metadata.name"
"""The label the API server sets on every namespace to its name (immutable, Kubernetes 1.22+):
lists one namespace with the `list` the report already has."""


@dataclass(frozen=True)
class Options:
    kubeconfig: Path | None
    """None: the pod's service account (--in-cluster)."""
    policy_reports: bool = False
    page_size: int = 500


@dataclass(frozen=True)
class Outcome:
    tally: Tally
    listed: dict[str, int]
    """Objects listed, by kind."""
    written: int
    """PolicyReports created or updated."""
    skipped: tuple[str, ...] = ()
    """Namespaces whose PolicyReport was not written: being deleted, they refuse new objects."""
    nodes_unread: str = ""
    """Why the Nodes could not be listed (no `list` on nodes, say): the per-node view is empty,
    the rest of the report stands."""
    release: ServedRelease = field(default_factory=ServedRelease.assumed)
    """The release the cluster runs and the DRA features its API server keeps."""
    rules: tuple[taints.RuleInForce, ...] = ()
    """The DeviceTaintRules in force and what each evicts or keeps off."""
    classes_unread: str = ""
    """Why the PriorityClasses could not be listed: only the policy's
    `preemption.priorityClasses` were known to the preemption finding."""


async def run(policy: Policy, options: Options, progress_to: TextIO) -> Outcome:
    """List the cluster, tally it, and write the PolicyReports when asked."""
    cluster = Cluster(await connect(options.kubeconfig), options.page_size)
    progress = Progress(progress_to)
    try:
        view = ClusterView()
        view.set_release(await cluster.release())
        view.replace(Kind.NAMESPACE, await _all(cluster, NAMESPACES, progress))
        classes_served = await _device_classes(cluster, view, progress)
        try:
            view.replace(Kind.PRIORITY_CLASS, await _all(cluster, PRIORITY_CLASSES, progress))
        except ReportError as exc:
            classes_unread = str(exc)
        else:
            classes_unread = ""
        tally = Tally(policy, view)
        listed: dict[str, int] = {}
        rules = await _taint_rules(cluster, view, tally, listed, progress)
        # The operators' kinds the cluster serves, listed first: they own the pods (and Jobs)
        # their controllers make, which are then counted under them.
        operators = await cluster.discover(tally.operator_kinds())
        # Claims and templates after the pods: a claim made for a pod is judged through it.
        claims = CLAIMS if classes_served else ()
        # Nodes first, for the legacy names their device plugins advertise (status.allocatable):
        # optional, as the per-node view is; the namespaces' report stands without it.
        try:
            listed[NODES.kind] = await _into(cluster, NODES, tally, progress)
        except ReportError as exc:
            skipped_nodes = str(exc)
        else:
            skipped_nodes = ""
        # Workloads and PodGroups where served: their group claims (one claim per group).
        groups = group_resources(view.release.group_versions)
        for resource in (*operators, *WORKLOADS, *claims, *groups):
            listed[resource.kind] = await _into(cluster, resource, tally, progress)
        for ns in view.objects(Kind.NAMESPACE).values():
            name = ns["metadata"]["name"]
            if tally.mode(name) != NO_MODE:
                tally.namespace(name)  # a labelled namespace is reported even when empty
        in_force = taints.rules_in_force(rules, view, policy)
        tally.add_taint_rules(in_force)
        skipped: list[str] = []
        written = (
            await _write_reports(cluster, policy, tally, view, skipped=skipped, progress=progress)
            if options.policy_reports
            else 0
        )
        progress.done()
        return Outcome(
            tally,
            listed,
            written,
            tuple(skipped),
            skipped_nodes,
            view.release,
            tuple(in_force),
            classes_unread,
        )
    finally:
        progress.done()
        await cluster.close()


async def _write_reports(
    cluster: Cluster,
    policy: Policy,
    tally: Tally,
    view: ClusterView,
    *,
    skipped: list[str],
    progress: Progress,
) -> int:
    """Apply a PolicyReport per namespace; how many were written (`skipped`: the namespaces
    being deleted meanwhile)."""
    written = 0
    fix = _fix(tally, view)
    now = dt.datetime.now(dt.UTC)
    entries = list(tally.reports())
    for number, entry in enumerate(entries, 1):
        report = policy_report(entry, policy.namespace_modes, fix, now)
        try:
            await cluster.apply(POLICY_REPORTS, report)
        except ReportError:
            if not await _leaving(cluster, entry.report.namespace):
                raise  # RBAC (the message says what to grant), no CRD, ...
            skipped.append(entry.report.namespace)
        else:
            written += 1
        progress.update("policyreports", number, len(entries) - number)
    return written


async def _taint_rules(
    cluster: Cluster, view: ClusterView, tally: Tally, listed: dict[str, int], progress: Progress
) -> list[dict[str, object]]:
    """The DeviceTaintRules, in the newest version the cluster serves them in (discovery, read
    by the release probe); none where no version does. When there are some, what they select
    and who holds it: the slices into the view, and the allocated claims as they stream by
    into the tally (`Tally.keep_claims`)."""
    served = view.release.taint_rules
    if not served:
        return []
    rules = await _all(cluster, device_taint_rules(served[0]), progress)
    if rules:
        view.replace(Kind.RESOURCE_SLICE, await _all(cluster, RESOURCE_SLICES, progress))
        listed[RESOURCE_SLICES.kind] = len(view.resource_slices())
        listed["DeviceTaintRule"] = len(rules)
        tally.keep_claims = True
    return rules


async def _device_classes(cluster: Cluster, view: ClusterView, progress: Progress) -> bool:
    """The DeviceClasses into the view (for `spec.extendedResourceName` mappings); False when
    resource.k8s.io/v1 is not served."""
    try:
        classes = await _all(cluster, DEVICE_CLASSES, progress)
    except ReportError as exc:
        if "404" not in str(exc):
            raise
        return False
    view.replace(Kind.DEVICE_CLASS, classes)
    return True


async def _into(cluster: Cluster, resource: Resource, tally: Tally, progress: Progress) -> int:
    """List `resource` a page at a time into the tally; the number of objects listed."""
    seen = 0
    async for page in cluster.pages(resource):
        for obj in page.items:
            tally.add(obj)
        seen += len(page.items)
        progress.update(resource.plural, seen, page.remaining)
    return seen


async def _leaving(cluster: Cluster, namespace: str) -> bool:
    """Whether `namespace` is being deleted (deletionTimestamp set) or already gone."""
    found: list[dict[str, object]] = []
    async for page in cluster.pages(NAMESPACES, f"{NAME_LABEL}={namespace}"):
        found.extend(page.items)
    return not found or any(
        isinstance(meta := ns.get("metadata"), dict) and bool(meta.get("deletionTimestamp"))
        for ns in found
    )


async def _all(cluster: Cluster, resource: Resource, progress: Progress) -> list[dict[str, object]]:
    """Every object of a small cluster-scoped kind (namespaces, DeviceClasses)."""
    found: list[dict[str, object]] = []
    async for page in cluster.pages(resource):
        found.extend(page.items)
        progress.update(resource.plural, len(found), page.remaining)
    return found


def _fix(tally: Tally, view: ClusterView) -> Fix:
    mappings = tally.rules.mappings

    def fix(resource: str) -> str:
        mapping = mappings.resolve(resource, view)
        if mapping is None:
            return f"no DRA mapping yet: {mappings.missing_hint(resource)}"
        selectors = f" with selectors {list(mapping.selectors)}" if mapping.selectors else ""
        return (
            f"request a ResourceClaimTemplate of DeviceClass {mapping.device_class_name}"
            f"{selectors} instead (`dra-webhook check` on the manifest prints the translation)"
        )

    return fix
