"""The migration's progress in the webhook's /metrics: legacy workloads per namespace and mode.

`dra-webhook report --policy-reports` (the chart's report CronJob) classifies every workload and
writes one PolicyReport per namespace; the CronJob's pod lives for a minute, too short to be
scraped. So the webhook, which Prometheus scrapes anyway, reads those reports back: every
`interval` it lists the PolicyReports labelled as ours (a page at a time, a few hundred bytes
per namespace kept) and `dra_webhook_legacy_workloads{workload_namespace, mode}` shows, for
each, the workloads that still ask for a legacy extended resource (the report's fail + warn
results, less the preemption findings, which are about workloads counted already).
Nothing is classified twice, and the webhook never lists pods.

Off unless `DRA_WEBHOOK_MIGRATION_GAUGE_INTERVAL_SECONDS` > 0 and the view is live (the chart
sets it with report.enabled and report.policyReports, and grants `list` on policyreports). A
failed read (the CRD not installed, a 403) is logged, the last counts are kept and
`dra_webhook_legacy_workloads_read_errors_total` climbs; the next interval tries again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from kubernetes.aio import client as k8s

from app.cluster.listing import POLICY_REPORTS, Cluster, ReportError
from app.config.settings import ClusterSource as SourceKind
from app.config.settings import Settings
from app.k8s.policyreports import (
    GPU_PODS_ANNOTATION,
    GPU_SOURCES,
    MODE_LABEL,
    NO_MODE_VALUE,
    PREEMPTING_ANNOTATION,
    SELECTOR,
)

logger = logging.getLogger(__name__)

Connect = Callable[[], Awaitable[k8s.ApiClient]]


class MigrationProgress:
    """The last counts read from the PolicyReports, re-read every `interval` seconds."""

    def __init__(self, connect: Connect, interval: float) -> None:
        self._connect = connect
        self._interval = interval
        self.counts: dict[tuple[str, str], int] = {}
        """(namespace, mode) -> workloads with a legacy request."""
        self.gpu_pods: dict[tuple[str, str], int] = {}
        """(namespace, source) -> pods asking for GPUs served that way (app.offline.sources)."""
        self.reads = 0
        self.read_errors = 0
        self.last_read: float | None = None
        """Unix time of the last successful read."""

    @classmethod
    def from_settings(cls, settings: Settings) -> MigrationProgress | None:
        """The reader the settings ask for: None when off or without a live view."""
        interval = settings.migration_gauge_interval_seconds
        if interval <= 0 or settings.cluster_source is SourceKind.STATIC:
            return None
        from app.cluster.api import connect  # kubernetes.aio config: only when used

        return cls(lambda: connect(settings), interval)

    async def read(self, cluster: Cluster) -> None:
        """List our PolicyReports once and replace the counts."""
        counts: dict[tuple[str, str], int] = {}
        gpu_pods: dict[tuple[str, str], int] = {}
        async for page in cluster.pages(POLICY_REPORTS, SELECTOR):
            for report in page.items:
                meta = report.get("metadata")
                summary = report.get("summary")
                if not isinstance(meta, dict) or not isinstance(summary, dict):
                    continue
                labels = meta.get("labels")
                mode = labels.get(MODE_LABEL) if isinstance(labels, dict) else None
                mode = str(mode or NO_MODE_VALUE)
                legacy = sum(v for k in ("fail", "warn") if isinstance(v := summary.get(k), int))
                namespace = str(meta.get("namespace", ""))
                annotations = meta.get("annotations")
                preempting = (
                    annotations.get(PREEMPTING_ANNOTATION)
                    if isinstance(annotations, dict)
                    else None
                )
                if isinstance(preempting, str) and preempting.isdigit():
                    legacy = max(0, legacy - int(preempting))
                counts[(namespace, mode)] = legacy
                served = (
                    annotations.get(GPU_PODS_ANNOTATION) if isinstance(annotations, dict) else None
                )
                for source, count in _counts(served):
                    gpu_pods[(namespace, source)] = count
        self.counts = counts
        self.gpu_pods = gpu_pods
        self.reads += 1
        self.last_read = time.time()

    async def run(self) -> None:
        """Read now, then every interval, until cancelled."""
        cluster = Cluster(await self._connect(), page_size=500)
        try:
            while True:
                try:
                    await self.read(cluster)
                except ReportError as exc:
                    self.read_errors += 1
                    logger.warning("migration progress not read: %s", exc)
                await asyncio.sleep(self._interval)
        finally:
            await cluster.close()


def _counts(text: object) -> list[tuple[str, int]]:
    """`device-plugin=3,dra-claim=2` as pairs; what does not parse, or is not one of
    GPU_SOURCES, is left out, so the gauge's label values stay a closed set."""
    if not isinstance(text, str):
        return []
    found = []
    for part in text.split(","):
        source, _, count = part.partition("=")
        if source in GPU_SOURCES and count.isdigit():
            found.append((source, int(count)))
    return found
