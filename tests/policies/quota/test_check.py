"""Claim quotas on claims and templates (a, b): per request, per claim, per namespace, and
the claim count; a malformed object is denied with its field path."""

from __future__ import annotations

import pytest

from app.cluster.view import Kind
from app.pipeline import Pipeline
from tests.claim_objects import GPU, claim, cluster_objects, exact, first, sub, template, workload
from tests.helpers import make_pipeline, policy_from
from tests.policies.quota.helpers import RESEARCH, Obj, decide, research_policy

# -- the scenario of the issue: 12 devices in use, limit 16 --------------------------------


def test_a_claim_for_4_fits_the_16_allowed_with_12_in_use(research: Pipeline) -> None:
    decision = decide(research, claim("four", exact(count=4)))
    assert decision.allowed, decision.message
    # No quota warning. The one warning is the satisfiability check's: the test cluster's nodes
    # have 2 GPUs each, and the scheduler allocates a claim's devices on one node.
    assert decision.warnings == (
        "spec.devices.requests[0]: asks for 4 devices on one node; the most on any node is 2 "
        "(node-a, node-b)",
    )


def test_a_claim_for_5_is_denied_with_the_arithmetic(research: Pipeline) -> None:
    decision = decide(research, claim("five", exact(count=5)))
    assert not decision.allowed
    assert decision.code == 403
    assert decision.reason == "Forbidden"
    assert decision.denied_by == ("claim-quota",)
    assert (
        "spec.devices: ResourceClaim five needs 5 devices of gpu.nvidia.com; namespace "
        "ml-research allows 16, 12 in use (quota research)" in decision.message
    )


def test_deleting_a_claim_frees_its_devices_for_the_next_one(research: Pipeline) -> None:
    assert not decide(research, claim("five", exact(count=5))).allowed
    research.view.remove(
        Kind.RESOURCE_CLAIM, {"metadata": {"name": "train-b", "namespace": "ml-research"}}
    )
    assert decide(research, claim("five", exact(count=5))).allowed


# -- a. ResourceClaim CREATE ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("requests", "allowed", "expected"),
    [
        pytest.param([exact(count=4)], True, "", id="within-every-limit"),
        pytest.param(
            [exact(device_class="gpu.example.com", count=9)],
            False,
            "spec.devices.requests[0]: request gpu asks for 9 devices of gpu.example.com; "
            "at most 8 per request (quota research)",
            id="per-request-star",
        ),
        pytest.param(
            [exact("a", count=2), exact("b", count=2)],
            True,
            "",
            id="two-requests-within",
        ),
        pytest.param(
            [exact("a", count=1), first("b", sub("x", count=3), sub("y", count=1))],
            True,
            "",
            id="first-available-largest-fits",
        ),
        pytest.param(
            [first("b", sub("x", count=5), sub("y", count=1))],
            False,
            "ResourceClaim c needs 5 devices of gpu.nvidia.com; namespace ml-research allows 16, "
            "12 in use",
            id="first-available-largest-counts",
        ),
        pytest.param(
            [exact(mode="All")],
            False,
            "spec.devices.requests[0]: request gpu asks for all devices of gpu.nvidia.com "
            "(allocationMode: All), an unbounded count where 8 are allowed per request",
            id="all-denied-where-a-limit-applies",
        ),
        pytest.param(
            [exact(count=2, adminAccess=True), exact("b", count=3)],
            False,
            "ResourceClaim c needs 5 devices of gpu.nvidia.com",
            id="admin-access-counts",
        ),
    ],
)
def test_claim_create_limits(
    research: Pipeline, requests: list[Obj], allowed: bool, expected: str
) -> None:
    decision = decide(research, claim("c", *requests))
    assert decision.allowed is allowed, decision.message
    assert expected in decision.message


