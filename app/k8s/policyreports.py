"""What marks the PolicyReports `dra-webhook report --policy-reports` writes.

Shared by the writer (`app.report.policyreport`) and the reader behind the webhook's gauge of
legacy workloads (`app.cluster.progress`), so the two cannot drift apart.
"""

from __future__ import annotations

REPORT_NAME = "dra-webhook-migration"
"""One report per namespace, always this name: a second run updates it in place."""
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "dra-webhook"
MODE_LABEL = "dra-webhook/mode"
"""The namespace's mode when the report was written (the value of its mode label)."""
NO_MODE_VALUE = "none"
"""MODE_LABEL of a namespace without the mode label."""
GPU_PODS_ANNOTATION = "dra-webhook/gpu-pods"
"""The namespace's pods asking for GPUs by how they are served, `device-plugin=3,dra-claim=2`
(app.offline.sources): the webhook's dra_webhook_gpu_pods gauge reads it back."""
GPU_SOURCES = ("device-plugin", "dra-claim", "dra-extended-resource", "unscheduled")
"""How a pod's GPUs can be served, the annotation's keys and the gauge's `source` values."""
PREEMPTING_ANNOTATION = "dra-webhook/preempting-workloads"
"""How many of the report's warn results are the preemption finding (a GPU workload that relies
on preemption): each is about a workload whose legacy request has a result of its own, so the
gauge of legacy workloads leaves them out."""
SELECTOR = f"{MANAGED_BY_LABEL}={MANAGED_BY}"
"""The label selector that finds them."""
