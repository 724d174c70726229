"""Choosing the cluster source from the settings."""

from __future__ import annotations

from app.cluster.source import ClusterSource
from app.cluster.static import StaticSource
from app.cluster.view import ClusterView
from app.config.settings import ClusterSource as SourceKind
from app.config.settings import Settings


def build_source(settings: Settings, view: ClusterView) -> ClusterSource:
    """The source the settings ask for, filling `view`.

    The live source's credentials are read here already (raising ConfigError), so that a bad
    kubeconfig fails `serve` before it binds its port; it connects when started.
    """
    if settings.cluster_source is SourceKind.STATIC:
        return StaticSource(view, settings.cluster_file)
    from app.cluster.api import check_config  # kubernetes.aio: only when used
    from app.cluster.live import LiveSource

    check_config(settings)
    return LiveSource(view, settings)
