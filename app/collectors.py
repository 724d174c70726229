"""Collectors read at scrape time for the chart's alerts and the migration gauge.

- `CertificateCollector`: the serving certificate's notAfter (DraWebhookCertificateExpiring);
- `MigrationCollector`: `dra_webhook_legacy_workloads{workload_namespace, mode}` from the
  PolicyReports that `dra-webhook report --policy-reports` writes (app.cluster.progress reads
  them).

`app.metrics.Metrics` registers them (`watch_certificate`, `watch_migration`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Protocol

from cryptography import x509
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector


class MigrationCounts(Protocol):
    """What the PolicyReports say (`app.cluster.progress.MigrationProgress`)."""

    @property
    def counts(self) -> Mapping[tuple[str, str], int]: ...

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
