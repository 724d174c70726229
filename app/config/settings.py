"""Process settings: where to listen, which certificates, which cluster source."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from app.bounded import DEFAULT_MAX_BYTES


class ClusterSource(StrEnum):
    """Where the cluster view comes from."""

    STATIC = "static"
    KUBECONFIG = "kubeconfig"
    IN_CLUSTER = "in-cluster"


class Settings(BaseSettings):
    """Settings of one server process, read from `DRA_WEBHOOK_*` environment variables.

    The CLI turns its flags into these variables, so every uvicorn worker process builds the same
    object from its environment.
    """

    model_config = SettingsConfigDict(env_prefix="DRA_WEBHOOK_", frozen=True, extra="ignore")

    host: str = "0.0.0.0"
    port: int = Field(default=8443, ge=0, le=65535)
    cert_dir: Path = Path("certs")
    policy_file: Path | None = None
    """The policy YAML; None means the embedded default policy."""
    cluster_source: ClusterSource = ClusterSource.STATIC
    cluster_file: Path | None = None
    """A YAML dump of cluster objects for the static source; None: the embedded demo cluster."""
    kubeconfig: Path | None = None
    workers: int = Field(default=1, ge=1, le=64)
    namespace: str = "dra-webhook"
    """The namespace the webhook itself runs in: always exempt from its own checks."""
    max_body_bytes: int = Field(default=8 * 1024 * 1024, ge=1024)
    """Largest AdmissionReview accepted: objects are <= ~1.5 MiB in etcd, an UPDATE carries two."""
    log_level: str = "INFO"
    denial_log_seconds: float = Field(default=0.0, ge=0)
    """0 (the default): a line per denial, with its uid, so that every review answered can be
    traced in the logs. Above 0, for clusters whose denial storms cost more than that is worth:
    denials of one namespace by the same checks are logged once per this many seconds, the next
    line saying how many were held back (`repeated`, without their uids); every one is still
    counted in dra_webhook_denials_total and answered in full (app.transport.denials)."""

    health_port: int = Field(default=8081, ge=0, le=65535)
    """Plain-HTTP port of the probes (/healthz, /readyz), served on a thread of its own so that
    they answer fast however busy the webhook port is; 0: no health listener."""
    health_stall_seconds: float = Field(default=60.0, gt=0)
    """/healthz on the health port fails once the admission event loop has not run for this
    long (wedged, not busy)."""

    # Transport limits (docs/security.md, "Transport limits"): what one client with a socket to
    # the port can hold. Over a limit the server answers at once (429, 431 or 408), never queues.
    max_connections: int = Field(default=1024, ge=1)
    """Open connections per worker; one more is answered 429 and closed at once (~50 KB each)."""
    max_header_bytes: int = Field(default=16 * 1024, ge=1024)
    """Bytes of a request line and headers; over it: 431. httptools itself has no limit."""
    header_timeout_seconds: float = Field(default=5.0, gt=0)
    """From the first byte of a request to the end of its headers; then 408 and closed."""
    body_timeout_seconds: float = Field(default=10.0, gt=0)
    """From the end of the headers to the end of the body; then 408 and closed."""
    idle_timeout_seconds: int = Field(default=120, ge=1)
    """A connection idle between requests is closed after this (uvicorn's keep-alive timeout).
    Longer than the API server's client keeps an idle connection (Go's http.Transport, 90 s):
    the client then closes first, and never sends a review on a connection the webhook is
    closing (a POST is not sent again: the create it admits would fail). A connection that
    has sent no request yet must start one within `header_timeout_seconds`."""
    max_buffered_bytes: int = Field(default=64 * 1024 * 1024, ge=1024)
    """Request body bytes held at once by one worker, over every request; a review that would go
    over is answered 429 before its body is read. At least `max_body_bytes`."""
    max_queue_seconds: float = Field(default=2.0, gt=0)
    """A review that waited longer than this between its headers arriving and its turn (or past
    the `?timeout=` the API server sends) is answered 429 without being decoded."""
    shutdown_grace_seconds: float = Field(default=20.0, ge=0)
    cert_reload_interval_seconds: float = Field(default=2.0, gt=0)
    metrics_dir: Path | None = None
    """With workers > 1: the folder for each worker's metric files, emptied at start (None: a
    fresh temporary folder). Unused with one worker."""

    # The live cluster source (--kubeconfig / --in-cluster).
    stale_after_seconds: float = Field(default=60.0, gt=0)
    """A kind out of sync with the API server for longer than this is stale: /readyz turns false
    and the checks that read it answer per the policy's failure.staleView."""
    watch_timeout_seconds: float = Field(default=300.0, gt=0)
    """Each watch asks the API server to end it after a random time in [t, 2t], as client-go
    does, so that replicas do not reconnect in lockstep."""
    watch_idle_seconds: float = Field(default=150.0, gt=0)
    """A watch silent this long (kube-apiserver sends a bookmark about every minute) is taken
    for a connection dropped without notice (an idle-timeout in a load balancer) and reopened."""
    backoff_initial_seconds: float = Field(default=0.5, gt=0)
    """First delay before retrying a failed list or watch; doubles per failure, with jitter."""
    backoff_max_seconds: float = Field(default=30.0, gt=0)
    list_page_size: int = Field(default=500, ge=1)
    """Objects per list page: bounds the memory of one response on a large cluster."""
    list_timeout_seconds: float = Field(default=60.0, gt=0)
    """Timeout of one list page (up to `list_page_size` objects)."""
    template_gc_grace_seconds: float = Field(default=3600.0, ge=0)
    """Translation's templates that no ResourceClaim was made from, and no admission touched, for
    this long are deleted (app.cluster.template_gc); 0 keeps them forever."""
    template_gc_interval_seconds: float = Field(default=60.0, gt=0)
    """Seconds between two garbage-collection passes over the view's templates."""
    api_timeout_seconds: float = Field(default=5.0, gt=0)
    """Timeout of a template create or read. The create runs while the API server waits for the
    webhook (its timeoutSeconds, 10 s by default): keep it below that."""
    namespace_lookups_per_second: float = Field(default=5.0, gt=0)
    """On-miss namespace reads (a namespace the watch has not delivered yet) allowed per second,
    after a burst of `namespace_lookup_burst`: reviews naming a flood of unknown namespaces cost
    a bounded number of API calls; one over the rate is answered per failure.unknownNamespace."""
    namespace_lookup_burst: int = Field(default=20, ge=1)
    namespace_not_found_seconds: float = Field(default=10.0, ge=0)
    """A namespace the API server said does not exist is not asked for again this long (the
    watch still brings it as soon as it is created)."""
    namespace_not_found_entries: int = Field(default=4096, ge=1)
    """How many such answers are remembered (least recently asked forgotten first)."""
    cache_max_bytes: int = Field(default=DEFAULT_MAX_BYTES, ge=1024 * 1024)
    """The one byte budget of everything reviews can make the process keep: all caches
    together (compiled programs, match memos, verdicts, groupings, offers, ...), split between
    them by fixed shares (app.bounded.SHARES), least recently used evicted first. The cluster
    view's own data is apart, sized by the cluster (charts/dra-webhook/README.md, "Memory").
    Each cache's share, entries and bytes are in /metrics (dra_webhook_cache_*)."""
    migration_gauge_interval_seconds: float = Field(default=0.0, ge=0)
    """With a live view: every this many seconds, read the PolicyReports `dra-webhook report
    --policy-reports` writes into `dra_webhook_legacy_workloads` (app.cluster.progress); 0: off."""

    # Certificates the webhook makes and rotates itself (the chart's certificates.mode: managed;
    # app.cluster.certificates, docs/security.md "Certificates").
    managed_certs_secret: str = ""
    """The Secret, in `namespace`, that holds the CA and serving pair the webhook makes, rotates
    and serves; empty: the pair in `cert_dir` comes from elsewhere (cert-manager, a mounted
    Secret, development certificates). Needs the live cluster source."""
    managed_certs_webhook: str = ""
    """The name of the MutatingWebhookConfiguration and ValidatingWebhookConfiguration whose
    caBundle the leader keeps current (either may be absent)."""
    managed_certs_lease: str = ""
    """The coordination.k8s.io Lease, in `namespace`, that elects the one replica that rotates;
    empty: the Secret's name."""
    managed_certs_dns_names: str = ""
    """The serving certificate's DNS names, comma-separated (the Service's); localhost and
    127.0.0.1 are always added."""
    managed_certs_lifetime_seconds: float = Field(default=90 * 24 * 3600.0, ge=10)
    """Validity of a CA and serving pair; renewed when a third of it is left, and /readyz turns
    false when a sixth is left and no renewal has been loaded."""
    managed_certs_sync_seconds: float = Field(default=10.0, gt=0)
    """How often every replica reads the Secret, and the leader renews its Lease and checks the
    caBundles."""
    managed_certs_lease_seconds: float = Field(default=15.0, gt=0)
    """A Lease not renewed for this long is taken over by another replica."""
    managed_certs_startup_seconds: float = Field(default=120.0, gt=0)
    """How long `serve` waits, before listening, for a valid pair in the Secret (its own, as
    leader, or the leader's); then it exits saying why."""

    @model_validator(mode="after")
    def _budget_holds_one_review(self) -> Settings:
        if self.max_buffered_bytes < self.max_body_bytes:
            raise ValueError(
                f"max_buffered_bytes ({self.max_buffered_bytes}) must be at least max_body_bytes "
                f"({self.max_body_bytes}): the largest review could never be read"
            )
        return self
