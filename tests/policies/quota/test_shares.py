"""Capacity quotas (`maxCapacityPerClaim`, `maxCapacityPerNamespace`) on claims, translated
shares and workloads' pods, counted after the devices' requestPolicy rounding."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.pipeline import Endpoint, Pipeline
from tests.helpers import namespace, policy_from
from tests.sharing_objects import NS, SHARED, container, decide, pipeline, pod

Obj = dict[str, Any]


QUOTA = """
quotas:
  - name: research
    namespaceSelector: {matchLabels: {team: research}}
    action: ACTION
    maxCapacityPerClaim: {gpu-shared.nvidia.com: {memory: 10Gi}, "*": {memory: 30Gi}}
    maxCapacityPerNamespace: {gpu-shared.nvidia.com: {memory: 16Gi}}
"""


def quota_pipeline(action: str = "deny", objects: list[Obj] | None = None) -> Pipeline:
    research = namespace(NS, "translate", team="research")
    return pipeline(policy_from(QUOTA.replace("ACTION", action)), [research, *(objects or [])])


def share_claim(name: str, memory: str, count: int = 1, device_class: str = SHARED) -> Obj:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "exactly": {
                            "deviceClassName": device_class,
                            "count": count,
                            "capacity": {"requests": {"memory": memory}},
                        },
                    }
                ]
            }
        },
    }


def test_a_claim_over_the_per_claim_capacity_is_denied_with_the_rounding_in_the_arithmetic() -> (
    None
):
    decision = decide(quota_pipeline(), share_claim("c", "4000Mi", count=3), Endpoint.VALIDATE)
    assert not decision.allowed
    assert (
        "ResourceClaim c asks for 3 x 4000Mi (counted 4Gi: the devices' requestPolicy) of memory "
        "of gpu-shared.nvidia.com = 12Gi; at most 10Gi per claim (quota research)"
    ) in decision.message


def test_rounding_applies_only_when_the_class_devices_agree_on_the_policy() -> None:
    """4 x 2500Mi is 10000Mi as written, under 10Gi; rounded up to 3Gi each it is 12Gi."""
    rounded = decide(quota_pipeline(), share_claim("c", "2500Mi", count=4), Endpoint.VALIDATE)
    assert not rounded.allowed
    assert "4 x 2500Mi (counted 3Gi: the devices' requestPolicy)" in rounded.message
    disagree = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "node-c"},
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": "node-c",
            "pool": {"name": "node-c", "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {
                    "name": "gpu-0",
                    "allowMultipleAllocations": True,
                    "capacity": {"memory": {"value": "80Gi"}},
                }
            ],
        },
    }
    p = quota_pipeline(objects=[disagree])
    assert decide(p, share_claim("c", "2500Mi", count=4), Endpoint.VALIDATE).allowed


def test_valid_values_round_up_for_the_class_of_those_devices() -> None:
    decision = decide(
        quota_pipeline(),
        share_claim("c", "11Gi", count=2, device_class="shared.example.com"),
        Endpoint.VALIDATE,
    )
    assert not decision.allowed
    assert "2 x 11Gi (counted 20Gi: the devices' requestPolicy)" in decision.message
    assert "= 40Gi; at most 30Gi per claim" in decision.message


def test_the_namespace_capacity_counts_existing_claims() -> None:
    existing = share_claim("old", "8Gi")
    p = quota_pipeline(objects=[existing])
    decision = decide(p, share_claim("new", "9Gi"), Endpoint.VALIDATE)
    assert not decision.allowed
    assert "namespace ml-research allows 16Gi, 8Gi in use" in decision.message
    assert decide(p, share_claim("small", "8Gi"), Endpoint.VALIDATE).allowed


def test_a_deployment_of_hami_pods_is_checked_against_the_namespace_capacity() -> None:
    p = quota_pipeline()
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "infer", "namespace": NS},
        "spec": {
            "replicas": 5,
            "template": {
                "spec": {
                    "containers": [
                        container("cuda", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3500"})
                    ]
                }
            },
        },
    }
    decision = decide(p, deployment, Endpoint.VALIDATE)
    assert not decision.allowed
    assert (
        "Deployment infer needs 5 pods x 1 x 3500Mi (counted 4Gi: the devices' requestPolicy) "
        "of memory of gpu-shared.nvidia.com = 20Gi (5 replicas); namespace ml-research allows "
        "16Gi, 0 in use (quota research)"
    ) in decision.message
    warned = quota_pipeline("warn")
    decision = decide(warned, deployment, Endpoint.VALIDATE)
    assert decision.allowed and any("allows 16Gi" in w for w in decision.warnings)


def test_a_translated_share_over_the_per_claim_capacity_is_denied_naming_the_legacy_request() -> (
    None
):
    p = quota_pipeline()
    obj = pod(container("cuda", {"nvidia.com/gpu": "3", "nvidia.com/gpumem": "4k"}))
    decision = decide(p, obj, Endpoint.VALIDATE)
    assert not decision.allowed
    assert "container cuda asks for nvidia.com/gpu: 3, nvidia.com/gpumem: 4k" in decision.message
    assert "= 12Gi; at most 10Gi per claim" in decision.message


@pytest.mark.parametrize("amount", ["-1Gi", "0", "lots", True])
def test_a_bad_capacity_request_is_denied_with_its_field_path_where_a_capacity_quota_applies(
    amount: Any,
) -> None:
    decision = decide(quota_pipeline(), share_claim("c", amount), Endpoint.VALIDATE)
    assert not decision.allowed
    assert "spec.devices.requests[0].exactly.capacity.requests[memory]" in decision.message


@settings(max_examples=150, deadline=None)
@given(
    st.one_of(
        st.dictionaries(
            st.one_of(st.text(max_size=8), st.sampled_from(["memory", "gpu.nvidia.com/memory"])),
            st.one_of(
                st.text(max_size=8),
                st.integers(-5, 10**12),
                st.floats(allow_nan=True),
                st.booleans(),
                st.none(),
                st.lists(st.integers(-100, 100), max_size=2),
                st.sampled_from(["4Gi", "4000Mi", "1e3", "-1", "0.5", "10Gi"]),
            ),
            max_size=3,
        ),
        st.none(),
        st.text(max_size=5),
        st.lists(st.integers(-100, 100), max_size=2),
    )
)
def test_any_capacity_requests_are_counted_or_denied_with_a_path_never_an_error(
    requests: Any,
) -> None:
    obj = share_claim("c", "1Gi")
    obj["spec"]["devices"]["requests"][0]["exactly"]["capacity"] = {"requests": requests}
    decision = decide(_fuzz_quota(), obj, Endpoint.VALIDATE)
    assert decision.code in (200, 403, 422), decision.message  # 422: invalid, with the path
    if not decision.allowed:
        assert "spec.devices.requests[0].exactly" in decision.message


_FUZZ_QUOTA: list[Pipeline] = []


def _fuzz_quota() -> Pipeline:
    if not _FUZZ_QUOTA:
        _FUZZ_QUOTA.append(quota_pipeline())
    return _FUZZ_QUOTA[0]
