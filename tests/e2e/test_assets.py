"""The control-plane binaries named by CONTROL_PLANE_ASSETS are the ones the suite is written for."""

from __future__ import annotations

import subprocess

import pytest

from tests.assets import control_plane_assets


@pytest.mark.parametrize(
    ("binary", "expected"),
    [
        ("kube-apiserver", "Kubernetes v1.36."),
        ("kube-scheduler", "Kubernetes v1.36."),
        ("kube-controller-manager", "Kubernetes v1.36."),
        ("etcd", "etcd Version: 3.5."),
    ],
)
def test_control_plane_binary_reports_its_version(binary: str, expected: str) -> None:
    folder = control_plane_assets()
    result = subprocess.run(
        [str(folder / binary), "--version"], capture_output=True, text=True, check=True, timeout=30
    )
    assert expected in result.stdout + result.stderr
