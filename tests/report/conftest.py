"""Fixtures of the report tests: the fake cluster of tests/report/helpers.py, served."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.report.fake_cluster import FakeCluster
from tests.report.helpers import Running, seed


@pytest.fixture
def cluster() -> Iterator[FakeCluster]:
    with Running() as running:
        seed(running)
        yield running


@pytest.fixture
def kubeconfig(cluster: FakeCluster, tmp_path: Path) -> Path:
    return cluster.write_kubeconfig(tmp_path / "kubeconfig")
