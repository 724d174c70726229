"""Journey operators: the operators' custom resources ML platforms run on, with their published
CRDs installed (`operators/crds/` of DRA_WEBHOOK_TEST_DATA), go through the webhook like a Deployment: in a dra-only
namespace a PyTorchJob, RayCluster, LeaderWorkerSet, JobSet or Volcano Job asking for
`nvidia.com/gpu` is refused at apply time with the field path into the custom resource and the
fix; the same objects written with DRA claims are admitted (so the CRDs' schemas keep the claims
translation writes); audit namespaces warn; a quota sees a PyTorchJob's Master and Workers
together; `report --kubeconfig` lists them."""

from __future__ import annotations

import copy
import gzip
from collections.abc import Callable
from typing import Any

import orjson
import pytest
import yaml

from app.cli import main
from tests.e2e import objects as o
from tests.e2e.controlplane import ControlPlane
from tests.e2e.kube import ApiError, Kube
from tests.operators import crd_folder

pytestmark = [pytest.mark.journey("operators"), pytest.mark.usefixtures("webhook")]

Obj = dict[str, Any]
GPU = {"nvidia.com/gpu": "2"}
CRD_FILES = (
    "kubeflow.org_pytorchjobs.yaml.gz",
    "ray.io_rayclusters.yaml.gz",
    "leaderworkerset.x-k8s.io_leaderworkersets.yaml.gz",
    "jobset.x-k8s.io_jobsets.yaml.gz",
    "batch.volcano.sh_jobs.yaml.gz",
)


@pytest.fixture(scope="module")
def operator_crds(kube: Kube) -> None:
    folder = crd_folder()
    for name in CRD_FILES:
        (crd,) = yaml.load_all(
            gzip.decompress((folder / name).read_bytes()), Loader=yaml.CSafeLoader
        )
        kube.install_crd(crd)


def _spec(legacy: bool) -> Obj:
    if legacy:
        return o.pod_spec(o.container("train", limits=GPU))
    return o.pod_spec(
        o.container("train", claims=("gpu",)),
        claims=[{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
    )


def _template(spec: Obj) -> Obj:
    return {"spec": copy.deepcopy(spec)}


def pytorchjob(ns: str, spec: Obj, workers: int = 2) -> Obj:
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "bert", "namespace": ns},
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": {
                    "replicas": 1,
                    "restartPolicy": "OnFailure",
                    "template": _template(spec),
                },
                "Worker": {
                    "replicas": workers,
                    "restartPolicy": "OnFailure",
                    "template": _template(spec),
                },
            }
        },
    }


def raycluster(ns: str, spec: Obj) -> Obj:
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": "ray", "namespace": ns},
        "spec": {
            "headGroupSpec": {
                "rayStartParams": {},
                "template": _template(o.pod_spec(o.container())),
            },
            "workerGroupSpecs": [
                {
                    "groupName": "gpu",
                    "replicas": 2,
                    "minReplicas": 1,
                    "maxReplicas": 4,
                    "rayStartParams": {},
                    "template": _template(spec),
                }
            ],
        },
    }


def leaderworkerset(ns: str, spec: Obj) -> Obj:
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": "vllm", "namespace": ns},
        "spec": {
            "replicas": 1,
            "leaderWorkerTemplate": {"size": 2, "workerTemplate": _template(spec)},
        },
    }


def jobset(ns: str, spec: Obj) -> Obj:
    pod = {**copy.deepcopy(spec), "restartPolicy": "Never"}
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "jax", "namespace": ns},
        "spec": {
            "replicatedJobs": [
                {
                    "name": "workers",
                    "replicas": 2,
                    "template": {
                        "spec": {"parallelism": 2, "completions": 2, "template": {"spec": pod}}
                    },
                }
            ]
        },
    }


def volcano_job(ns: str, spec: Obj) -> Obj:
    pod = {**copy.deepcopy(spec), "restartPolicy": "Never"}
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "mpi", "namespace": ns},
        "spec": {
            "minAvailable": 2,
            "tasks": [{"name": "worker", "replicas": 2, "template": {"spec": pod}}],
        },
    }


