"""The control-plane binaries are one release, as hack/get-control-plane built them."""

from __future__ import annotations

import subprocess

import pytest

from tests.assets import control_plane_assets, control_plane_release


@pytest.mark.parametrize("binary", ["kube-apiserver", "kube-scheduler", "kube-controller-manager"])
def test_each_kubernetes_binary_reports_the_same_release(binary: str) -> None:
    minor, version = control_plane_release()
    assert minor >= 34, f"{version}: the chart supports Kubernetes 1.34 on"
    result = subprocess.run(
        [str(control_plane_assets() / binary), "--version"],
        capture_output=True, text=True, check=True, timeout=30,
    )  # fmt: skip
    assert result.stdout.strip() == f"Kubernetes {version}"


def test_etcd_is_a_3_5_release() -> None:
    result = subprocess.run(
        [str(control_plane_assets() / "etcd"), "--version"],
        capture_output=True, text=True, check=True, timeout=30,
    )  # fmt: skip
    assert "etcd Version: 3.5." in result.stdout
