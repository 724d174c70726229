"""What the app serves beside the reviews: the readiness verdict (`/readyz`, and the health
port's), the managed serving certificates while the lifespan runs, and the cluster view's
gauges refreshed for /metrics."""

from __future__ import annotations

import asyncio
from contextlib import suppress

import orjson

from app.cluster.api import Api, connect
from app.cluster.certificates import ManagedCertificates
from app.cluster.source import ClusterSource
from app.cluster.view import ClusterView, Kind
from app.config import Settings
from app.metrics import Metrics


class Certificates:
    """The managed certificates (settings.managed_certs_secret) while the lifespan runs: their
    own API client, one task (app.cluster.certificates), stopped with the Lease given up."""

    def __init__(self, settings: Settings, view: ClusterView) -> None:
        self.settings = settings
        self.view = view
        self.manager: ManagedCertificates | None = None
        self._task: asyncio.Task[None] | None = None

    def ready(self) -> tuple[bool, bytes]:
        """The readiness verdict (`readiness`), with the managed certificate's."""
        return readiness(self.view, self.manager)

    async def start(self) -> None:
        if not self.settings.managed_certs_secret:
            return
        self.manager = ManagedCertificates(self.settings, Api(await connect(self.settings)))
        self._task = asyncio.create_task(self.manager.run(), name="managed certificates")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with suppress(asyncio.CancelledError):
                await self._task
        if self.manager is not None:
            await self.manager.api.close()


def readiness(
    view: ClusterView, certificates: ManagedCertificates | None = None
) -> tuple[bool, bytes]:
    """Whether the view can be trusted (every kind listed, none stale) and the managed serving
    certificate, if any, is not about to expire; and why not: the verdict of `/readyz` here and
    on the health port (app.server.health)."""
    stale = view.stale_kinds
    serving, why = certificates.ready() if certificates is not None else (True, "")
    if view.synced and not stale and serving:
        return True, b'{"ready":true}'
    missing = sorted(k.value for k in Kind if k not in view.synced_kinds())
    answer: dict[str, object] = {"ready": False, "unsynced": missing, "stale": sorted(stale)}
    if not serving:
        answer["certificate"] = why
    return False, orjson.dumps(answer)


VIEW_GAUGE_INTERVAL_SECONDS = 5.0


async def refresh_view_gauges(metrics: Metrics, source: ClusterSource) -> None:
    while True:
        await asyncio.sleep(VIEW_GAUGE_INTERVAL_SECONDS)
        metrics.observe_view(source.view)