KINDS: dict[str, tuple[Callable[[str, Obj], Obj], str, str]] = {
    # kind -> (object, plural, where its first GPU request is)
    "PyTorchJob": (
        pytorchjob,
        "pytorchjobs",
        "spec.pytorchReplicaSpecs.Master.template.spec.containers[0].resources.limits[nvidia.com/gpu]",
    ),
    "RayCluster": (
        raycluster,
        "rayclusters",
        "spec.workerGroupSpecs[0].template.spec.containers[0].resources.limits[nvidia.com/gpu]",
    ),
    "LeaderWorkerSet": (
        leaderworkerset,
        "leaderworkersets",
        "spec.leaderWorkerTemplate.workerTemplate.spec.containers[0].resources.limits[nvidia.com/gpu]",
    ),
    "JobSet": (
        jobset,
        "jobsets",
        "spec.replicatedJobs[0].template.spec.template.spec.containers[0].resources.limits"
        "[nvidia.com/gpu]",
    ),
    "Job.batch.volcano.sh": (
        volcano_job,
        "jobs",
        "spec.tasks[0].template.spec.containers[0].resources.limits[nvidia.com/gpu]",
    ),
}


@pytest.mark.parametrize("kind", list(KINDS))
def test_an_operators_workload_asking_for_a_device_plugin_gpu_is_denied_with_the_path_and_fix(
    kind: str, kube: Kube, operator_crds: None, namespace: Callable[..., str]
) -> None:
    ns = namespace("dra-only")
    make, plural, where = KINDS[kind]
    with pytest.raises(ApiError) as denied:
        kube.create_custom(make(ns, _spec(legacy=True)), plural)
    message = denied.value.message
    assert denied.value.status == 403, message
    assert 'admission webhook "operator-workloads.' in message
    assert f"namespace {ns} is dra-only" in message
    assert f"{where}: container train asks for nvidia.com/gpu: 2" in message
    assert "-> use DeviceClass gpu.nvidia.com (count 2)" in message
    assert "resourceClaims:" in message and "resourceClaimTemplateName:" in message


@pytest.mark.parametrize("kind", list(KINDS))
def test_the_same_workload_written_with_dra_claims_is_admitted_and_keeps_its_claims(
    kind: str, kube: Kube, operator_crds: None, namespace: Callable[..., str]
) -> None:
    ns = namespace("dra-only")
    kube.create(o.claim_template("one-gpu", ns, o.claim_spec(o.exactly("gpu.nvidia.com", 1))))
    make, plural, _ = KINDS[kind]
    stored = kube.create_custom(make(ns, _spec(legacy=False)), plural).obj
    # the CRD's schema kept what translation writes (a pruned field would vanish here)
    text = orjson.dumps(stored).decode()
    assert '"resourceClaimTemplateName":"one-gpu"' in text
    assert '"claims":[{"name":"gpu"}]' in text


def test_audit_namespaces_admit_operators_workloads_with_a_warning_and_report_counts_them(
    kube: Kube, operator_crds: None, namespace: Callable[..., str], control_plane: ControlPlane,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    ns = namespace("audit")
    names = []
    for kind, (make, plural, where) in KINDS.items():
        obj = make(ns, _spec(legacy=True))
        answer = kube.create_custom(obj, plural)
        assert any(where in w and "would be denied" in w for w in answer.warnings), (
            kind,
            answer.warnings,
        )
        names.append(f"{obj['kind']}/{obj['metadata']['name']}")
    capsys.readouterr()
    code = main(["report", "--kubeconfig", str(control_plane.kubeconfig()), "--output", "json"])
    out = capsys.readouterr().out
    assert code == 0
    (row,) = [r for r in orjson.loads(out) if r["namespace"] == ns]
    assert sorted(row["legacy_objects"]) == sorted(names)
    assert row["readyForDraOnly"] is False


def test_a_quota_counts_a_pytorchjobs_master_and_workers_together(
    kube: Kube, operator_crds: None, namespace: Callable[..., str]
) -> None:
    """tests/e2e/values.yaml: namespaces labelled dra-quota=small may hold 4 gpu.nvidia.com."""
    ns = namespace("dra-only", **{"dra-quota": "small"})
    kube.create(o.claim_template("one-gpu", ns, o.claim_spec(o.exactly("gpu.nvidia.com", 4))))
    job = pytorchjob(ns, _spec(legacy=False), workers=8)

    def denied() -> str | None:
        try:
            kube.create_custom(job, "pytorchjobs", dry_run=True)
        except ApiError as exc:
            return exc.message
        return None  # the webhook's view has not seen the template yet

    message = kube.wait(denied, "the quota's denial")
    assert (
        "PyTorchJob bert needs spec.pytorchReplicaSpecs.Master.template.spec: 1 replica x 4 + "
        "spec.pytorchReplicaSpecs.Worker.template.spec: 8 replicas x 4 = 36 devices of "
        f"gpu.nvidia.com; namespace {ns} allows 4, 0 in use"
    ) in message
