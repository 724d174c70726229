"""dra_webhook_legacy_workloads: the webhook reads the report's PolicyReports back."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from app.cluster.listing import Cluster, connect
from app.cluster.progress import MigrationProgress
from app.config.settings import ClusterSource, Settings
from app.metrics import Metrics
from tests.report.fake_cluster import FakeCluster


def _report(
    namespace: str, mode: str | None, fail: int, warn: int, ours: bool = True
) -> dict[str, object]:
    labels = {"app.kubernetes.io/managed-by": "dra-webhook" if ours else "kyverno"}
    if mode:
        labels["dra-webhook/mode"] = mode
    return {
        "metadata": {"name": "dra-webhook-migration", "namespace": namespace, "labels": labels},
        "summary": {"pass": 3, "fail": fail, "warn": warn, "error": 0, "skip": 0},
    }


def _seed(cluster: FakeCluster) -> None:
    cluster.reports[("train", "r")] = _report("train", "dra-only", 2, 0)
    cluster.reports[("lab", "r")] = _report("lab", "translate", 0, 5)
    cluster.reports[("new", "r")] = _report("new", None, 0, 1)
    cluster.reports[("kyv", "r")] = _report("kyv", "audit", 9, 9, ours=False)


async def _progress(kubeconfig: Path) -> MigrationProgress:
    progress = MigrationProgress(lambda: connect(kubeconfig), interval=0.01)
    cluster = Cluster(await connect(kubeconfig))
    try:
        await progress.read(cluster)
    finally:
        await cluster.close()
    return progress


def test_the_gauge_counts_fail_and_warn_results_per_namespace_and_mode(
    cluster: FakeCluster, kubeconfig: Path
) -> None:
    _seed(cluster)
    progress = asyncio.run(_progress(kubeconfig))
    assert progress.counts == {
        ("train", "dra-only"): 2,
        ("lab", "translate"): 5,
        ("new", "none"): 1,
    }
    metrics = Metrics()
    metrics.watch_migration(progress)
    text = metrics.render().decode()
    assert 'dra_webhook_legacy_workloads{mode="dra-only",workload_namespace="train"} 2.0' in text
    assert 'dra_webhook_legacy_workloads{mode="translate",workload_namespace="lab"} 5.0' in text
    assert "dra_webhook_legacy_workloads_read_errors_total 0.0" in text
    assert "dra_webhook_legacy_workloads_last_read_timestamp_seconds" in text
    assert 'workload_namespace="kyv"' not in text


def test_a_forbidden_read_is_counted_and_retried_keeping_the_last_counts(
    cluster: FakeCluster, kubeconfig: Path
) -> None:
    cluster.forbid("list", "policyreports")

    async def scenario() -> MigrationProgress:
        progress = MigrationProgress(lambda: connect(kubeconfig), interval=0.01)
        task = asyncio.create_task(progress.run())
        for _ in range(3000):  # bounded: fails below instead of hanging
            if progress.read_errors >= 2:
                break
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return progress

    progress = asyncio.run(scenario())
    assert progress.read_errors >= 2
    assert progress.counts == {}
    assert progress.reads == 0


def test_the_webhook_reads_the_reports_only_when_asked_and_with_a_live_view(
    kubeconfig: Path,
) -> None:
    live = Settings(cluster_source=ClusterSource.KUBECONFIG, kubeconfig=kubeconfig)
    assert MigrationProgress.from_settings(live) is None  # the default interval, 0: off
    on = live.model_copy(update={"migration_gauge_interval_seconds": 300})
    assert MigrationProgress.from_settings(on) is not None
    static = Settings(migration_gauge_interval_seconds=300)
    assert MigrationProgress.from_settings(static) is None


def test_the_gpu_pods_gauge_reads_how_each_namespace_s_pods_are_served(
    cluster: FakeCluster, kubeconfig: Path
) -> None:
    _seed(cluster)
    served = "device-plugin=3,dra-extended-resource=2"
    cluster.reports[("train", "r")]["metadata"]["annotations"] = {"dra-webhook/gpu-pods": served}
    progress = asyncio.run(_progress(kubeconfig))
    assert progress.gpu_pods == {
        ("train", "device-plugin"): 3,
        ("train", "dra-extended-resource"): 2,
    }
    metrics = Metrics()
    metrics.watch_migration(progress)
    text = metrics.render().decode()
    assert 'dra_webhook_gpu_pods{source="device-plugin",workload_namespace="train"} 3.0' in text
    assert (
        'dra_webhook_gpu_pods{source="dra-extended-resource",workload_namespace="train"} 2.0'
        in text
    )
