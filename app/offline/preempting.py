"""`report`'s preemption finding: the GPU workloads that may evict lower-priority pods today.

kube-scheduler preempts for device-plugin GPUs (`nvidia.com/gpu` is a node resource like CPU)
but not for DRA devices (app.policies.preemption, which also judges each pod spec here). A
workload whose pods ask for legacy GPUs at a priority that may preempt relies on that: once its
requests become claims (migrated, translated, or served from DRA for a name a DeviceClass maps)
its pods wait until a device frees up by itself. The report names it per namespace, with its
PriorityClass and how many pods of it run at once (the workload catalogue's count, as quota
reads it), so the platform team decides before the move (docs/operations.md, "Preemption").

Not a finding: a workload a policy exception wholly keeps on the device plugin (it keeps
preemption), a class known neither to the cluster (or its dump) nor to the policy's
`preemption.priorityClasses`, `preemption.warn: false`, a release whose scheduler preempts for
DRA.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from app.k8s.priority import Classes
from app.policies.preemption import preempting
from app.translation.legacy import LegacyMatcher
from app.workloads import Template

FINDING = "relies on preemption, which DRA does not do"


@dataclass(frozen=True, slots=True)
class PreemptingWorkload:
    """One GPU workload whose pods may preempt today (fields as the JSON output has them)."""

    workload: str
    """`Kind/name`."""
    priority_class: str
    """The PriorityClass its pods get ("" for a Pod with a priority and no class)."""
    priority: int
    pods: int | None
    """How many of its pods run at once; None where the object does not say (one per node for
    a DaemonSet: `per_node`)."""
    per_node: bool
    resources: tuple[str, ...]
    """The legacy names it asks for."""

    def pods_text(self) -> str:
        """`2 pods`, `1 pod`, `one pod per node`, `its pods`."""
        if self.per_node:
            return "one pod per node"
        if self.pods is None:
            return "its pods"
        return f"{self.pods} pod{'s' * (self.pods != 1)}"

    def describe(self) -> str:
        """`Deployment/infer: 2 pods at priority 100000 (class inference-high) may evict
        lower-priority pods for nvidia.com/gpu today: relies on preemption, which DRA does not
        do`."""
        named = f" (class {self.priority_class})" if self.priority_class else ""
        return (
            f"{self.workload}: {self.pods_text()} at priority {self.priority}{named} may evict "
            f"lower-priority pods for {', '.join(self.resources)} today: {FINDING}"
        )


def preempting_workload(
    workload: str, templates: Iterable[Template], legacy: LegacyMatcher, classes: Classes
) -> PreemptingWorkload | None:
    """The finding for an object's pod templates (None when no template's pods may preempt for
    legacy GPUs). Of templates at different priorities (a job's roles), the highest is named
    and the pods of every preempting template counted."""
    found = [(t, p) for t in templates if (p := preempting(t.spec, legacy, classes)) is not None]
    if not found:
        return None
    top = max((p.priority for _, p in found), key=lambda priority: priority.value)
    counts = [t.pods for t, _ in found]
    return PreemptingWorkload(
        workload,
        top.class_name,
        top.value,
        None if any(c is None for c in counts) else sum(c for c in counts if c is not None),
        any(t.per_node for t, _ in found),
        tuple(dict.fromkeys(r for _, p in found for r in p.resources)),
    )
