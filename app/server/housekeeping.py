"""What runs beside the admissions while the app's lifespan does."""

from __future__ import annotations

import asyncio
from contextlib import suppress

from app.config import Settings
from app.server.health import HealthServer, Heartbeat, Readiness
from app.server.limits import TransportStats
from app.server.memory import Trimmer


class Housekeeping:
    """What runs beside the admissions while the lifespan does: the loop's heartbeat, the health
    listener (app.server.health) and the memory trimmer (app.server.memory).

    `ready` is the readiness verdict the app's `/readyz` gives too (read on the health thread);
    `stats` the transport's counters the trimmer watches.
    """

    def __init__(
        self,
        settings: Settings,
        stats: TransportStats,
        ready: Readiness,
        health_listener: bool,
    ) -> None:
        self.heartbeat = Heartbeat()
        self.health = (
            HealthServer(
                settings.host,
                settings.health_port,
                ready=ready,
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
