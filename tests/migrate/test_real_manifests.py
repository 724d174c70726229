"""`dra-webhook migrate` and `dra-webhook check` on real GPU manifests from public repositories
(`real-manifests/` of DRA_WEBHOOK_TEST_DATA: device plugins' and sharing schemes' examples,
operators' samples, cloud tutorials; origins in its README), with the default policy.

What a user runs first on their repository, so no GPU request may pass in silence: each one is
migrated or named with its path (`migrate`), and denied with its path in a dra-only namespace
(`check`); no file makes either crash; the exit codes are the documented ones (docs/migrate.md,
README "Offline"). The requests are found without the tool: every amount above zero of a
GPU-looking name in a `limits` or `requests` map, plus, in the table, the few a scheduler or an
operator reads from elsewhere (an annotation, an operator's own field). The outcome of each file
is read off the manifest by hand.

None of these files passes in silence today. One that does (Helm values, YAML that is not an
object: a known gap) goes into `SILENT_TODAY` with the gap's name: its cases are then expected
to fail (strict), so they turn red once the gap is closed and the entry must go.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from app.cli import main
from app.cluster.static import read_cluster_text
from tests.assets import third_party
from tests.migrate.helpers import Run

GPU_NAME = re.compile(r"gpu|/mig-", re.IGNORECASE)
"""nvidia.com/gpu, amd.com/gpu, gpu.intel.com/i915, nvidia.com/mig-1g.10gb, HAMi's gpumem and
gpucores, Volcano's vgpu-*, aliyun.com/gpu-mem: broader than any policy on purpose."""
REWRITTEN = "rewritten"
REPORTED = "reported"
NO_GPU = "no GPU request"
OLD_DRA = "already on DRA, written for resource.k8s.io/v1beta1"


@dataclass(frozen=True)
class Expected:
    outcome: str
    elsewhere: tuple[str, ...] = ()
    """GPU requests outside `limits`/`requests` maps, as `#<document> <path>`."""
    why: str = ""


# file -> what migrate and check should make of it, from reading the manifest and the default
# policy (app/config/default-policy.yaml).
EXPECTED: dict[str, Expected] = {
    "argo-wftmpl-volcano-mpi.yaml": Expected(
        NO_GPU, why="its Volcano Job is a string (resource.manifest) asking nvidia.com/gpu: 0"
    ),
    # a legacy GPU next to a DRA claim of its own (a ComputeDomain channel)
    "dra-driver-mpijob-imex.yaml": Expected(REWRITTEN),
    # Helm values of a Flux HelmRelease: no pod spec to rewrite
    "flux-helmrelease-plex-i915.yaml": Expected(REPORTED),
    "gke-ccc-dra-deployment.yaml": Expected(
        OLD_DRA, why="its v1beta1 template moves to v1; no release from 1.34 serves v1beta1"
    ),
    "gke-kueue-job-team-a.yaml": Expected(REWRITTEN),
    "gke-raycluster-stable-diffusion.yaml": Expected(REWRITTEN),
    "gke-triton-deployment.yaml": Expected(REWRITTEN),  # envsubst placeholders left as written
    "gke-vit-statefulset.yaml": Expected(REWRITTEN),
    "gke-vllm-gemma-2b-deployment.yaml": Expected(REWRITTEN),
    "gpushare-binpack-deployment.yaml": Expected(REWRITTEN),  # aliyun.com/gpu-mem: a share
    # HAMi gpu + gpumem + gpucores: the `hami` sharing rule
    "hami-gpu-gpumem-gpucores-pod.yaml": Expected(REWRITTEN),
    "hami-kueue-job.yaml": Expected(REWRITTEN),
    "hami-mig-3g-20gb-pod.yaml": Expected(REWRITTEN),
    # gpumem-percentage: a share of the device's memory; the default policy has no `percentOf`
    "hami-vllm-cross-vgpu.yaml": Expected(REPORTED),
    # gpu.intel.com/i915: no DeviceClass mapping in the default policy
    "intel-gpu-job.yaml": Expected(REPORTED),
    # KAI Scheduler: half a GPU asked for by annotation
    "kai-gpu-fraction-pod.yaml": Expected(REPORTED, ("#0 metadata.annotations.gpu-fraction",)),
    # the predictor's model container is built by KServe
    "kserve-isvc-torchserve-gpu.yaml": Expected(REPORTED),
    "kserve-llmisvc-qwen2-7b.yaml": Expected(REWRITTEN),
    "kubeflow-clustertrainingruntime-torchtune.yaml": Expected(REWRITTEN),
    "kubeflow-pytorchjob-nccl.yaml": Expected(REWRITTEN),
    "kubeflow-tfjob-multiworker.yaml": Expected(REWRITTEN),
    # TrainJob spec.trainer.resourcesPerNode: the Trainer controller copies it into pods
    "kubeflow-trainjob-flux-gpus.yaml": Expected(REPORTED),
    "kuberay-rayjob-text-classifier.yaml": Expected(REWRITTEN),
    "kuberay-rayservice-llm-serve.yaml": Expected(REWRITTEN),
    "lws-vllm-gpu.yaml": Expected(REWRITTEN),
    # kustomize strategic-merge patches: partial Deployments, rewritten as such
    "nos-mig-1g-10gb-patch.yaml": Expected(REWRITTEN),
    "nos-timeslicing-patch.yaml": Expected(REWRITTEN),  # nvidia.com/gpu.shared: time-slicing
    "nvdp-daemonset.yaml": Expected(NO_GPU, why="the device plugin itself: a toleration only"),
    "nvdp-job.yaml": Expected(REWRITTEN),
    "radiozilla-summarizer-cronjob.yaml": Expected(REWRITTEN),
    "rocm-pytorch-pod.yaml": Expected(REWRITTEN),
    "rocm-vllm-deployment.yaml": Expected(REWRITTEN),
    # spec.executor.gpu becomes a device-plugin request in the Spark operator's pods
    "spark-rapids-sparkapplication.yaml": Expected(REPORTED, ("#0 spec.executor.gpu",)),
    "trainer-time-slicing-configmap.yaml": Expected(
        NO_GPU, why="the device plugin's time-slicing configuration, in a ConfigMap"
    ),
    "vllm-stack-gie-gpu-deployment.yaml": Expected(REWRITTEN),
    # VLLMRuntime's own fields (gpu, gpuType) become a device-plugin request
    "vllm-stack-vllmruntime.yaml": Expected(REPORTED, ("#0 spec.deploymentConfig.resources",)),
    "volcano-gpu-share-memory-pod.yaml": Expected(REWRITTEN),
    "volcano-vcjob-mindspore-gpu.yaml": Expected(REWRITTEN),
    "volcano-vgpu-cores-pod.yaml": Expected(REWRITTEN),
}
NAMES = sorted(EXPECTED)
"""The cases come from the table, not the folder (which may not be there: the tests then skip
saying so); the first test checks the two name the same files."""
SILENT_TODAY: dict[str, str] = {}
"""file -> the known gap that lets a GPU request of it pass in silence (none today)."""


