"""Fixtures for the live source: the fake API server, settings for it, a running source
(builders in tests/cluster/helpers.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from app.cluster.live import LiveSource
from app.cluster.view import ClusterView
from app.config import Settings
from tests.cluster.fake_apiserver import FakeApiServer
from tests.cluster.helpers import eventually, live_settings, seed


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def apiserver() -> AsyncIterator[FakeApiServer]:
    server = FakeApiServer()
    seed(server)
    await server.start()
    yield server
    await server.stop()


@pytest.fixture
def settings(apiserver: FakeApiServer, tmp_path: Path) -> Settings:
    return live_settings(apiserver.write_kubeconfig(tmp_path / "kubeconfig"))


@pytest.fixture
async def live(settings: Settings) -> AsyncIterator[LiveSource]:
    """A started live source over the fake API server, synced."""
    source = LiveSource(ClusterView(), settings)
    await source.start()
    try:
        await eventually(lambda: not source.view.stale_kinds, "initial sync")
        yield source
    finally:
        await source.stop()
