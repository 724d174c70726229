"""A legacy request for more devices than a claim holds is not translated.

A ResourceClaim holds at most 32 devices (the scheduler's AllocationResultsMaxSize); API
validation does not bound ``count``, so a claim for 40 would be stored and its pod left to fail
scheduling with an error on every attempt. Translation reports it as a problem at the
container's resource, like any request it cannot translate, and every reader of the plan says
so: translate denies the pod (creating no template), dra-only's fix marks it not translatable,
``migrate`` leaves the manifest alone and exits 2.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from app.allocation import ALLOCATION_RESULTS_MAX_SIZE
from app.cli import main
from app.pipeline import Endpoint
from app.policies.base import Context, Mode
from app.policies.builders import plan_for
from app.translation import TranslationPlan
from tests.helpers import DEMO_NAMESPACES, make_pipeline
from tests.policies.translate_objects import container, decide, gpus, pod
from tests.specs import pod_spec

Obj = dict[str, Any]
PATH = "spec.containers[0].resources.limits[nvidia.com/gpu]"
WHY = (
    "but a ResourceClaim holds at most 32 (AllocationResultsMaxSize): the scheduler fails such a "
    "claim with an error and never allocates it, so it is not translated; ask for at most 32 "
    "per container"
)


def _plan(obj: Obj) -> TranslationPlan:
    pipeline = make_pipeline(list(DEMO_NAMESPACES))
    labels = pipeline.view.namespace_labels("ml-research")
    assert labels is not None
    ctx = Context(pipeline.view, pipeline.policy, pipeline.parts, Mode.TRANSLATE, labels)
    spec = pod_spec("Pod", obj)
    assert spec is not None
    return plan_for(spec, "ml-research", ctx)


def _review(obj: Obj) -> Obj:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "u",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": obj["metadata"]["namespace"],
            "operation": "CREATE",
            "userInfo": {"username": "someone"},
            "object": obj,
        },
    }


def test_40_gpus_are_a_problem_at_the_containers_resource_and_no_claim() -> None:
    planned = _plan(pod(gpus("cuda", 40)))
    assert [(p.path, p.message) for p in planned.problems] == [
        (PATH, f"container cuda: nvidia.com/gpu: 40 would become one claim for 40 devices, {WHY}")
    ]
    assert not planned.wants
    assert not planned.claims
    assert not planned.templates


def test_32_gpus_are_one_claim_of_32() -> None:
    planned = _plan(pod(gpus("cuda", ALLOCATION_RESULTS_MAX_SIZE)))
    assert not planned.problems
    assert [c.count for c in planned.claims] == [32]


def test_each_container_is_held_to_the_limit_on_its_own() -> None:
    planned = _plan(pod(gpus("a", 32), gpus("b", 32), init=(gpus("setup", 33),)))
    assert [p.path for p in planned.problems] == [
        "spec.initContainers[0].resources.limits[nvidia.com/gpu]"
    ]
    assert "init container setup: nvidia.com/gpu: 33" in planned.problems[0].message


def test_a_shared_gpu_request_for_40_shares_is_held_to_the_limit_too() -> None:
    hami = container("cuda", limits={"nvidia.com/gpu": "40", "nvidia.com/gpumem": "4000"})
    planned = _plan(pod(hami))
    (problem,) = planned.problems
    assert problem.path == PATH
    assert "would become one claim for 40 devices" in problem.message
    assert not planned.claims


def test_translation_denies_the_pod_naming_the_resource_and_creates_no_template() -> None:
    decision = decide(_review(pod(gpus("cuda", 40))))
    assert not decision.allowed
    assert decision.denied_by == ("translate",)
    assert f"{PATH}: container cuda: nvidia.com/gpu: 40" in decision.message
    assert "at most 32 (AllocationResultsMaxSize)" in decision.message
    assert not decision.templates
    assert not decision.patch


def test_dra_onlys_fix_marks_the_request_not_translatable() -> None:
    decision = decide(_review(pod(gpus("cuda", 40), ns="gpu-e2e")), Endpoint.VALIDATE)
    assert not decision.allowed
    assert f"  # not translatable: {PATH}: container cuda" in decision.message
    assert "count: 40" not in decision.message


def test_migrate_leaves_the_manifest_and_exits_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    text = (
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: ml}\nspec:\n  containers:\n"
        "  - name: cuda\n    image: x\n    resources: {limits: {nvidia.com/gpu: 40}}\n"
    )
    (tmp_path / "p.yaml").write_text(text)
    monkeypatch.chdir(tmp_path)
    code = main(["migrate", "--write", "p.yaml"])
    assert code == 2
    assert (
        f"p.yaml#0 (Pod ml/p): {PATH}: container cuda: nvidia.com/gpu: 40"
        in capsys.readouterr().err
    )
    assert (tmp_path / "p.yaml").read_text() == text
