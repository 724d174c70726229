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
