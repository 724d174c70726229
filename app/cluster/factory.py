"""Choosing the cluster source from the settings."""

from __future__ import annotations

from app.cluster.source import ClusterSource
from app.cluster.static import StaticSource
from app.cluster.view import ClusterView
from app.config.settings import ClusterSource as SourceKind
from app.config.settings import Settings
from app.errors import ConfigError


def build_source(settings: Settings, view: ClusterView) -> ClusterSource:
    """The source the settings ask for, filling `view`."""
    if settings.cluster_source is SourceKind.STATIC:
        return StaticSource(view, settings.cluster_file)
    raise ConfigError(
        f"cluster source {settings.cluster_source.value!r} (--kubeconfig / --in-cluster) is not "
        "available in this version: use --cluster-file with a YAML dump of the cluster"
    )
