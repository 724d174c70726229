"""Quota foresight for names a DeviceClass maps (app/policies/quota/demand.py): a pod asking for
`nvidia.com/gpu` that the scheduler serves from gpu.nvidia.com holds one claim of that class,
which ResourceQuota charges to `gpu.nvidia.com.deviceclass.resource.k8s.io/devices`; a workload
is refused before its pods exist, with the arithmetic."""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers import policy_from
from tests.policies.mapped_objects import (
    CLASS,
    IMPLICIT,
    container,
    deployment,
    held,
    pipeline,
    pod,
    review,
)

Obj = dict[str, Any]
DEVICES = f"{CLASS}.deviceclass.resource.k8s.io/devices"
SERVED = "(nvidia.com/gpu: the scheduler serves it from this class)"


def resource_quota(ns: str, hard: int, used: int = 0) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "gpus", "namespace": ns},
        "spec": {"hard": {DEVICES: str(hard)}},
        "status": {"hard": {DEVICES: str(hard)}, "used": {DEVICES: str(used)}},
    }


QUOTAS = """
quotas:
  - name: team
    namespaceSelector: {matchLabels: {team: quota}}
    maxDevicesPerRequest: {gpu.nvidia.com: 4}
    maxDevicesPerClaim: {gpu.nvidia.com: 6}
    maxDevicesPerNamespace: {gpu.nvidia.com: 8}
    maxClaimsPerNamespace: 3
"""


@pytest.mark.parametrize(
    ("ns", "denied"),
    [
        pytest.param("ml-audit", True, id="audit: the pods will ask the scheduler"),
        pytest.param("default", True, id="no mode: the same"),
        pytest.param("gpu-e2e", False, id="dra-only denies the name itself (dra-only's denial)"),
    ],
)
def test_a_deployment_over_a_class_resource_quota_counted_with_mapped_pods_is_denied(
    ns: str, denied: bool
) -> None:
    where = pipeline(resource_quota(ns, 4, used=1))
    decision = review(where, deployment(ns, 2, container("cuda", 2)))
    message = (
        f"- spec.template.spec: Deployment trainer needs 2 replicas x 2 devices of {CLASS} = 4 "
        f"{SERVED}; ResourceQuota gpus allows 4 ({DEVICES}), 1 in use"
    )
    assert (message in decision.message) is denied, decision.message


def test_with_mapped_names_allowed_in_dra_only_the_quota_counts_them() -> None:
    where = pipeline(
        resource_quota("gpu-e2e", 4, used=1), policy=policy_from("draOnly: {mappedNames: allow}")
    )
    decision = review(where, deployment("gpu-e2e", 2, container("cuda", 2)))
    assert not decision.allowed
    assert decision.denied_by == ("claim-quota",)
    assert f"= 4 {SERVED}; ResourceQuota gpus allows 4" in decision.message


def test_a_translated_pods_claims_are_counted_once() -> None:
    where = pipeline(resource_quota("ml-research", 4))
    decision = review(where, deployment("ml-research", 2, container("cuda", 2)))
    assert decision.allowed, decision.message
    decision = review(where, deployment("ml-research", 3, container("cuda", 2)))
    assert "needs 3 replicas x 2 devices of gpu.nvidia.com = 6; ResourceQuota" in (decision.message)
    assert SERVED not in decision.message


def test_the_policys_limits_apply_to_the_claim_the_scheduler_makes() -> None:
    where = pipeline(held("one", "ml-quota", "node-a", 3), policy=policy_from(QUOTAS))
    obj = deployment("ml-quota", 1, container("cuda", 5), container("side", 2, IMPLICIT))
    decision = review(where, obj)
    assert not decision.allowed
    path = "spec.template.spec.containers"
    assert (
        f"- {path}[0].resources.limits[nvidia.com/gpu]: nvidia.com/gpu: 5 is a request for 5 "
        "devices of gpu.nvidia.com in the claim the scheduler makes; at most 4 per request "
        "(quota team)"
    ) in decision.message
    assert (
        f"- spec.template.spec: the claim the scheduler makes for nvidia.com/gpu, {IMPLICIT} "
        "holds 7 devices of gpu.nvidia.com; at most 6 per claim (quota team)"
    ) in decision.message
    assert (
        "Deployment trainer needs 1 replica x 7 devices of gpu.nvidia.com = 7 (nvidia.com/gpu, "
        f"{IMPLICIT}: the scheduler serves them from this class); namespace ml-quota allows 8, "
        "3 in use (quota team)"
    ) in decision.message


def test_a_pod_is_one_claim_towards_the_namespaces_claim_limit() -> None:
    claims = [held(f"c{i}", "ml-quota", "node-b", 1) for i in range(3)]
    where = pipeline(*claims, policy=policy_from(QUOTAS))
    decision = review(where, pod("ml-quota", container("cuda", 1)))
    assert not decision.allowed
    assert (
        "Pod trainer makes 1 pod x 1 ResourceClaims = 1; namespace ml-quota allows 3, 3 in use"
        in decision.message
    )


def test_a_pod_a_controller_makes_is_not_charged_again() -> None:
    where = pipeline(resource_quota("ml-audit", 1, used=1))
    obj = pod("ml-audit", container("cuda", 2))
    obj["metadata"]["ownerReferences"] = [
        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "t", "uid": "u", "controller": True}
    ]
    assert review(where, obj).allowed
    del obj["metadata"]["ownerReferences"]
    assert not review(where, obj).allowed


def test_an_update_charges_only_what_it_adds() -> None:
    where = pipeline(resource_quota("ml-audit", 8, used=4))
    two = deployment("ml-audit", 2, container("cuda", 2))
    four = deployment("ml-audit", 4, container("cuda", 2))
    six = deployment("ml-audit", 6, container("cuda", 2))
    assert review(where, four, operation="UPDATE", old=two).allowed
    decision = review(where, six, operation="UPDATE", old=two)
    assert "= 12 (nvidia.com/gpu: the scheduler serves it from this class) (4 before this " in (
        decision.message
    )
