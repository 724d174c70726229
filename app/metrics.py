"""Prometheus metrics, held by one object per app (no module-level registry state).

With one worker the metrics live in the app's own registry. With `--workers > 1` every worker is
a separate process, so each keeps its values in files under a shared folder (prometheus-client's
multiprocess mode) and `/metrics`, whichever worker serves it, merges the files of all workers:

- the folder is named by `PROMETHEUS_MULTIPROC_DIR`, which prometheus-client reads once, when it
  is first imported; `app.server.run.serve` sets it before the workers are spawned;
- the folder is emptied at start (`prepare_multiprocess_dir`): files left by an earlier run would
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
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client import values as prometheus_values
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead
from prometheus_client.registry import Collector

from app.bounded import CacheName, budget, cache_stats
from app.cel.cache import CompileCache
from app.cluster.stats import SourceStats
from app.cluster.view import ClusterView, Kind
from app.collectors import CertificateCollector, MigrationCollector, MigrationCounts
from app.devices.index import DeviceIndex
from app.errors import ConfigError
from app.pipeline import (
    INTERNAL_ERROR,
    REGISTRATIONS,
    Endpoint,
)

OTHER = "other"
"""The label value of anything outside a label's closed set."""
ENDPOINTS = frozenset(e.value for e in Endpoint)
KINDS = frozenset(kind for reg in REGISTRATIONS for _, kind in reg.kinds)
"""The kinds the webhook is registered for (Pods, workloads, claims, DeviceClasses, Namespaces:
admin-rule kinds are among them); any other kind a review names is `other`."""
DECISIONS = frozenset({"allowed", "patched", "denied"})
TRANSLATION_RULES = ("mapping", "deviceclass", "implicit")
"""The `rule` label of a translation besides `sharing:<rule>`."""
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


def closed(value: str, allowed: frozenset[str]) -> str:
    """`value` if it is in `allowed`, else `other`: label values never come from a review."""
    return value if value in allowed else OTHER


_CHILDREN_LIMIT = 1024
"""Raw label values remembered per metric (a kind name comes from the review: bounded)."""

LATENCY_BUCKETS = (
    *(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1.0),
    *(2.5, 5.0, 10.0, 30.0),
)
"""Sub-millisecond up to 1 s where reviews are answered; then up to the API server's largest
timeoutSeconds (30), so a p99 near half a webhook's timeout (the DraWebhookSlowAdmissions alert)
falls between two finite buckets instead of in +Inf."""

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
"""The variable prometheus-client reads at import to switch to per-process files."""


def prepare_multiprocess_dir(path: Path | None) -> Path:
    """The folder for per-worker metric files, created if needed and emptied of old ones.

    None makes a fresh temporary folder. Only `*.db` files (what prometheus-client writes) are
    removed, so a folder given by mistake loses nothing else.
    """
    try:
        if path is None:
            return Path(tempfile.mkdtemp(prefix="dra-webhook-metrics-"))
        path.mkdir(parents=True, exist_ok=True)
        for stale in path.glob("*.db"):
            stale.unlink()
    except OSError as exc:
        where = path if path is not None else Path(tempfile.gettempdir())
        raise ConfigError(
            f"cannot write worker metric files in {where.absolute()}: {exc.strerror}; with "
            "--workers > 1, point --metrics-dir (DRA_WEBHOOK_METRICS_DIR) or TMPDIR at a "
            "writable folder (the chart mounts an emptyDir at /tmp)"
        ) from None
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
            "extendedResourceName), implicit (deviceclass.resource.kubernetes.io/<class>), or "
            "sharing:<rule> (a GPU-sharing rule).",
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
        self._watch(_CacheCollector())
        # The labelled children of the per-review metrics, by their raw label values: `labels()`
        # validates and looks them up on every call (~1 µs each), on every review. The label
        # sets are closed, so these stay small.
        self._review_children: dict[tuple[str, str, str], Histogram] = {}
        self._denial_children: dict[tuple[str, str], Counter] = {}

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

    def count_translation(self, rule: str) -> None:
        self.translations.labels(closed(rule, self._translation_rules)).inc()

    def count_exception(self, check: str, exception: str) -> None:
        self.exceptions.labels(
            closed(check, CHECKS), closed(exception, self._exception_names)
        ).inc()

    def count_check_error(self, endpoint: str, check: str) -> None:
        self.check_errors.labels(closed(endpoint, ENDPOINTS), closed(check, CHECKS)).inc()

    def watch_source(self, stats: SourceStats) -> None:
        """Expose a live source's counters, read from `stats` at every scrape."""
        self._watch(_SourceCollector(stats))

    def watch_cel(self, cache: CompileCache, index: DeviceIndex) -> None:
        """Expose the CEL compile cache and device-match memo counters, read at every scrape."""
        self._watch(_CelCollector(cache, index))

    def watch_transport(self, stats: TransportCounters) -> None:
        """Expose the connection count and load refusals, read from `stats` at every scrape."""
        self._watch(_TransportCollector(stats))

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


