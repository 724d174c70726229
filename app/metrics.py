"""Prometheus metrics, held by one object per app (no module-level registry state)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

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

    def render(self) -> bytes:
        return generate_latest(self.registry)
