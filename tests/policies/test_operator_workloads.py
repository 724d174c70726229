"""The operators' custom resources through the pipeline (policy tests: no HTTP): dra-only and
audit with paths into the custom resource, UPDATE, translation of every template, quota over
every role, GPU requests that cannot be rewritten, and kinds the admin adds in the policy."""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
import pytest

from app.errors import PolicyError
from app.pipeline import Endpoint
from tests.dra_only_cases import container
from tests.helpers import DEMO_NAMESPACES, decide, make_pipeline, namespace, policy_from

Obj = dict[str, Any]
GPU = "nvidia.com/gpu"


def _template(*containers: Obj, **spec: Any) -> Obj:
    return {"spec": {"containers": list(containers), **spec}}


def pytorchjob(ns: str, master: Obj, worker: Obj, workers: int = 8) -> Obj:
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "bert", "namespace": ns},
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "template": master},
                "Worker": {"replicas": workers, "template": worker},
            }
        },
    }


def raycluster(ns: str, worker: Obj) -> Obj:
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": "ray", "namespace": ns},
        "spec": {
            "headGroupSpec": {"template": _template(container("head"))},
            "workerGroupSpecs": [
                {"groupName": "gpu", "replicas": 2, "maxReplicas": 4, "template": worker}
            ],
        },
    }


def trainjob(ns: str, gpus: str = "4") -> Obj:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "tune", "namespace": ns},
        "spec": {"trainer": {"numNodes": 2, "resourcesPerNode": {"limits": {GPU: gpus}}}},
    }


def gpu(name: str, n: str = "4") -> Obj:
    return container(name, limits={GPU: n})


def test_a_pytorchjob_in_a_dra_only_namespace_is_denied_naming_every_role_and_the_fix() -> None:
    decision = decide(pytorchjob("gpu-e2e", _template(gpu("m")), _template(gpu("w"))))
    assert not decision.allowed and decision.denied_by == ("dra-only",)
    role = (
        "spec.pytorchReplicaSpecs.{}.template.spec.containers[0].resources.limits[nvidia.com/gpu]"
    )
    assert f"- {role.format('Master')}: container m asks for nvidia.com/gpu: 4" in decision.message
    assert f"- {role.format('Worker')}: container w asks for nvidia.com/gpu: 4" in decision.message
    assert "add to spec.pytorchReplicaSpecs.Worker.template.spec:" in decision.message


def test_an_audit_namespace_warns_once_per_template_with_its_path() -> None:
    decision = decide(pytorchjob("ml-audit", _template(gpu("m")), _template(gpu("m"))))
    assert decision.allowed
    assert [w.split(":")[0] for w in decision.warnings] == [
        "spec.pytorchReplicaSpecs.Master.template.spec.containers[0].resources.limits[nvidia.com/gpu]",
        "spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].resources.limits[nvidia.com/gpu]",
    ]


def test_on_update_only_a_role_that_gains_a_gpu_is_denied() -> None:
    old = pytorchjob("gpu-e2e", _template(gpu("m")), _template(container("w")))
    new = copy.deepcopy(old)
    new["spec"]["pytorchReplicaSpecs"]["Worker"]["template"] = _template(gpu("w"))
    decision = decide(new, operation="UPDATE", old=old)
    assert not decision.allowed
    assert "Worker.template.spec.containers[0]" in decision.message
    assert "Master" not in decision.message.split("Remove the resources")[0]
    same = decide(old, operation="UPDATE", old=old)
    assert same.allowed and any("predates the gpu-mode=dra-only label" in w for w in same.warnings)


