"""Prometheus metrics, held by one object per app (no module-level registry state).

With one worker the metrics live in the app's own registry. With `--workers > 1` every worker is
a separate process, so each keeps its values in files under a shared folder (prometheus-client's
multiprocess mode) and `/metrics`, whichever worker serves it, merges the files of all workers:

- the folder is named by `PROMETHEUS_MULTIPROC_DIR`, which prometheus-client reads once, when it
  is first imported; `app.server.run.serve` sets it before the workers are spawned;
- the folder is emptied at start (`app.server.metrics_dir`): files left by an earlier run would
  otherwise be added to this run's counters;
- counters and histograms are summed over every process that ever wrote them (a worker restarted
  by the supervisor keeps its predecessor's counts); of the cluster-view gauges, `synced` keeps
  the lowest value among the live workers and `stale`/`objects` the highest (each worker has its
  own view, updated in the gauges at its start and at every scrape it serves), and a worker drops
  its gauge files when it stops;
- the live source's list/watch counters are read from the process at scrape time, so with
  several workers a scrape shows those of the worker that served it (each worker watches the
  cluster on its own); so are the bounded caches' (`dra_webhook_cache_*`, by cache name, see
  `app/bounded.py`).

No label is named like a target label Prometheus or the chart's ServiceMonitor puts on every
scraped series (job, instance, namespace, endpoint, pod, service, container): a metric's own
label of such a name would arrive renamed `exported_<name>`, where no query or alert written
against /metrics finds it. So the admission endpoint is `webhook` (mutate, validate) and a
workload's namespace `workload_namespace` (tests/chart/test_dashboard.py checks every family).
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Iterator, Mapping
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client import values as prometheus_values
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead
from prometheus_client.registry import Collector

from app.cel.cache import CompileCache
from app.cluster.stats import SourceStats
from app.cluster.view import ClusterView, Kind
from app.collectors import (
    CacheCollector,
    CelCollector,
    CertificateCollector,
    MigrationCollector,
    MigrationCounts,
    SourceCollector,
    TransportCollector,
    TransportCounters,
    closed,
)
from app.devices.index import DeviceIndex
from app.errors import ConfigError
from app.pipeline import (
    INTERNAL_ERROR,
    REGISTRATIONS,
    Endpoint,
)
from app.server.metrics_dir import MULTIPROC_ENV
from app.translation.leave import LEFT_RULES

"""The label value of anything outside a label's closed set."""
ENDPOINTS = frozenset(e.value for e in Endpoint)
KINDS = frozenset(kind for reg in REGISTRATIONS for _, kind in reg.kinds)
"""The kinds the webhook is registered for (Pods, workloads, claims, DeviceClasses, Namespaces:
admin-rule kinds are among them); any other kind a review names is `other`."""
DECISIONS = frozenset({"allowed", "patched", "denied"})
TRANSLATION_RULES = ("mapping", "deviceclass", "implicit", *LEFT_RULES)
"""The `rule` label of a translation besides `sharing:<rule>` (`left:*`: a request translation
left to the scheduler, which serves it from a DeviceClass: app.translation.leave)."""
CHECKS = frozenset({reg.name for reg in REGISTRATIONS} | {"cel-rules"})
REASONS = (
    CHECKS
    | {f"{INTERNAL_ERROR}:{check}" for check in CHECKS}
    | {
        INTERNAL_ERROR,
        "invalid-object",
        "unknown-namespace",
        "template-create",
        "template-conflict",
    }
)
"""What `Decision.denied_by` can hold."""


_CHILDREN_LIMIT = 1024
"""Raw label values remembered per metric (a kind name comes from the review: bounded)."""

