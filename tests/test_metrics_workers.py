"""/metrics counts every review whichever worker answered it (prometheus multiprocess mode).

These tests run the real CLI (`python -m app serve`, conftest's TLS server) on loopback, with one
and with two uvicorn worker processes, and stop it by its process object.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.parser import text_string_to_metric_families

from app.errors import ConfigError
from app.metrics import Metrics
from app.server.metrics_dir import prepare_multiprocess_dir
from tests.helpers import FIXTURES, TlsServer, start_server, stop_server

LEGACY_POD = FIXTURES / "pod-create-legacy-gpu.json"
COUNT = "dra_webhook_admission_duration_seconds"


def _review(server: TlsServer, body: bytes) -> None:
    """One review on a connection of its own, so the kernel may hand it to either worker."""
    response = httpx.post(
        f"{server.base_url}/validate",
        content=body,
        headers={"Content-Type": "application/json"},
        verify=server.ssl_context(),
        timeout=10,
    )
    assert response.status_code == 200
    assert response.json()["response"]["allowed"] is False


def _reviews_counted(server: TlsServer) -> float:
    with server.client() as client:
        text = client.get("/metrics").text
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        if family.name == COUNT
        for sample in family.samples
        if sample.name == f"{COUNT}_count"
    )


def _samples(server: TlsServer, name: str) -> dict[str, float]:
    """The samples of one metric family, by their `kind` label."""
    with server.client() as client:
        text = client.get("/metrics").text
    return {
        sample.labels.get("kind", ""): sample.value
        for family in text_string_to_metric_families(text)
        if family.name == name
        for sample in family.samples
    }


def _counts_by_worker(metrics_dir: Path) -> dict[str, float]:
    """Reviews recorded in each worker's own histogram file."""
    counts: dict[str, float] = {}
    for path in sorted(metrics_dir.glob("histogram_*.db")):
        families = MultiProcessCollector.merge([str(path)], accumulate=True)
        counts[path.stem] = sum(
            sample.value
            for family in families
            if family.name == COUNT
            for sample in family.samples
            if sample.name == f"{COUNT}_count"
        )
    return counts


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 2])
def test_metrics_count_every_review_whichever_worker_answered(tmp_path: Path, workers: int) -> None:
    metrics_dir = tmp_path / "metrics"
    metrics_dir.mkdir()
    stale = metrics_dir / "histogram_1.db"
    stale.write_bytes(b"left over by an earlier run")
    body = LEGACY_POD.read_bytes()

    server = start_server(tmp_path, "--workers", str(workers), "--metrics-dir", str(metrics_dir))
    try:
        with ThreadPoolExecutor(8) as pool:
            sent = 0
            # Until both workers answered some (bounded): the kernel picks the accepting worker.
            while sent < 400:
                list(pool.map(lambda _: _review(server, body), range(40)))
                sent += 40
                if workers == 1:
                    break
                by_worker = _counts_by_worker(metrics_dir)
                if sum(1 for n in by_worker.values() if n > 0) >= 2:
                    break

        assert _reviews_counted(server) == sent
        synced = _samples(server, "dra_webhook_cluster_synced")
        assert synced and set(synced.values()) == {1.0}  # every kind, every live worker
    finally:
        stop_server(server)

    if workers == 1:
        # One process keeps its metrics in memory: the folder is neither used nor cleared.
        assert list(metrics_dir.iterdir()) == [stale]
    else:
        assert not stale.exists()
        assert list(metrics_dir.glob("gauge_live*.db")) == []  # workers left the live set
        assert len([n for n in by_worker.values() if n > 0]) == 2, by_worker
        assert sum(by_worker.values()) == sent


def test_the_metrics_folder_loses_old_metric_files_and_nothing_else(tmp_path: Path) -> None:
    (tmp_path / "counter_77.db").write_bytes(b"old")
    (tmp_path / "notes.txt").write_text("kept")

    assert prepare_multiprocess_dir(tmp_path) == tmp_path
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_without_a_metrics_folder_each_start_gets_a_fresh_one() -> None:
    first, second = prepare_multiprocess_dir(None), prepare_multiprocess_dir(None)
    try:
        assert first != second
        assert list(first.iterdir()) == []
    finally:
        first.rmdir()
        second.rmdir()


def test_a_metrics_folder_is_refused_when_prometheus_client_was_loaded_for_one_process(
    tmp_path: Path,
) -> None:
    with pytest.raises(ConfigError, match="PROMETHEUS_MULTIPROC_DIR"):
        Metrics(multiprocess_dir=tmp_path)