def test_dra_claims_in_every_template_are_allowed() -> None:
    claims = {"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]}
    worker = _template(container("w", claims=("gpu",)), **claims)
    assert decide(raycluster("gpu-e2e", worker)).allowed


def test_translate_workloads_rewrites_every_template_of_a_custom_resource() -> None:
    policy = policy_from("translation: {translateWorkloads: true}")
    job = pytorchjob("ml-research", _template(gpu("m", "1")), _template(gpu("w", "2")))
    decision = decide(job, Endpoint.MUTATE, policy=policy)
    assert decision.allowed and decision.patch, decision.message
    patched = jsonpatch.apply_patch(job, list(decision.patch))
    for role, count in (("Master", 1), ("Worker", 2)):
        spec = patched["spec"]["pytorchReplicaSpecs"][role]["template"]["spec"]
        assert "limits" not in spec["containers"][0]["resources"]
        (entry,) = spec["resourceClaims"]
        assert spec["containers"][0]["resources"]["claims"] == [{"name": entry["name"]}]
        assert f"-{count}" in entry["resourceClaimTemplateName"]
    assert len({t["metadata"]["name"] for t in decision.templates}) == 2


def test_without_translate_workloads_a_translate_namespace_validates_every_template() -> None:
    job = raycluster("ml-research", _template(gpu("w", "2")))
    mutated = decide(job, Endpoint.MUTATE)
    assert mutated.allowed and not mutated.patch
    decision = decide(job)
    assert decision.allowed
    assert any(
        "container w: nvidia.com/gpu: 2 becomes a DRA claim" in w for w in decision.warnings
    ), decision.warnings


@pytest.mark.parametrize(
    ("ns", "allowed", "text"),
    [
        ("gpu-e2e", False, "dra-webhook cannot rewrite these"),
        ("ml-research", False, "asks for GPUs where dra-webhook cannot rewrite them"),
        ("ml-audit", True, "would be denied in a dra-only namespace"),
    ],
)
def test_a_trainjobs_resources_per_node_is_reported_in_every_mode(
    ns: str, allowed: bool, text: str
) -> None:
    decision = decide(trainjob(ns))
    assert decision.allowed is allowed
    said = decision.message if not allowed else " ".join(decision.warnings)
    assert "spec.trainer.resourcesPerNode.limits[nvidia.com/gpu]: nvidia.com/gpu: 4" in said
    assert text in said


def test_a_zero_count_in_an_operator_field_is_no_request() -> None:
    assert decide(trainjob("gpu-e2e", "0")).allowed


QUOTA = """
quotas:
  - name: small
    namespaceSelector: {matchLabels: {team: small}}
    action: deny
    maxDevicesPerNamespace: {gpu.nvidia.com: 16}
"""


def test_a_quota_counts_every_role_of_a_pytorchjob_with_its_replicas() -> None:
    four = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "four", "namespace": "small"},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "gpu",
                            "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 4},
                        }
                    ]
                }
            }
        },
    }
    claims = {"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "four"}]}
    template = _template(container("t", claims=("gpu",)), **claims)
    objects = [*DEMO_NAMESPACES, namespace("small", "dra-only", team="small"), four]
    decision = decide(
        pytorchjob("small", template, template), objects=objects, policy=policy_from(QUOTA)
    )
    assert not decision.allowed
    assert (
        "PyTorchJob bert needs spec.pytorchReplicaSpecs.Master.template.spec: 1 replica x 4 + "
        "spec.pytorchReplicaSpecs.Worker.template.spec: 8 replicas x 4 = 36 devices of "
        "gpu.nvidia.com; namespace small allows 16, 0 in use"
    ) in decision.message


WORKLOAD_KINDS = """
workloadKinds:
  - group: example.com
    kind: TrainingRun
    podSpecs:
      - path: spec.roles.*.template.spec
        pods: [spec.roles.*.replicas]
"""


def test_a_kind_the_admin_adds_is_routed_and_judged_like_a_deployment() -> None:
    run = {
        "apiVersion": "example.com/v1",
        "kind": "TrainingRun",
        "metadata": {"name": "r", "namespace": "gpu-e2e"},
        "spec": {"roles": {"trainer": {"replicas": 2, "template": _template(gpu("t"))}}},
    }
    assert decide(run).allowed  # not in the shipped catalogue: not routed to any check
    decision = decide(run, policy=policy_from(WORKLOAD_KINDS))
    assert not decision.allowed
    assert "- spec.roles.trainer.template.spec.containers[0].resources.limits[nvidia.com/gpu]" in (
        decision.message
    )


@pytest.mark.parametrize(
    ("entry", "error"),
    [
        ("{group: x.io, kind: K, podSpecs: [{path: '*.spec'}]}", r"workloadKinds\[0\].podSpecs\[0\].path: .*must start with a field name"),
        ("{group: x.io, kind: K, podSpecs: [{path: spec, replicas: 2}]}", r"workloadKinds\[0\].podSpecs\[0\].replicas: unknown key"),
        ("{group: x.io, podSpecs: []}", r"workloadKinds\[0\].kind: must be a kind name"),
        ("{group: x.io, kind: K, fields: [{path: spec.gpu, form: nameQuantity}]}", r"workloadKinds\[0\].fields\[0\].why: must say why"),
        ("{group: x.io, kind: K, podSpecs: [{path: 'spec.a[].spec', pods: ['spec.a[].b[].n']}]}", r"more wildcards than the pod spec's path"),
    ],
)  # fmt: skip
def test_a_bad_workload_kind_stops_the_pipeline_naming_its_key(entry: str, error: str) -> None:
    with pytest.raises(PolicyError, match=error):
        make_pipeline(None, policy_from(f"workloadKinds: [{entry}]"))


PER_CLAIM = """
quotas:
  - name: small
    namespaceSelector: {matchLabels: {team: research}}
    action: deny
    maxDevicesPerClaim: {gpu.nvidia.com: 2}
translation: {translateWorkloads: true}
"""


@pytest.mark.parametrize("kind", ["Pod", "PyTorchJob"])
def test_translation_over_a_per_claim_quota_is_denied_at_mutation_with_no_template(
    kind: str,
) -> None:
    """The templates translation would create are over the per-claim limit, so the mutating
    answer is the quota's denial and creates none."""
    if kind == "Pod":
        obj: Obj = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ml-research"},
            "spec": {"containers": [gpu("cuda")]},
        }
    else:
        obj = pytorchjob("ml-research", _template(gpu("m", "1")), _template(gpu("w")))
    objects = [
        *(n for n in DEMO_NAMESPACES if n["metadata"]["name"] != "ml-research"),
        namespace("ml-research", "translate", team="research"),
    ]
    decision = decide(obj, Endpoint.MUTATE, objects=objects, policy=policy_from(PER_CLAIM))
    assert not decision.allowed and decision.denied_by == ("translate-quota",)
    assert not decision.templates and not decision.patch
    assert (
        "asks for nvidia.com/gpu: 4, which translation turns into a claim for 4 devices of "
        "gpu.nvidia.com; at most 2 per claim (quota small)"
    ) in decision.message