def test_a_claim_over_the_per_claim_limit_is_denied_in_an_empty_namespace() -> None:
    objects = [o for o in cluster_objects() if o["kind"] != "ResourceClaim"]
    pipeline = make_pipeline(objects, research_policy())
    decision = decide(pipeline, claim("big", exact("a", count=5), exact("b", count=4)))
    assert not decision.allowed
    assert (
        "spec.devices.requests: ResourceClaim big asks for 9 devices of gpu.nvidia.com; "
        "at most 8 per claim (quota research)" in decision.message
    )
    assert "namespace ml-research allows 16" not in decision.message


def test_all_is_allowed_where_the_entry_allows_it() -> None:
    policy = policy_from(RESEARCH.replace("ACTION", "deny") + "    allowAllocationModeAll: true\n")
    pipeline = make_pipeline(cluster_objects(), policy)
    assert decide(pipeline, claim("all", exact(mode="All"))).allowed


def test_the_claim_count_limit_is_enforced() -> None:
    policy = policy_from(
        RESEARCH.replace("ACTION", "deny").replace("Namespace: 10", "Namespace: 3")
    )
    pipeline = make_pipeline(cluster_objects(), policy)
    decision = decide(pipeline, claim("one-more", exact()))
    assert not decision.allowed
    assert (
        "metadata: ResourceClaim one-more would be one claim too many: namespace ml-research "
        "allows 3 ResourceClaims, 3 in use (quota research)" in decision.message
    )


def test_a_namespace_no_entry_selects_is_not_limited(research: Pipeline) -> None:
    decision = decide(research, claim("huge", exact(count=64), namespace="open-lab"))
    assert decision.allowed
    assert not any("quota" in w for w in decision.warnings)  # (the CEL check may warn: 4 GPUs)


def test_a_claim_update_is_not_counted_again(research: Pipeline) -> None:
    # 12 of 16 in use: 5 more would not fit as a new claim, so only not counting it again passes
    old = claim("train-b", exact(count=5))
    assert not decide(research, old).allowed
    assert decide(research, old, operation="UPDATE", old=old).allowed


# -- b. ResourceClaimTemplate CREATE ---------------------------------------------------------


@pytest.mark.parametrize(
    ("requests", "expected"),
    [
        pytest.param([exact(count=4)], "", id="within"),
        pytest.param(
            [exact(count=9)],
            "spec.spec.devices.requests[0]: request gpu asks for 9 devices of gpu.nvidia.com; "
            "at most 8 per request (quota research)",
            id="per-request",
        ),
        pytest.param(
            [exact("a", count=6), exact("b", count=6)],
            "spec.spec.devices.requests: ResourceClaimTemplate t asks for 12 devices of "
            "gpu.nvidia.com; at most 8 per claim (quota research)",
            id="per-claim",
        ),
        pytest.param(
            [exact(mode="All")],
            "request gpu asks for all devices of gpu.nvidia.com (allocationMode: All)",
            id="all",
        ),
    ],
)
def test_template_create_limits(research: Pipeline, requests: list[Obj], expected: str) -> None:
    decision = decide(research, template("t", *requests))
    assert decision.allowed is (not expected), decision.message
    assert expected in decision.message


def test_a_template_is_not_charged_to_the_namespace_until_pods_use_it(research: Pipeline) -> None:
    # 8 per claim fits; 12 in use + 8 would not, but a template holds no devices by itself.
    assert decide(research, template("t", exact(count=8))).allowed


@pytest.mark.parametrize(
    ("obj", "path"),
    [
        (workload("Deployment", "d", "3", templates=("one-gpu",)), "spec.replicas: must be"),  # type: ignore[arg-type]
        (
            {**workload("Pod", "p"), "spec": {"containers": [], "resourceClaims": [7]}},
            "spec.resourceClaims[0]: must be an object",
        ),
        (
            claim("c", {"name": "gpu", "exactly": {"deviceClassName": GPU, "count": "2"}}),
            "spec.devices.requests[0].exactly.count",
        ),
    ],
)
def test_a_malformed_object_is_denied_with_the_field_path(
    research: Pipeline, obj: Obj, path: str
) -> None:
    decision = decide(research, obj)
    assert not decision.allowed
    assert decision.code == 422
    assert path in decision.message
