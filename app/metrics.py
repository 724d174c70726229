"""Prometheus metrics, held by one object per app (no module-level registry state).

With one worker the metrics live in the app's own registry. With `--workers > 1` every worker is
a separate process, so each keeps its values in files under a shared folder (prometheus-client's
multiprocess mode) and `/metrics`, whichever worker serves it, merges the files of all workers:

- the folder is named by `PROMETHEUS_MULTIPROC_DIR`, which prometheus-client reads once, when it
  is first imported; `app.server.serve` sets it before the workers are spawned;
- the folder is emptied at start (`prepare_multiprocess_dir`): files left by an earlier run would
  otherwise be added to this run's counters;
- counters and histograms are summed over every process that ever wrote them (a worker restarted
  by the supervisor keeps its predecessor's counts); the sync gauge keeps the lowest value among
  the live workers (`livemin`), and a worker drops its gauge file when it stops.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client import values as prometheus_values
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead

from app.errors import ConfigError

LATENCY_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1.0)

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
"""The variable prometheus-client reads at import to switch to per-process files."""


def prepare_multiprocess_dir(path: Path | None) -> Path:
    """The folder for per-worker metric files, created if needed and emptied of old ones.

    None makes a fresh temporary folder. Only `*.db` files (what prometheus-client writes) are
    removed, so a folder given by mistake loses nothing else.
    """
    if path is None:
        return Path(tempfile.mkdtemp(prefix="dra-webhook-metrics-"))
    path.mkdir(parents=True, exist_ok=True)
    for stale in path.glob("*.db"):
        stale.unlink()
    return path


def _multiprocess_values_enabled() -> bool:
    return bool(getattr(prometheus_values.ValueClass, "_multiprocess", False))


class Metrics:
    """The webhook's metrics, registered in their own registry.

    `multiprocess_dir` (set when several workers serve) makes `render` merge the files of every
    worker in that folder instead of reading this process's registry.
    """

    def __init__(
        self, registry: CollectorRegistry | None = None, multiprocess_dir: Path | None = None
    ) -> None:
        if multiprocess_dir is not None and not _multiprocess_values_enabled():
            raise ConfigError(
                f"metrics folder {multiprocess_dir} given but {MULTIPROC_ENV} was not set when "
                "prometheus_client was imported: the workers' counts would not be shared"
            )
        self.multiprocess_dir = multiprocess_dir
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        self.admission_seconds = Histogram(
            "dra_webhook_admission_duration_seconds",
            "Time to answer one AdmissionReview, by endpoint, object kind and decision.",
            ("endpoint", "kind", "decision"),
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.denials = Counter(
            "dra_webhook_denials_total",
            "Denied reviews, by the policy or failure that denied them.",
            ("endpoint", "reason"),
            registry=self.registry,
        )
        self.bad_requests = Counter(
            "dra_webhook_bad_requests_total",
            "Requests answered with HTTP 400 (not a usable AdmissionReview).",
            registry=self.registry,
        )
        self.audit_findings = Counter(
            "dra_webhook_audit_findings_total",
            "Legacy extended-resource requests allowed with a warning in audit namespaces.",
            registry=self.registry,
        )
        self.templates_created = Counter(
            "dra_webhook_templates_created_total",
            "ResourceClaimTemplates created for translation.",
            registry=self.registry,
        )
        self.cluster_synced = Gauge(
            "dra_webhook_cluster_synced",
            "1 when the cluster view of a kind has completed its list, else 0 "
            "(with several workers: 1 only when every live worker has it).",
            ("kind",),
            registry=self.registry,
            multiprocess_mode="livemin",
        )

    def set_synced(self, kinds: Iterable[str], synced: Iterable[str]) -> None:
        """Record which kinds of the cluster view have synced."""
        done = set(synced)
        for kind in kinds:
            self.cluster_synced.labels(kind).set(1 if kind in done else 0)

    def render(self) -> bytes:
        """The exposition text: this process's registry, or every worker's files merged."""
        if self.multiprocess_dir is None:
            return generate_latest(self.registry)
        merged = CollectorRegistry()
        MultiProcessCollector(merged, path=str(self.multiprocess_dir))  # type: ignore[no-untyped-call]
        return generate_latest(merged)

    def close(self) -> None:
        """On worker exit: drop this process's live-gauge file so it stops counting as live."""
        if self.multiprocess_dir is not None:
            mark_process_dead(os.getpid(), str(self.multiprocess_dir))  # type: ignore[no-untyped-call]
