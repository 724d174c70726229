"""Journey migrate: manifests rewritten by `dra-webhook migrate` pass the real API server, and
their pods are admitted in dra-only namespaces, where the legacy originals are denied.

The golden manifests (tests/migrate/golden/manifests, all but the unmappable one) are rewritten
with `--write`, then each file is applied as written with `kubectl apply --dry-run=server` into
namespaces of the names the files use, labelled gpu-mode=dra-only: the API server validates
every object (and the webhook and the dra-only ValidatingAdmissionPolicy see them). Then the
pods of every rewritten workload are created for real in a fresh dra-only namespace, after the
templates they reference.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from app.cli import main
from tests.assets import control_plane_release, k8s_tool
from tests.e2e.controlplane import ControlPlane
from tests.e2e.fleet import SHARING_SINCE
from tests.e2e.kube import ApiError, Kube, release_devices
from tests.specs import pod_spec

pytestmark = [pytest.mark.journey("migrate"), pytest.mark.usefixtures("webhook")]

GOLDEN = Path(__file__).resolve().parents[1] / "migrate" / "golden" / "manifests"
UNMAPPABLE = "unmappable.yaml"
SHARING = "sharing.yaml"
"""GPU shares: consumable-capacity requests, kept from 1.36 on (tests/e2e/test_releases.py shows
migrate refusing them, with the reason, for an older release)."""
Obj = dict[str, Any]


@pytest.fixture(scope="module")
def rewritten(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The golden manifests migrated for the release under test."""
    minor, version = control_plane_release()
    left_out = {UNMAPPABLE} | ({SHARING} if minor < SHARING_SINCE else set())
    folder = tmp_path_factory.mktemp("migrated")
    for path in sorted(GOLDEN.iterdir()):
        if path.name not in left_out:
            shutil.copyfile(path, folder / path.name)
    assert main(["migrate", "--write", "--kubernetes-version", version, str(folder)]) == 0
    return folder


def _objects(path: Path) -> Iterator[Obj]:
    documents = [yaml.safe_load(path.read_text())] if path.suffix == ".json" else None
    for doc in documents or yaml.safe_load_all(path.read_text()):
        if not doc:
            continue
        yield from doc["items"] if doc.get("kind") == "List" else [doc]


@pytest.fixture(scope="module")
def golden_namespaces(kube: Kube, rewritten: Path) -> Iterator[list[str]]:
    names = sorted(
        {
            o["metadata"]["namespace"]
            for p in rewritten.iterdir()
            for o in _objects(p)
            if o["metadata"].get("namespace")
        }
    )
    for name in names:
        kube.namespace(name, **{"gpu-mode": "dra-only"})
    yield names
    for name in names:
        release_devices(kube, name)


def _kubectl(
    plane: ControlPlane, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [k8s_tool("kubectl"), "--kubeconfig", str(plane.kubeconfig()), *args],
        input=stdin, capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip


def test_every_rewritten_file_passes_a_server_side_dry_run_in_dra_only_namespaces(
    control_plane: ControlPlane, rewritten: Path, golden_namespaces: list[str]
) -> None:
    for path in sorted(rewritten.iterdir()):
        named = all(
            o["metadata"].get("namespace") or o["kind"] == "Namespace" for o in _objects(path)
        )
        where = [] if named else ["-n", golden_namespaces[0]]
        done = _kubectl(control_plane, "apply", "--dry-run=server", *where, "-f", str(path))
        assert done.returncode == 0, f"{path.name}: {done.stderr}"


def test_the_legacy_originals_are_denied_there(
    control_plane: ControlPlane, golden_namespaces: list[str]
) -> None:
    done = _kubectl(control_plane, "apply", "--dry-run=server", "-f", str(GOLDEN / "training.yaml"))
    assert done.returncode != 0
    assert "nvidia.com/gpu" in done.stderr


def test_the_pods_of_the_rewritten_workloads_are_admitted_in_a_dra_only_namespace(
    kube: Kube, rewritten: Path, namespace: Callable[..., str]
) -> None:
    ns = namespace("dra-only")
    objects = [o for p in sorted(rewritten.iterdir()) for o in _objects(p)]
    for needed in [o for o in objects if o["kind"] in ("ResourceClaimTemplate", "ServiceAccount")]:
        needed["metadata"]["namespace"] = ns
        kube.apply(needed)
    admitted = []
    for index, obj in enumerate(objects):
        found = pod_spec(obj["kind"], obj)
        if found is None or not found.spec.get("resourceClaims"):
            continue
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"{obj['kind'].lower()}-{index}", "namespace": ns},
            "spec": found.spec,
        }
        try:
            kube.create(pod)
        except ApiError as error:
            pytest.fail(f"{obj['kind']} {obj['metadata']['name']}: {error}")
        admitted.append(obj["kind"])
    assert sorted(set(admitted)) == [
        "CronJob", "DaemonSet", "Deployment", "Job", "Pod", "StatefulSet",
    ]  # fmt: skip
