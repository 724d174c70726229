"""Process settings: where to listen, which certificates, which cluster source."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


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
