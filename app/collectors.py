"""Collectors read at scrape time: plain counters kept elsewhere, turned into Prometheus families.

- `CertificateCollector`: the serving certificate's notAfter (DraWebhookCertificateExpiring);
- `MigrationCollector`: `dra_webhook_legacy_workloads{workload_namespace, mode}` from the
  PolicyReports that `dra-webhook report --policy-reports` writes (app.cluster.progress reads
  them);
- `TransportCollector`, `CelCollector`, `CacheCollector`, `SourceCollector`: the connection
  limits', the CEL compile cache's, the bounded caches' and the live cluster source's counters
  (this worker's).

`app.metrics.Metrics` registers them (its `watch_*` methods). Label values come from closed sets
(`closed`), never from a review.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Protocol

from cryptography import x509
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from app.bounded import CacheName, budget, cache_stats
from app.cel.cache import CompileCache
from app.cluster.stats import SourceStats
from app.devices.index import DeviceIndex

OTHER = "other"


def closed(value: str, allowed: frozenset[str]) -> str:
    """`value` if it is in `allowed`, else `other`: label values never come from a review."""
    return value if value in allowed else OTHER


class MigrationCounts(Protocol):
    """What the PolicyReports say (`app.cluster.progress.MigrationProgress`)."""

    @property
    def counts(self) -> Mapping[tuple[str, str], int]: ...

    @property
    def gpu_pods(self) -> Mapping[tuple[str, str], int]: ...

    @property
    def read_errors(self) -> int: ...

    @property
    def last_read(self) -> float | None: ...


MIGRATION_SERIES_LIMIT = 10_000
"""Namespaces shown at most: one series per namespace, a cluster-sized, not review-sized, set."""


class MigrationCollector(Collector):
    """dra_webhook_legacy_workloads and its read counters, from the PolicyReports."""

    def __init__(self, progress: MigrationCounts) -> None:
        self._progress = progress

    def collect(self) -> Iterator[Metric]:
        gauge = GaugeMetricFamily(
            "dra_webhook_legacy_workloads",
            "Workloads still asking for a legacy extended resource, by their namespace "
            "(workload_namespace) and its mode, as the last `dra-webhook report "
            "--policy-reports` found them (its PolicyReports).",
            labels=("workload_namespace", "mode"),
        )
        for (namespace, mode), count in sorted(self._progress.counts.items())[
            :MIGRATION_SERIES_LIMIT
        ]:
            gauge.add_metric((namespace, mode), count)
        yield gauge
        served = GaugeMetricFamily(
            "dra_webhook_gpu_pods",
            "Pods asking for GPUs, by their namespace (workload_namespace) and how they are "
            "served (source: device-plugin, dra-claim, dra-extended-resource through a "
            "DeviceClass's extendedResourceName, unscheduled), as the last `dra-webhook report "
            "--policy-reports` found them.",
            labels=("workload_namespace", "source"),
        )
        for (namespace, source), count in sorted(self._progress.gpu_pods.items())[
            :MIGRATION_SERIES_LIMIT
        ]:
            served.add_metric((namespace, source), count)
        yield served
        yield CounterMetricFamily(
            "dra_webhook_legacy_workloads_read_errors",
            "Failed reads of the PolicyReports behind dra_webhook_legacy_workloads.",
            value=self._progress.read_errors,
        )
        if self._progress.last_read is not None:
            yield GaugeMetricFamily(
                "dra_webhook_legacy_workloads_last_read_timestamp_seconds",
                "Unix time the PolicyReports were last read.",
                value=self._progress.last_read,
            )


class CertificateCollector(Collector):
    """The notAfter of the certificate on disk (the one the next TLS handshake serves: the
    server reloads rotated files, app.certs.CertReloader), parsed again only when the file
    changes. An unreadable file exports nothing: the certificate alert then cannot fire, but the
    server would not have started without one."""

    def __init__(self, cert_file: Path) -> None:
        self._file = cert_file
        self._stamp: tuple[int, int, int] | None = None
        self._not_after: float | None = None

    def _read(self) -> float | None:
        try:
            st = self._file.stat()
            stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
            if stamp != self._stamp:
                cert = x509.load_pem_x509_certificate(self._file.read_bytes())
                self._not_after = cert.not_valid_after_utc.timestamp()
                self._stamp = stamp
        except (OSError, ValueError):
            return None
        return self._not_after

    def collect(self) -> Iterator[Metric]:
        not_after = self._read()
        if not_after is not None:
            yield GaugeMetricFamily(
                "dra_webhook_serving_certificate_expiry_timestamp_seconds",
                "notAfter of the serving certificate, as a Unix time (the "
                "DraWebhookCertificateExpiring alert).",
                value=not_after,
            )


class TransportCounters(Protocol):
    """What the transport counts (`app.server.limits.TransportStats`)."""

    @property
    def connections(self) -> int: ...

    @property
    def refused(self) -> Mapping[str, int]: ...


class TransportCollector(Collector):
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


class CelCollector(Collector):
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


class CacheCollector(Collector):
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


class SourceCollector(Collector):
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