def _cases() -> list[Any]:
    return [
        pytest.param(name, marks=pytest.mark.xfail(strict=True, reason=SILENT_TODAY[name]))
        if name in SILENT_TODAY
        else name
        for name in NAMES
    ]


def _folder() -> Path:
    return third_party("real-manifests")


def _documents(text: str) -> list[Any]:
    """The documents as `migrate` and `check` number them (`file#<n>`): empty ones skipped."""
    return [d for d in yaml.safe_load_all(text) if d is not None]


def _in_maps(node: Any, path: str = "") -> list[str]:
    """Paths of the GPU requests in `limits`/`requests` maps, as the tool writes field paths."""
    found: list[str] = []
    if isinstance(node, dict):
        for key, value in node.items():
            where = f"{path}.{key}" if path else str(key)
            if key in ("limits", "requests") and isinstance(value, dict):
                found += [
                    f"{where}[{name}]"
                    for name, amount in value.items()
                    if GPU_NAME.search(str(name)) and str(amount).strip() not in ("0", "")
                ]
            else:
                found += _in_maps(value, where)
    elif isinstance(node, list):
        for index, item in enumerate(node):
            found += _in_maps(item, f"{path}[{index}]")
    return found


def _requests(text: str, expected: Expected) -> set[tuple[int, str]]:
    """(document, path) of every GPU request of a file."""
    found = {(i, path) for i, doc in enumerate(_documents(text)) for path in _in_maps(doc)}
    for entry in expected.elsewhere:
        document, path = entry.split(" ", 1)
        found.add((int(document.removeprefix("#")), path))
    return found


def _owner(path: str) -> str:
    """The resources a request belongs to: `...containers[0].resources` of
    `...containers[0].resources.limits[nvidia.com/gpu]`."""
    return re.sub(r"\.(limits|requests)\[[^\]]*\]$", "", path)


def _limits_twin(path: str) -> str:
    """`requests[X]` -> `limits[X]`: an extended resource's request equals its limit, and the
    webhook names the limit."""
    return re.sub(r"\.requests\[([^\]]*)\]$", r".limits[\1]", path)


def _copy(name: str) -> Path:
    """The manifest, copied into the working folder (the `migrate` fixture's tmp_path)."""
    target = Path(name)
    shutil.copyfile(_folder() / name, target)  # copyfile: not the read-only mode
    return target


