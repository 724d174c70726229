"""Peak memory of `dra-webhook report --kubeconfig`: bounded by a page, not by the cluster.

The report runs as a child process against a test API server (tests/report/fake_cluster.py,
which makes each page's objects when asked, so the cluster itself is held nowhere); its peak
RSS is the child's own VmHWM (tests/report/peak.py says why not wait4's). Pods are
spread over 50 namespaces, one in four asks for nvidia.com/gpu.

Run: `.venv/bin/pytest tests/benchmarks/test_report_memory.py --benchmark-only -s`. The figures
are printed and kept in the benchmark's extra_info (docs/benchmarks.md, "Live report").
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pytest_benchmark.fixture import BenchmarkFixture

from tests.report.fake_cluster import FakeCluster, namespace, pod
from tests.report.helpers import Running
from tests.report.peak import run_report

NAMESPACES = 50
Obj = dict[str, Any]


def _populate(cluster: FakeCluster, pods: int) -> None:
    modes = ("dra-only", "audit", "translate")
    spaces = [namespace(f"ns-{i:02d}", **{"gpu-mode": modes[i % 3]}) for i in range(NAMESPACES)]
    cluster.serve("/api/v1/namespaces", NAMESPACES, spaces.__getitem__)
    cluster.serve("/apis/resource.k8s.io/v1/deviceclasses", 0, lambda i: {})
    for path in (
        "/api/v1/nodes", "/apis/resource.k8s.io/v1/resourceclaimtemplates",
        "/apis/resource.k8s.io/v1/resourceclaims",
    ):  # fmt: skip
        cluster.serve(path, 0, lambda i: {})
    for path in (
        "/apis/batch/v1/cronjobs", "/apis/apps/v1/deployments", "/apis/apps/v1/statefulsets",
        "/apis/apps/v1/daemonsets", "/api/v1/replicationcontrollers", "/api/v1/podtemplates",
        "/apis/apps/v1/replicasets", "/apis/batch/v1/jobs",
    ):  # fmt: skip
        cluster.serve(path, 0, lambda i: {})

    def make(i: int) -> Obj:
        return pod(f"ns-{i % NAMESPACES:02d}", f"pod-{i}", "nvidia.com/gpu" if i % 4 == 0 else None)

    cluster.serve("/api/v1/pods", pods, make)


def peak_rss_kib(kubeconfig: Path, page_size: int, *extra: str) -> int:
    code, _, err, peak = run_report(
        "--kubeconfig", str(kubeconfig), "--page-size", str(page_size), "--output", "json", *extra
    )
    assert code == 0, err
    return peak


@pytest.mark.parametrize("pods", [2_000, 20_000])
def test_report_peak_rss(benchmark: BenchmarkFixture, pods: int, tmp_path: Path) -> None:
    with Running() as cluster:
        _populate(cluster, pods)
        kubeconfig = cluster.write_kubeconfig(tmp_path / "kubeconfig")
        paged = peak_rss_kib(kubeconfig, 500, "--policy-reports")
        whole = peak_rss_kib(kubeconfig, pods)
        benchmark.pedantic(
            lambda: peak_rss_kib(kubeconfig, 500, "--policy-reports"), rounds=1, iterations=1
        )
    info = {
        "pods": pods,
        "peak_rss_mib_pages_of_500": round(paged / 1024, 1),
        "peak_rss_mib_one_page": round(whole / 1024, 1),
    }
    benchmark.extra_info.update(info)
    print(f"\n{info}")
    if pods == 20_000:
        # a page at a time: 10x the pods of the 2,000 case, within a few MiB of it
        assert paged < whole
