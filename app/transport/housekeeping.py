"""What runs beside the admissions while the app's lifespan does, and the readiness verdict
that both the probes on the health port and `/readyz` give."""

from __future__ import annotations

import asyncio
from contextlib import suppress

import orjson

from app.cluster.source import ClusterSource
from app.cluster.view import ClusterView, Kind
from app.config import Settings
from app.transport.health import HealthServer, Heartbeat
from app.transport.limits import TransportStats
from app.transport.memory import Trimmer


class Housekeeping:
    """What runs beside the admissions while the lifespan does: the loop's heartbeat, the health
    listener (app.transport.health) and the memory trimmer (app.transport.memory)."""

    def __init__(
        self,
        settings: Settings,
        stats: TransportStats,
        source: ClusterSource,
        health_listener: bool,
    ) -> None:
        self.heartbeat = Heartbeat()
        self.health = (
            HealthServer(
                settings.host,
                settings.health_port,
                ready=lambda: readiness(source.view),
                heartbeat=self.heartbeat,
                stall_after=settings.health_stall_seconds,
            )
            if health_listener and settings.health_port
            else None
        )
        self.trimmer = Trimmer(lambda: (stats.closed, stats.released))
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.heartbeat.start(asyncio.get_running_loop())
        if self.health is not None:
            self.health.start()
        self._task = asyncio.create_task(self.trimmer.run(), name="memory trimmer")

    async def stop(self) -> None:
        self.heartbeat.stop()
        if self._task is not None:
            self._task.cancel()
            with suppress(asyncio.CancelledError):
                await self._task
        if self.health is not None:
            self.health.stop()


def readiness(view: ClusterView) -> tuple[bool, bytes]:
    """Whether the view can be trusted (every kind listed, none stale), and why not."""
    stale = view.stale_kinds
    if view.synced and not stale:
        return True, b'{"ready":true}'
    missing = sorted(k.value for k in Kind if k not in view.synced_kinds())
    return False, orjson.dumps({"ready": False, "unsynced": missing, "stale": sorted(stale)})