LATENCY_BUCKETS = (
    *(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1.0),
    *(2.5, 5.0, 10.0, 30.0),
)
"""Sub-millisecond up to 1 s where reviews are answered; then up to the API server's largest
timeoutSeconds (30), so a p99 near half a webhook's timeout (the DraWebhookSlowAdmissions alert)
falls between two finite buckets instead of in +Inf."""


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
            "Time to answer one AdmissionReview, by webhook (mutate, validate), object kind and "
            "decision.",
            ("webhook", "kind", "decision"),
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.denials = Counter(
            "dra_webhook_denials_total",
            "Denied reviews, by webhook (mutate, validate) and the policy or failure that denied "
            "them.",
            ("webhook", "reason"),
            registry=self.registry,
        )
        self.bad_requests = Counter(
            "dra_webhook_bad_requests_total",
            "Requests answered with HTTP 400 (not a usable AdmissionReview).",
            registry=self.registry,
        )
        self.check_errors = Counter(
            "dra_webhook_check_errors_total",
            "Checks that raised (a bug) and were answered per failure.internalError, by webhook "
            "(mutate, validate) and check.",
            ("webhook", "check"),
            registry=self.registry,
        )
        self.audit_findings = Counter(
            "dra_webhook_audit_findings_total",
            "Legacy extended-resource requests allowed with a warning in audit namespaces.",
            registry=self.registry,
        )
        self.exceptions = Counter(
            "dra_webhook_exceptions_total",
            "Reviews in which a policy exception let legacy requests through (allowed in a "
            "dra-only namespace, left untranslated in a translate one), by check and exception.",
            ("check", "exception"),
            registry=self.registry,
        )
        self._exception_names: frozenset[str] = frozenset()
        self.exception_end = Gauge(
            "dra_webhook_exception_end_timestamp_seconds",
            "When each policy exception stops applying (midnight UTC after its `until` day), as "
            "a Unix time, by exception: an ended one is still shown, in the past.",
            ("exception",),
            registry=self.registry,
            multiprocess_mode="livemax",
        )
        self.translations = Counter(
            "dra_webhook_translations_total",
            "Legacy requests translated into DRA claims in admitted objects, by the rule that "
            "mapped them: mapping (the policy's mappings), deviceclass (a DeviceClass's "
            "extendedResourceName), implicit (deviceclass.resource.kubernetes.io/<class>), "
            "sharing:<rule> (a GPU-sharing rule); or left untranslated for the scheduler to "
            "serve from a DeviceClass: left:deviceclass (its extendedResourceName), left:implicit.",
            ("rule",),
            registry=self.registry,
        )
        self._translation_rules: frozenset[str] = frozenset(TRANSLATION_RULES)
        self.templates_created = Counter(
            "dra_webhook_templates_created_total",
            "ResourceClaimTemplates created for translation.",
            registry=self.registry,
        )
        self.policy_info = Gauge(
            "dra_webhook_policy_info",
            "1 for the policy in force: where it was read (source) and the first 12 hex digits "
            "of the sha256 of its text (sha256), to compare with the chart's ConfigMap.",
            ("source", "sha256"),
            registry=self.registry,
            multiprocess_mode="livemax",
        )
        self.cluster_synced = Gauge(
            "dra_webhook_cluster_synced",
            "1 when the cluster view of a kind has completed its list, else 0 "
            "(with several workers: 1 only when every live worker has it).",
            ("kind",),
            registry=self.registry,
            multiprocess_mode="livemin",
        )

        self.cluster_stale = Gauge(
            "dra_webhook_cluster_stale",
            "1 while the view of a kind is stale (not listed yet, or out of sync longer than the "
            "bound): checks reading it answer per failure.staleView.",
            ("kind",),
            registry=self.registry,
            multiprocess_mode="livemax",
        )
        self.cluster_objects = Gauge(
            "dra_webhook_cluster_objects",
            "Objects of each kind held in the cluster view.",
            ("kind",),
            registry=self.registry,
            multiprocess_mode="livemax",
        )
        self.ready = Gauge(
            "dra_webhook_ready",
            "1 when /readyz answers 200 (every kind of the cluster view listed, none stale), "
            "else 0 (with several workers: 1 only when every live worker is).",
            registry=self.registry,
            multiprocess_mode="livemin",
        )
        self._collectors: list[Collector] = []
        self._watch(CacheCollector())
        # The labelled children of the per-review metrics, by their raw label values: `labels()`
        # validates and looks them up on every call (~1 µs each), on every review. The label
        # sets are closed, so these stay small.
        self._review_children: dict[tuple[str, str, str], Histogram] = {}
        self._denial_children: dict[tuple[str, str], Counter] = {}
        self._translation_children: dict[str, Counter] = {}
        """By rule; emptied when the rules change (`know_sharing_rules`)."""

    def observe_review(self, endpoint: str, kind: str, decision: str, seconds: float) -> None:
        """One answered review in the latency histogram (every label from a closed set)."""
        key = (endpoint, kind, decision)
        child = self._review_children.get(key)
        if child is None:
            child = self.admission_seconds.labels(
                closed(endpoint, ENDPOINTS), closed(kind, KINDS), closed(decision, DECISIONS)
            )
            if len(self._review_children) < _CHILDREN_LIMIT:
                self._review_children[key] = child
        child.observe(seconds)

    def count_denial(self, endpoint: str, reason: str) -> None:
        key = (endpoint, reason)
        child = self._denial_children.get(key)
        if child is None:
            child = self.denials.labels(closed(endpoint, ENDPOINTS), closed(reason, REASONS))
            if len(self._denial_children) < _CHILDREN_LIMIT:
                self._denial_children[key] = child
        child.inc()

    def know_exceptions(self, ends: Mapping[str, dt.datetime]) -> None:
        """The policy's exceptions by name, with the instant each stops applying: the closed
        set of the `exception` label, and dra_webhook_exception_end_timestamp_seconds."""
        self._exception_names = frozenset(ends)
        self.exception_end.clear()
        for name, end in ends.items():
            self.exception_end.labels(name).set(end.timestamp())

    def know_sharing_rules(self, names: frozenset[str]) -> None:
        """The policy's sharing rules: with the fixed rules, the closed set of `rule`."""
        self._translation_rules = frozenset(TRANSLATION_RULES) | {f"sharing:{n}" for n in names}
        self._translation_children = {}

    def count_translation(self, rule: str) -> None:
        child = self._translation_children.get(rule)
        if child is None:
            child = self.translations.labels(closed(rule, self._translation_rules))
            if len(self._translation_children) < _CHILDREN_LIMIT:
                self._translation_children[rule] = child
        child.inc()

    def count_exception(self, check: str, exception: str) -> None:
        self.exceptions.labels(
            closed(check, CHECKS), closed(exception, self._exception_names)
        ).inc()

    def count_check_error(self, endpoint: str, check: str) -> None:
        self.check_errors.labels(closed(endpoint, ENDPOINTS), closed(check, CHECKS)).inc()

    def watch_source(self, stats: SourceStats) -> None:
        """Expose a live source's counters, read from `stats` at every scrape."""
        self._watch(SourceCollector(stats))
        self._watch(_NodeLabelsCollector(stats))

    def watch_cel(self, cache: CompileCache, index: DeviceIndex) -> None:
        """Expose the CEL compile cache and device-match memo counters, read at every scrape."""
        self._watch(CelCollector(cache, index))

    def watch_transport(self, stats: TransportCounters) -> None:
        """Expose the connection count and load refusals, read from `stats` at every scrape."""
        self._watch(TransportCollector(stats))

    def _watch(self, collector: Collector) -> None:
        self._collectors.append(collector)
        self.registry.register(collector)

    def watch_migration(self, progress: MigrationCounts) -> None:
        """Expose the legacy workloads the PolicyReports count, read at every scrape."""
        collector = MigrationCollector(progress)
        self._collectors.append(collector)
        self.registry.register(collector)

    def watch_certificate(self, cert_file: Path) -> None:
        """Expose the serving certificate's notAfter, read from `cert_file` at scrape time."""
        collector = CertificateCollector(cert_file)
        self._collectors.append(collector)
        self.registry.register(collector)

    def observe_view(self, view: ClusterView) -> None:
        """Copy the cluster view's sync state and sizes into the gauges."""
        synced, stale = view.synced_kinds(), view.stale_kinds
        self.ready.set(1 if len(synced) == len(Kind) and not stale else 0)
        for kind in Kind:
            self.cluster_synced.labels(kind.value).set(1 if kind in synced else 0)
            self.cluster_stale.labels(kind.value).set(1 if kind in stale else 0)
            self.cluster_objects.labels(kind.value).set(len(view.objects(kind)))

    def render(self) -> bytes:
        """The exposition text: this process's registry, or every worker's files merged."""
        if self.multiprocess_dir is None:
            return generate_latest(self.registry)
        merged = CollectorRegistry()
        MultiProcessCollector(merged, path=str(self.multiprocess_dir))  # type: ignore[no-untyped-call]
        for collector in self._collectors:
            merged.register(collector)
        return generate_latest(merged)

    def close(self) -> None:
        """On worker exit: drop this process's live-gauge files so it stops counting as live."""
        if self.multiprocess_dir is not None:
            mark_process_dead(os.getpid(), str(self.multiprocess_dir))  # type: ignore[no-untyped-call]


class _NodeLabelsCollector(Collector):
    """Whether the live source reads the Nodes' labels (docs/rbac.md: `nodes` list, watch)."""

    def __init__(self, stats: SourceStats) -> None:
        self._stats = stats

    def collect(self) -> Iterator[Metric]:
        nodes = self._stats.kinds.get(Kind.NODE)
        yield GaugeMetricFamily(
            "dra_webhook_node_labels_available",
            "1 when the Nodes' labels are read (listed and watched as metadata) and slices' "
            "nodeSelectors are evaluated against them; 0 when listing nodes is forbidden (the "
            "selectors are then taken to match) or has not succeeded yet.",
            value=1 if nodes is not None and nodes.listed and not nodes.forbidden else 0,
        )
