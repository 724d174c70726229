"""`dra-webhook migrate` on real operator manifests (`operators/manifests/` of
DRA_WEBHOOK_TEST_DATA, byte for byte from upstream examples), with the default policy.

The unit tests of the catalogue use objects written for them; these are the shapes users have:
multi-document files, comments, quoted counts, HAMi and Volcano sharing names, operator fields.
For each file the expected outcome is read off the manifest by hand (the golden table below),
not taken from a run of the tool:

* `rewritten`: every legacy request sits in a pod spec the catalogue names. `--write` exits 0,
  leaves no legacy name in any `limits`/`requests`, and the rewritten custom resource is still
  valid for its operator's CRD (an invalid or pruned field would break the workload at apply
  time). A second run changes nothing.
* `reported: <path>`: a GPU request the tool cannot rewrite (an operator field, a container
  KServe builds, a percentage DRA cannot express). Exit 2, stderr names the path.
* `unchanged`: nothing a default policy calls legacy (a TPU, zero GPUs). Exit 0, same bytes.

Whatever the table says, a file must never come out of a run that exited 0 with a legacy name
left in it: that run would tell CI the migration is done.
"""

from __future__ import annotations

import functools
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from app.cluster.view import ClusterView
from app.config import load_policy
from app.migrate.objects import Rules
from app.workloads import group_kind
from tests.migrate.helpers import Run
from tests.operators import manifest_folder
from tests.workloads.crds import api_server_schema, crds_of, documents

REWRITTEN = "rewritten"
UNCHANGED = "unchanged"


def reported(path: str) -> str:
    return f"reported: {path}"


