"""Group claims read out of Workloads and PodGroups (app.k8s.groups)."""

from __future__ import annotations

from typing import Any

import pytest

from app.errors import ObjectShapeError
from app.k8s.groups import (
    GroupClaim,
    group_claims,
    pod_claim_key,
    pod_group_name,
    stored_group_keys,
)


def _pod_group(*claims: Any) -> dict[str, Any]:
    return {"kind": "PodGroup", "spec": {"resourceClaims": list(claims)}}


def test_a_pod_group_names_its_claims_and_templates_with_their_paths() -> None:
    found = group_claims(
        _pod_group(
            {"name": "gpus", "resourceClaimTemplateName": "two-gpus"},
            {"name": "shared", "resourceClaimName": "fabric"},
        ),
        "PodGroup",
    )
    assert found == [
        GroupClaim("spec.resourceClaims[0]", "gpus", None, "two-gpus"),
        GroupClaim("spec.resourceClaims[1]", "shared", "fabric", None),
    ]
    assert found[0].field == "spec.resourceClaims[0].resourceClaimTemplateName"
    assert found[1].label == "claim fabric"


def test_a_workload_names_the_claims_of_each_pod_group_template_and_nested_composites() -> None:
    workload = {
        "spec": {
            "compositePodGroupTemplates": [
                {
                    "name": "outer",
                    "podGroupTemplates": [
                        {"name": "workers", "resourceClaims": [
                            {"name": "gpus", "resourceClaimTemplateName": "eight"}
                        ]}
                    ],
                }
            ],
        }
    }  # fmt: skip
    (claim,) = group_claims(workload, "Workload")
    assert claim.path == "spec.compositePodGroupTemplates[0].podGroupTemplates[0].resourceClaims[0]"
    assert claim.group_template == "workers"


def test_composite_templates_nested_deeper_than_the_api_allows_are_refused_with_the_path() -> None:
    spec: dict[str, Any] = {"podGroupTemplates": []}
    for _ in range(5):
        spec = {"compositePodGroupTemplates": [spec]}
    with pytest.raises(ObjectShapeError, match="nest at most 4 deep"):
        group_claims({"spec": spec}, "Workload")


@pytest.mark.parametrize(
    ("obj", "path"),
    [
        ({"spec": "x"}, "spec"),
        ({"spec": {"resourceClaims": {}}}, "spec.resourceClaims"),
        ({"spec": {"resourceClaims": ["x"]}}, "spec.resourceClaims[0]"),
        ({"spec": {"resourceClaims": [{"name": 3}]}}, "spec.resourceClaims[0].name"),
        (
            {"spec": {"resourceClaims": [{"name": "a", "resourceClaimName": ["x"]}]}},
            "spec.resourceClaims[0].resourceClaimName",
        ),
        (
            {"spec": {"resourceClaims": [
                {"name": "a", "resourceClaimName": "x", "resourceClaimTemplateName": "y"}
            ]}},
            "spec.resourceClaims[0]",
        ),
    ],
)  # fmt: skip
def test_a_malformed_pod_group_is_refused_at_the_field_that_is_wrong(
    obj: dict[str, Any], path: str
) -> None:
    with pytest.raises(ObjectShapeError) as raised:
        group_claims(obj, "PodGroup")
    assert raised.value.path == path


def test_an_entry_that_names_nothing_and_other_kinds_give_no_claims() -> None:
    assert group_claims(_pod_group({"name": "empty"}), "PodGroup") == []
    assert group_claims(_pod_group({"name": "a", "resourceClaimName": "x"}), "Pod") == []
    assert group_claims({}, "Workload") == []


def test_a_pod_names_its_group_and_its_entries_compare_with_the_groups() -> None:
    assert pod_group_name({"schedulingGroup": {"podGroupName": "trainer"}}) == "trainer"
    assert pod_group_name({"schedulingGroup": "trainer"}) is None
    assert pod_group_name({}) is None
    entry = {"name": "gpus", "resourceClaimTemplateName": "two-gpus"}
    (claim,) = group_claims(_pod_group(entry), "PodGroup")
    assert pod_claim_key(entry) == claim.key
    assert pod_claim_key({"name": "other", "resourceClaimTemplateName": "two-gpus"}) != claim.key
    assert pod_claim_key("x") is None


def test_a_stored_pod_group_that_does_not_parse_shares_no_claims() -> None:
    assert stored_group_keys({"spec": {"resourceClaims": "x"}}) == frozenset()
    assert stored_group_keys(_pod_group({"name": "a", "resourceClaimName": "x"})) == {
        ("a", "x", None)
    }
