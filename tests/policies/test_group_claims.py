"""Group claims (app.policies.groups): a Workload's or PodGroup's `resourceClaims` judged like a
pod's claims, once for the group: the DeviceClass allow-list, quota (not once per pod of the
group) and satisfiability; the pods that share the group's claim are not charged again."""

from __future__ import annotations

import copy
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from app.cluster.view import Kind
from app.pipeline import Decision, Endpoint, Pipeline
from app.transport.review import decode_review
from tests.claim_objects import exact, template
from tests.helpers import json_paths, make_pipeline, namespace, policy_from, review, wrap
from tests.policies.selector_objects import device_class, resource_slice

Obj = dict[str, Any]
NS = "ml-team"
GPU, AMD = "gpu.nvidia.com", "gpu.amd.com"

POLICY = """
deviceClasses:
  - name: team
    namespaceSelector: {matchLabels: {team: ml}}
    allowed: [gpu.nvidia.com]
quotas:
  - name: team
    namespaceSelector: {matchLabels: {team: ml}}
    action: deny
    maxDevicesPerNamespace: {gpu.nvidia.com: 6}
    maxClaimsPerNamespace: 10
cel:
  selectors:
    unsatisfiable: deny
"""


def _group_claim(name: str, *, template_name: str | None = None, claim: str | None = None) -> Obj:
    entry: Obj = {"name": name}
    if template_name is not None:
        entry["resourceClaimTemplateName"] = template_name
    if claim is not None:
        entry["resourceClaimName"] = claim
    return entry


def pod_group(name: str, *claims: Obj) -> Obj:
    return {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 4}}, "resourceClaims": list(claims)},
    }


def workload(name: str, *claims: Obj) -> Obj:
    return {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "Workload",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "podGroupTemplates": [
                {
                    "name": "workers",
                    "schedulingPolicy": {"gang": {"minCount": 4}},
                    "resourceClaims": list(claims),
                }
            ]
        },
    }


def pod(name: str, group: str | None, *entries: Obj) -> Obj:
    spec: Obj = {
        "resourceClaims": list(entries),
        "containers": [
            {
                "name": "train",
                "image": "trainer",
                "resources": {"claims": [{"name": e["name"]} for e in entries]},
            }
        ],
    }
    if group is not None:
        spec["schedulingGroup"] = {"podGroupName": group}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": spec,
    }


def cluster(*extra: Obj) -> list[Obj]:
    return [
        namespace(NS, team="ml"),
        device_class(GPU),
        device_class(AMD),
        resource_slice("node-a", *["80Gi"] * 4),
        resource_slice("node-b", *["80Gi"] * 4)
        | {"metadata": {"name": "node-b-gpu", "resourceVersion": "1"}},
        template("four-gpus", exact(count=4), namespace=NS),
        template("two-gpus", exact(count=2), namespace=NS),
        template("amd", exact(device_class=AMD), namespace=NS),
        template("sixteen", exact(count=16), namespace=NS),
        *extra,
    ]


def _pipeline(*extra: Obj, policy: str = POLICY) -> Pipeline:
    return make_pipeline(cluster(*extra), policy_from(policy))


def decide(pipeline: Pipeline, obj: Obj) -> Decision:
    return pipeline.review(Endpoint.VALIDATE, decode_review(orjson.dumps(wrap(obj))))


# -- DeviceClass allow-list ---------------------------------------------------------------------


def test_a_pod_group_whose_group_claim_names_a_template_of_a_class_the_namespace_may_not_use_is_denied() -> (
    None
):
    decision = decide(_pipeline(), pod_group("trainer", _group_claim("gpus", template_name="amd")))
    assert not decision.allowed
    assert (
        "spec.resourceClaims[0].resourceClaimTemplateName: group claim gpus: " in decision.message
    )
    assert "ResourceClaimTemplate amd" in decision.message
    assert f"DeviceClass {AMD}, which namespace {NS} may not use" in decision.message


def test_a_workload_is_denied_at_the_pod_group_template_that_names_the_class() -> None:
    decision = decide(_pipeline(), workload("trainer", _group_claim("gpus", template_name="amd")))
    assert not decision.allowed
    path = "spec.podGroupTemplates[0].resourceClaims[0].resourceClaimTemplateName"
    assert f"{path}: group claim gpus" in decision.message


def test_a_group_claim_of_an_allowed_class_is_allowed() -> None:
    decision = decide(
        _pipeline(), pod_group("trainer", _group_claim("gpus", template_name="two-gpus"))
    )
    assert decision.allowed, decision.message


# -- quota: once per group claim ----------------------------------------------------------------


def test_a_group_claim_is_charged_once_for_the_group_against_the_namespace_limit() -> None:
    existing = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "held", "namespace": NS},
        "spec": {"devices": {"requests": [exact(count=4)]}},
    }
    decision = decide(
        _pipeline(existing), pod_group("trainer", _group_claim("gpus", template_name="four-gpus"))
    )
    assert not decision.allowed
    assert (
        "spec.resourceClaims[0].resourceClaimTemplateName: PodGroup trainer needs group claim gpus "
        "(template four-gpus): 4 = 4 devices of gpu.nvidia.com, once for the group (its pods "
        f"share the claim); namespace {NS} allows 6, 4 in use (quota team)"
    ) in decision.message


def test_a_group_within_the_limit_is_allowed_however_many_pods_the_group_has() -> None:
    decision = decide(
        _pipeline(), pod_group("trainer", _group_claim("gpus", template_name="four-gpus"))
    )
    assert decision.allowed, decision.message