# manifest file -> what migrate should do with it, from reading the manifest and the default
# policy (app/config/default-policy.yaml).
GOLDEN: dict[str, str] = {
    # HAMi: nvidia.com/gpu + gpumem (MiB) + gpucores: the `hami` sharing rule
    "Project-HAMi__HAMi__examples__nvidia__default_use.yaml": REWRITTEN,
    "Project-HAMi__HAMi__examples__nvidia__dynamic_mig_example.yaml": REWRITTEN,
    # gpumem-percentage: a share of the device's memory; the default policy has no `percentOf`
    "Project-HAMi__HAMi__examples__nvidia__use_memory_fraction.yaml": reported(
        "spec.containers[0].resources.limits[nvidia.com/gpumem-percentage]"
    ),
    "Project-HAMi__HAMi__examples__nvidia__vllm_cross_vgpu.yaml": reported(
        "spec.template.spec.containers[0].resources.limits[nvidia.com/gpumem-percentage]"
    ),
    # Volcano vGPU: vgpu-number + vgpu-memory, the `volcano-vgpu` sharing rule
    "Project-HAMi__volcano-vgpu-device-plugin__examples__vgpu-case02.yml": REWRITTEN,
    "Project-HAMi__volcano-vgpu-device-plugin__examples__vgpu-deployment.yaml": REWRITTEN,
    # KServe predictor runtimes (tensorflow, model, pytorch): containers KServe builds
    "kserve__kserve__docs__samples__accelerators__tensorflow-gpu.yaml": reported(
        "spec.predictor.tensorflow.resources.limits[nvidia.com/gpu]"
    ),
    "kserve__kserve__docs__samples__storage__hf__hf_isvc.yaml": reported(
        "spec.predictor.model.resources.limits[nvidia.com/gpu]"
    ),
    "kserve__kserve__docs__samples__v1beta1__torchserve__v1__gpu.yaml": reported(
        "spec.predictor.pytorch.resources.limits[nvidia.com/gpu]"
    ),
    # LLMInferenceService: spec.template / spec.worker / spec.prefill.template containers
    "kserve__kserve__docs__samples__llmisvc__dp-ep__deepseek-r1-gpu-rdma-roce__"
    "llm-inference-service-dp-ep-deepseek-r1-gpu-naive.yaml": REWRITTEN,
    "kserve__kserve__docs__samples__llmisvc__multi-gpu-vendor__"
    "llm-inference-service-qwen2-7b-amd-no-scheduler.yaml": REWRITTEN,
    "kserve__kserve__docs__samples__llmisvc__single-node-gpu__"
    "llm-inference-service-pd-qwen2-7b-gpu.yaml": REWRITTEN,
    "kserve__kserve__docs__samples__llmisvc__single-node-gpu__"
    "llm-inference-service-qwen2-7b-gpu.yaml": REWRITTEN,
    # Kubeflow v1 / mpi-operator: <role>ReplicaSpecs.<role>.template
    "kubeflow__mpi-operator__examples__v2beta1__tensorflow-benchmarks__"
    "tensorflow-benchmarks.yaml": REWRITTEN,
    "kubeflow__trainer__examples__paddlepaddle__simple-gpu.yaml": REWRITTEN,
    "kubeflow__trainer__examples__pytorch__deepspeed-demo__pytorch_deepspeed_demo.yaml": REWRITTEN,
    "kubeflow__trainer__examples__pytorch__mnist__v1__pytorch_job_mnist_nccl.yaml": REWRITTEN,
    "kubeflow__trainer__examples__tensorflow__distribution_strategy__"
    "multi_worker_tfjob.yaml": REWRITTEN,
    # TrainJob: GPUs in the operator's own spec.trainer.resourcesPerNode
    "kubeflow__trainer__examples__flux__lammps-train-gpus.yaml": reported(
        "spec.trainer.resourcesPerNode.limits[nvidia.com/gpu]"
    ),
    # ClusterTrainingRuntime: the JobSet template's node replicated job
    "kubeflow__trainer__manifests__base__runtimes__torchtune__llama3_2__llama3_2_1B.yaml": (
        REWRITTEN
    ),
    # JobSet asking for google.com/tpu: not a legacy GPU name
    "kubernetes-sigs__jobset__site__static__examples__tpu-multislice__v6e-jax-workload.yaml": (
        UNCHANGED
    ),
    # LeaderWorkerSet: leaderTemplate + workerTemplate
    "kubernetes-sigs__lws__docs__examples__sglang__lws.yaml": REWRITTEN,
    "kubernetes-sigs__lws__docs__examples__tensorrt-llm__lws.yaml": REWRITTEN,
    "kubernetes-sigs__lws__docs__examples__vllm__GPU__lws.yaml": REWRITTEN,
    # AppWrapper: a batch/v1 Job embedded in spec.components[0].template
    "project-codeflare__appwrapper__samples__wrapped-gpu-job.yaml": REWRITTEN,
    # KubeRay: head and worker group templates
    "ray-project__kuberay__ray-operator__config__samples__pytorch-text-classifier__"
    "ray-job.pytorch-distributed-training.yaml": REWRITTEN,
    "ray-project__kuberay__ray-operator__config__samples__ray-cluster.verl.yaml": REWRITTEN,
    "ray-project__kuberay__ray-operator__config__samples__ray-job.batch-inference.yaml": REWRITTEN,
    "ray-project__kuberay__ray-operator__config__samples__ray-service.llm-serve.yaml": REWRITTEN,
    "ray-project__kuberay__ray-operator__config__samples__"
    "ray-service.stable-diffusion.yaml": REWRITTEN,
    # VLLMRuntime asks for one GPU in its own field (spec.deploymentConfig.resources.gpu with
    # gpuType nvidia.com/gpu): no pod spec to rewrite, so it must be reported
    "vllm-project__production-stack__operator__config__samples__"
    "production-stack_v1alpha1_vllmruntime.yaml": reported("spec.deploymentConfig.resources"),
    "vllm-project__production-stack__src__gateway_inference_extension__configs__vllm__"
    "gpu-deployment.yaml": REWRITTEN,
    # volcano.sh/gpu-memory (Volcano's older gpu-share plugin, MiB of a shared GPU): the
    # default policy's `volcano-vgpu` sharing rule
    "volcano-sh__devices__example__gpu-share.yml": REWRITTEN,
    "volcano-sh__volcano__example__MindSpore-example__mindspore_gpu__mindspore-gpu.yaml": (
        REWRITTEN
    ),
    # Argo WorkflowTemplate whose resource.manifest string embeds a Volcano Job with
    # nvidia.com/gpu: 0: zero GPUs ask for nothing
    "volcano-sh__volcano__example__integrations__argo__mpi__hello-world.yaml": UNCHANGED,
}

MANIFESTS = sorted(GOLDEN)
"""The cases come from the table, not the folder (which may not be there: the tests then skip
saying so); the first test below checks the two name the same files."""


def _id(name: str) -> str:
    return name.rsplit(".", 1)[0]


@functools.cache
def _is_legacy() -> Callable[[str], bool]:
    return Rules.build(load_policy(None), ClusterView()).translation.legacy


