"""The cluster view: what policies know about the cluster, and the sources that fill it."""

from app.cluster.view import ClusterView, Kind

__all__ = ["ClusterView", "Kind"]