def _dra_only_cluster(text: str, where: Path) -> Path:
    """The demo cluster with `default` and every namespace the file names labelled dra-only,
    so that `check` judges every object as dra-only does."""
    cluster = yaml.safe_load(read_cluster_text(None)[0])
    names = {"default"} | {
        str(doc["metadata"]["namespace"])
        for doc in _documents(text)
        if isinstance(doc, dict) and isinstance(doc.get("metadata"), dict)
        if doc["metadata"].get("namespace")
    }
    cluster["items"] = [
        *(
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": n, "labels": {"gpu-mode": "dra-only"}},
            }
            for n in sorted(names)
        ),
        *(item for item in cluster["items"] if item["kind"] != "Namespace"),
    ]
    where.write_text(yaml.safe_dump(cluster))
    return where


def test_the_table_names_every_real_manifest() -> None:
    present = sorted(p.name for p in _folder().iterdir() if p.suffix in (".yaml", ".yml"))
    assert present == NAMES


def test_the_table_says_why_a_manifest_has_no_gpu_request_and_the_finder_agrees() -> None:
    for name in NAMES:
        expected = EXPECTED[name]
        found = _requests((_folder() / name).read_text(), expected)
        if expected.outcome in (NO_GPU, OLD_DRA):
            assert (found, bool(expected.why)) == (set(), True), name
        else:
            assert found, f"{name}: {expected.outcome}, yet no GPU request found"


@pytest.mark.parametrize("name", _cases(), ids=lambda n: n.removesuffix(".yaml"))
def test_migrate_moves_every_gpu_request_of_a_real_manifest_or_names_it_with_its_path(
    name: str, migrate: Callable[..., Run]
) -> None:
    expected = EXPECTED[name]
    file = _copy(name)
    original = file.read_bytes()
    before = _requests(original.decode(), expected)
    # the templates go to a file of their own, so the documents keep their numbers
    run = migrate("--write", "--templates-out", "claimtemplates.yaml", name)
    assert "Traceback" not in run.stderr
    not_translated = [
        line for line in run.stderr.splitlines() if line.startswith("migrate: not translated: ")
    ]
    assert run.code == (2 if not_translated else 0), run.stderr  # docs/migrate.md
    left = _requests(file.read_text(), expected) & before
    # A container's requests are left together when one of them cannot be translated (a
    # share is one request made of several names): the line names the one that blocks it.
    named = {
        (int(found.group(1)), _owner(found.group(2)))
        for line in not_translated
        if (
            found := re.match(
                rf"migrate: not translated: {re.escape(name)}#(\d+) \(.*?\): (\S+): ", line
            )
        )
    }
    silent = [f"#{d} {path}" for d, path in sorted(left) if (d, _owner(path)) not in named]
    assert silent == [], f"left in place and not named:\n{run.stderr}"
    if expected.outcome == REWRITTEN:
        assert (run.code, left) == (0, set()), run.stderr
        assert file.read_bytes() != original
    elif expected.outcome == REPORTED:
        assert run.code == 2
    elif expected.outcome == OLD_DRA:
        assert run == Run(0, "", f"migrate: rewrote {name}\n")
        assert b"apiVersion: resource.k8s.io/v1\n" in file.read_bytes()
    else:
        assert run == Run(0, "", "")
        assert file.read_bytes() == original


@pytest.mark.parametrize("name", _cases(), ids=lambda n: n.removesuffix(".yaml"))
def test_check_denies_every_gpu_request_of_a_real_manifest_in_a_dra_only_namespace(
    name: str, migrate: Callable[..., Run], capsys: pytest.CaptureFixture[str]
) -> None:
    del migrate  # for its working folder only
    expected = EXPECTED[name]
    file = _copy(name)
    text = file.read_text()
    cluster = _dra_only_cluster(text, Path("cluster.yaml"))
    capsys.readouterr()
    code = main(["check", "--cluster-file", str(cluster), name])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    assert err == ""
    denied = re.findall(rf"^\S.* \({re.escape(name)}#(\d+)\): DENIED$", out, re.MULTILINE)
    assert code == (1 if denied else 0), out  # README: exit 1 when anything would be denied
    blocks = re.split(rf"^(?=\S.* \({re.escape(name)}#\d+\): )", out, flags=re.MULTILINE)
    by_document = {
        int(found.group(1)): block
        for block in blocks
        if (found := re.search(rf" \({re.escape(name)}#(\d+)\): ", block.split("\n", 1)[0]))
    }
    silent = [
        f"#{document} {path}"
        for document, path in sorted(_requests(text, expected))
        if not by_document.get(document, "").split("\n", 1)[0].endswith(": DENIED")
        or not any(f"\n  - {p}: " in by_document[document] for p in (path, _limits_twin(path)))
    ]
    assert silent == [], f"GPU requests not denied with their path:\n{out}"
    if expected.outcome == NO_GPU:
        assert code == 0
    elif expected.outcome == OLD_DRA:
        assert code == 1
        assert "resource.k8s.io/v1beta1 ResourceClaimTemplate is not served" in out
    else:
        assert code == 1