def _legacy_left(text: str) -> list[str]:
    """`doc#i path` of every legacy name still in a `limits` or `requests` map."""
    is_legacy = _is_legacy()
    left: list[str] = []

    def walk(node: Any, path: str) -> Iterator[str]:
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("limits", "requests") and isinstance(value, dict):
                    yield from (f"{path}.{key}[{n}]" for n in value if is_legacy(str(n)))
                yield from walk(value, f"{path}.{key}")
        elif isinstance(node, list):
            for i, item in enumerate(node):
                yield from walk(item, f"{path}[{i}]")

    for index, doc in enumerate(documents(text)):
        left += walk(doc, f"#{index}")
    return left


@functools.cache
def _validator(group: str, kind: str, version: str) -> jsonschema.protocols.Validator | None:
    for crd in crds_of(group, kind):
        for served in crd.served:
            if served.name == version:
                return jsonschema.Draft7Validator(api_server_schema(served.schema))
    return None


def _invalid(text: str) -> list[str]:
    """Schema errors of every custom resource in the file whose CRD is in the test data."""
    errors: list[str] = []
    for index, doc in enumerate(documents(text)):
        if not isinstance(doc, dict):
            continue
        group, kind = group_kind(doc)
        version = str(doc.get("apiVersion", "")).rpartition("/")[2]
        validator = _validator(group, kind, version) if group else None
        if validator is None:
            continue
        for error in validator.iter_errors(doc):
            where = ".".join(str(p) for p in error.absolute_path)
            errors.append(f"#{index} {kind} {where}: {error.message[:200]}")
    return errors


@pytest.fixture
def copied(tmp_path: Path) -> Callable[[str], Path]:
    def copy(name: str) -> Path:
        target = tmp_path / name
        shutil.copyfile(manifest_folder() / name, target)
        return target

    return copy


def test_the_golden_table_names_every_manifest() -> None:
    assert sorted(p.name for p in manifest_folder().iterdir() if p.is_file()) == MANIFESTS


@pytest.mark.parametrize("name", [n for n in MANIFESTS if GOLDEN.get(n) == REWRITTEN], ids=_id)
def test_a_manifest_with_rewritable_requests_is_rewritten_valid_and_free_of_legacy_names(
    name: str, copied: Callable[[str], Path], migrate: Callable[..., Run]
) -> None:
    file = copied(name)
    original = file.read_text()
    run = migrate("--write", name)
    assert run.code == 0, run.stderr
    text = file.read_text()
    assert text != original
    assert _legacy_left(text) == []
    assert _invalid(text) == []


@pytest.mark.parametrize("name", [n for n in MANIFESTS if GOLDEN.get(n) == REWRITTEN], ids=_id)
def test_migrating_a_rewritten_manifest_again_changes_nothing(
    name: str, copied: Callable[[str], Path], migrate: Callable[..., Run]
) -> None:
    file = copied(name)
    assert migrate("--write", name).code == 0
    once = file.read_bytes()
    assert migrate("--diff", name) == Run(0, "", "")
    assert migrate("--write", name).code == 0
    assert file.read_bytes() == once


@pytest.mark.parametrize(
    "name", [n for n in MANIFESTS if GOLDEN.get(n, "").startswith("reported: ")], ids=_id
)
def test_a_manifest_with_requests_that_cannot_be_rewritten_exits_2_naming_the_path(
    name: str, copied: Callable[[str], Path], migrate: Callable[..., Run]
) -> None:
    copied(name)
    run = migrate("--write", name)
    path = GOLDEN[name].removeprefix("reported: ")
    assert run.code == 2
    assert path in run.stderr


@pytest.mark.parametrize("name", [n for n in MANIFESTS if GOLDEN.get(n) == UNCHANGED], ids=_id)
def test_a_manifest_without_legacy_requests_is_left_byte_for_byte(
    name: str, copied: Callable[[str], Path], migrate: Callable[..., Run]
) -> None:
    file = copied(name)
    original = file.read_bytes()
    assert migrate("--write", name) == Run(0, "", "")
    assert file.read_bytes() == original


@pytest.mark.parametrize("name", MANIFESTS, ids=_id)
def test_a_manifest_never_exits_0_with_a_legacy_name_left(
    name: str, copied: Callable[[str], Path], migrate: Callable[..., Run]
) -> None:
    file = copied(name)
    run = migrate("--write", name)
    if run.code == 0:
        assert _legacy_left(file.read_text()) == []
    else:
        assert run.code == 2, run.stderr