class TransportCounters(Protocol):
    """What the transport counts (`app.server.limits.TransportStats`)."""

    @property
    def connections(self) -> int: ...

    @property
    def refused(self) -> Mapping[str, int]: ...


class _TransportCollector(Collector):
    """Open connections and refusals for load, this worker's (docs/security.md)."""

    def __init__(self, stats: TransportCounters) -> None:
        self._stats = stats

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily(
            "dra_webhook_open_connections",
            "Connections open on the webhook port (this worker).",
            value=self._stats.connections,
        )
        refused = CounterMetricFamily(
            "dra_webhook_refused",
            "Requests and connections refused for load or limits, by reason (connections, "
            "header_bytes, header_timeout, body_timeout, buffered_bytes, queue).",
            labels=("reason",),
        )
        for reason, count in sorted(self._stats.refused.items()):
            refused.add_metric((reason,), count)
        yield refused


class _CelCollector(Collector):
    """The CEL runtime's plain counters as Prometheus families (this worker's)."""

    def __init__(self, cache: CompileCache, index: DeviceIndex) -> None:
        self._cache = cache
        self._index = index

    def collect(self) -> Iterator[Metric]:
        stats = self._cache.stats()
        lookups = CounterMetricFamily(
            "dra_webhook_cel_cache_lookups",
            "Compiled-expression cache lookups, by result (hit or miss: a miss compiles once).",
            labels=("result",),
        )
        lookups.add_metric(("hit",), stats.hits)
        lookups.add_metric(("miss",), stats.misses)
        yield lookups
        yield CounterMetricFamily(
            "dra_webhook_cel_cache_evictions",
            "Entries evicted from the bounded LRU.",
            value=stats.evictions,
        )
        yield CounterMetricFamily(
            "dra_webhook_cel_compile_errors",
            "Expressions that did not compile (cached too).",
            value=stats.compile_errors,
        )
        yield GaugeMetricFamily(
            "dra_webhook_cel_cache_entries", "Compiled expressions held.", value=stats.size
        )
        memo = CounterMetricFamily(
            "dra_webhook_cel_device_match_memo",
            "Which-devices-match lookups per slice generation, by result (a miss evaluates).",
            labels=("result",),
        )
        memo.add_metric(("hit",), self._index.memo_hits)
        memo.add_metric(("miss",), self._index.memo_misses)
        yield memo


