"""Prometheus metrics, held by one object per app (no module-level registry state)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from app.cluster.stats import SourceStats

LATENCY_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1.0)


class Metrics:
    """The webhook's metrics, registered in their own registry."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
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
            "1 when the cluster view of a kind has completed its list, else 0.",
            ("kind",),
            registry=self.registry,
        )

        self.cluster_stale = Gauge(
            "dra_webhook_cluster_stale",
            "1 while the view of a kind is stale (not listed yet, or out of sync longer than the "
            "bound): checks reading it answer per failure.staleView.",
            ("kind",),
            registry=self.registry,
        )
        self.cluster_objects = Gauge(
            "dra_webhook_cluster_objects",
            "Objects of each kind held in the cluster view.",
            ("kind",),
            registry=self.registry,
        )

    def watch_source(self, stats: SourceStats) -> None:
        """Expose a live source's counters, read from `stats` at every scrape."""
        self.registry.register(_SourceCollector(stats))

    def render(self) -> bytes:
        return generate_latest(self.registry)


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
                events.add_metric((kind.value, event_type), count)
        templates = CounterMetricFamily(
            "dra_webhook_template_creates",
            "ResourceClaimTemplate create requests, by result (created, exists, error).",
            labels=("result",),
        )
        templates.add_metric(("created",), self._stats.templates_created)
        templates.add_metric(("exists",), self._stats.templates_existing)
        templates.add_metric(("error",), self._stats.template_errors)
        yield from (in_sync, lists, relists, errors, idle, events, templates)
