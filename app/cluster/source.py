"""The seam between the cluster view and where its objects come from.

A source fills a ClusterView and is the only writer to the Kubernetes API: it creates the
ResourceClaimTemplates that translation needs. Two implementations: `StaticSource` (a YAML file,
the embedded default for development and tests) and the live source (list+watch on an API server).
"""

from __future__ import annotations

from typing import Any, Protocol

from app.cluster.view import ClusterView


class ClusterSource(Protocol):
    """Fills `view` and keeps it current until stopped."""

    view: ClusterView

    async def start(self) -> None:
        """Begin filling the view; returns once started (not necessarily synced)."""

    async def stop(self) -> None:
        """Stop watching; idempotent."""

    async def lookup_namespace(self, name: str) -> dict[str, Any] | None:
        """Read one namespace the view does not hold (a cache miss) and add it to the view.

        None when it does not exist or cannot be read now; never raises.
        """

    async def create_claim_template(self, template: dict[str, Any]) -> None:
        """Create a ResourceClaimTemplate; AlreadyExists is success. Raises TemplateCreateError.

        On success the template is in the view before this returns.
        """

    async def touch_claim_template(self, namespace: str, name: str) -> bool:
        """Mark a template as relied on now, so that garbage collection keeps it; False when it
        no longer exists (the caller creates it again). Raises TemplateCreateError."""