class _CacheCollector(Collector):
    """Every bounded cache of this process (`app.bounded`), one family per counter, labelled
    by cache name from the closed set `CacheName` (every name is reported, 0 when unused)."""

    def collect(self) -> Iterator[Metric]:
        stats = cache_stats()
        families = (
            (CounterMetricFamily, "hits", "Lookups answered from the cache.", "hits"),
            (CounterMetricFamily, "misses", "Lookups the cache could not answer.", "misses"),
            (
                CounterMetricFamily,
                "evictions",
                "Entries dropped to stay within the entry or byte bound (least recently used).",
                "evictions",
            ),
            (GaugeMetricFamily, "entries", "Entries held.", "entries"),
            (
                GaugeMetricFamily,
                "bytes",
                "Bytes held (keys and values), within the cache's share of the budget.",
                "bytes",
            ),
        )
        for family_type, suffix, text, field in families:
            family = family_type(f"dra_webhook_cache_{suffix}", text, labels=("cache",))
            for name in CacheName:
                found = stats.get(name)
                family.add_metric((name.value,), getattr(found, field) if found else 0)
            yield family
        shares = GaugeMetricFamily(
            "dra_webhook_cache_budget_bytes",
            "Each cache's share of the process's one cache budget (DRA_WEBHOOK_CACHE_MAX_BYTES); "
            "the shares sum to it.",
            labels=("cache",),
        )
        for name, limit in budget().items():
            shares.add_metric((name.value,), limit)
        yield shares


WATCH_EVENTS = frozenset({"ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"})


class _SourceCollector(Collector):
    """Turns the live source's plain counters into Prometheus families when scraped."""

    def __init__(self, stats: SourceStats) -> None:
        self._stats = stats

    def collect(self) -> Iterator[Metric]:
        kinds = self._stats.kinds
        in_sync = GaugeMetricFamily(
            "dra_webhook_cluster_watch_in_sync",
            "1 when the last list or watch request of a kind succeeded, 0 while retrying.",
            labels=("kind",),
        )
        lists = CounterMetricFamily(
            "dra_webhook_cluster_lists", "Completed lists, by kind.", labels=("kind",)
        )
        relists = CounterMetricFamily(
            "dra_webhook_cluster_relists",
            "Lists forced by 410 Gone (watch history compacted), by kind.",
            labels=("kind",),
        )
        errors = CounterMetricFamily(
            "dra_webhook_cluster_watch_errors",
            "Failed list/watch requests, broken streams and unreadable objects, by kind.",
            labels=("kind",),
        )
        idle = CounterMetricFamily(
            "dra_webhook_cluster_watch_idle_reconnects",
            "Watches reopened after a silence longer than the idle bound, by kind.",
            labels=("kind",),
        )
        events = CounterMetricFamily(
            "dra_webhook_cluster_watch_events",
            "Watch events received, by kind and type.",
            labels=("kind", "type"),
        )
        for kind, stats in kinds.items():
            in_sync.add_metric((kind.value,), 1 if stats.in_sync else 0)
            lists.add_metric((kind.value,), stats.lists)
            relists.add_metric((kind.value,), stats.relists)
            errors.add_metric((kind.value,), stats.errors)
            idle.add_metric((kind.value,), stats.idle_reconnects)
            for event_type, count in sorted(stats.events.items()):
                events.add_metric((kind.value, closed(event_type, WATCH_EVENTS)), count)
        templates = CounterMetricFamily(
            "dra_webhook_template_creates",
            "ResourceClaimTemplate create requests, by result (created, exists, error).",
            labels=("result",),
        )
        templates.add_metric(("created",), self._stats.templates_created)
        templates.add_metric(("exists",), self._stats.templates_existing)
        templates.add_metric(("error",), self._stats.template_errors)
        deletes = CounterMetricFamily(
            "dra_webhook_template_deletes",
            "Unused translation templates garbage-collected, by result (deleted; kept: changed "
            "since judged unused; error).",
            labels=("result",),
        )
        deletes.add_metric(("deleted",), self._stats.templates_deleted)
        deletes.add_metric(("kept",), self._stats.templates_kept)
        deletes.add_metric(("error",), self._stats.template_delete_errors)
        touches = CounterMetricFamily(
            "dra_webhook_template_touches",
            "Templates an admission relied on while no claim of theirs existed (marked used).",
            value=self._stats.templates_touched,
        )
        yield from (in_sync, lists, relists, errors, idle, events, templates, deletes, touches)