def test_a_workload_is_charged_for_each_pod_group_made_from_its_template() -> None:
    decision = decide(
        _pipeline(),
        workload(
            "trainer",
            _group_claim("a", template_name="four-gpus"),
            _group_claim("b", template_name="four-gpus"),
        ),
    )
    assert not decision.allowed
    assert "= 8 devices of gpu.nvidia.com for each PodGroup made from it" in decision.message


def test_a_group_claim_naming_an_existing_claim_adds_nothing_to_the_namespace() -> None:
    decision = decide(_pipeline(), pod_group("trainer", _group_claim("gpus", claim="not-made-yet")))
    assert decision.allowed


def _group_in_view() -> Obj:
    stored = pod_group("trainer", _group_claim("gpus", template_name="four-gpus"))
    stored["metadata"]["resourceVersion"] = "7"
    return stored


def test_a_pod_that_uses_its_groups_claim_is_not_charged_for_it_again() -> None:
    pipeline = _pipeline(
        _group_in_view(), policy=POLICY.replace("gpu.nvidia.com: 6", "gpu.nvidia.com: 2")
    )
    member = pod("worker-0", "trainer", {"name": "gpus", "resourceClaimTemplateName": "four-gpus"})
    decision = decide(pipeline, member)
    assert decision.allowed, decision.message


def test_a_pod_entry_that_differs_from_its_groups_claim_is_its_own_and_charged() -> None:
    pipeline = _pipeline(
        _group_in_view(), policy=POLICY.replace("gpu.nvidia.com: 6", "gpu.nvidia.com: 2")
    )
    renamed = pod("worker-0", "trainer", {"name": "mine", "resourceClaimTemplateName": "four-gpus"})
    outsider = pod("worker-1", None, {"name": "gpus", "resourceClaimTemplateName": "four-gpus"})
    for member in (renamed, outsider):
        decision = decide(pipeline, member)
        assert not decision.allowed
        assert "namespace ml-team allows 2" in decision.message


def test_a_pod_whose_pod_group_the_view_does_not_hold_is_charged_as_before() -> None:
    pipeline = _pipeline(policy=POLICY.replace("gpu.nvidia.com: 6", "gpu.nvidia.com: 2"))
    member = pod("worker-0", "trainer", {"name": "gpus", "resourceClaimTemplateName": "four-gpus"})
    assert not decide(pipeline, member).allowed
    assert pipeline.view.get(Kind.POD_GROUP, "trainer", NS) is None


# -- satisfiability -----------------------------------------------------------------------------


def test_a_group_claim_no_node_can_satisfy_is_answered_as_a_pods_claims_are() -> None:
    decision = decide(
        _pipeline(), pod_group("trainer", _group_claim("gpus", template_name="sixteen"))
    )
    assert not decision.allowed
    assert (
        "no node in the cluster can satisfy the claims of group claim gpus of PodGroup trainer"
        in (decision.message)
    )
    assert "spec.resourceClaims[0].resourceClaimTemplateName (template sixteen)" in decision.message


def test_a_pods_group_claim_is_left_out_of_the_pods_joint_check() -> None:
    pipeline = _pipeline(
        _group_in_view(),
        policy="cel:\n  selectors:\n    unsatisfiable: deny\n",
    )
    both = pod(
        "worker-0",
        "trainer",
        {"name": "gpus", "resourceClaimTemplateName": "four-gpus"},
        {"name": "own", "resourceClaimTemplateName": "two-gpus"},
    )
    assert decide(pipeline, both).allowed  # 4 + 2 on one 4-GPU node: never, were both the pod's
    alone = copy.deepcopy(both)
    del alone["spec"]["schedulingGroup"]
    assert not decide(pipeline, alone).allowed


# -- odd shapes ---------------------------------------------------------------------------------


def test_a_malformed_group_claim_is_denied_with_its_field_path() -> None:
    odd = pod_group("trainer", {"name": "gpus", "resourceClaimTemplateName": ["amd"]})
    decision = decide(_pipeline(), odd)
    assert not decision.allowed
    assert decision.code == 422
    assert "spec.resourceClaims[0].resourceClaimTemplateName: must be a string" in decision.message


def test_the_captured_workload_and_pod_group_are_judged_by_the_group_checks() -> None:
    pipeline = _pipeline()
    for name in ("workload-create-with-resourceclaims", "podgroup-create-with-resourceclaims"):
        body = review(name, namespace=NS)
        decision = pipeline.review(Endpoint.VALIDATE, decode_review(orjson.dumps(body)))
        assert decision.allowed, decision.message
        assert {"device-classes", "claim-quota", "group-satisfiability"} <= set(decision.policies)


_ODD = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.text(max_size=4),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=8,
)


@settings(max_examples=150, deadline=None)
@given(
    data=st.data(),
    kind=st.sampled_from(
        ["workload-create-with-resourceclaims", "podgroup-create-with-resourceclaims"]
    ),
)
def test_odd_workload_and_pod_group_shapes_never_crash_and_a_denial_names_the_field(
    data: st.DataObject, kind: str
) -> None:
    body = review(kind, namespace=NS)
    obj = body["request"]["object"]
    paths = [p for p in json_paths(obj["spec"], ("spec",))]
    path = data.draw(st.sampled_from(paths))
    node: Any = obj
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = data.draw(_ODD)
    decision = _FUZZ.review(Endpoint.VALIDATE, decode_review(orjson.dumps(body)))
    assert not decision.failed_checks
    if not decision.allowed:
        assert decision.code in (403, 422)
        assert "spec" in decision.message


_FUZZ = _pipeline()
