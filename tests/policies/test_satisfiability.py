"""Satisfiability as an admission result: a claim or template alone (after its selectors
compile), and a pod's claims checked together (the scheduler allocates them all on one node)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from app.pipeline import Decision, Endpoint, Pipeline
from app.transport.review import decode_review
from tests.allocation.nvidia import CLASSES, allocated_claim, node_slice
from tests.helpers import DEMO_NAMESPACES, make_pipeline, policy_from, wrap
from tests.policies import mapped_objects as mapped
from tests.policies.selector_objects import (
    BACKENDS,
    BIG_GPU_CLUSTER,
    EIGHTY_GI_CLUSTER,
    H100,
    MEMORY_OVER_200GI,
    NET,
    answer,
    claim,
    device_class,
    exactly,
    on,
    request,
    resource_slice,
)

Obj = dict[str, Any]
NS = "gpu-e2e"

# -- one claim or template ----------------------------------------------------------------------


def test_claim_asking_over_200gi_against_80gi_gpus_is_warned_with_the_largest_memory(
    make_app: Any,
) -> None:
    response = answer(
        make_app(EIGHTY_GI_CLUSTER), claim(request(exactly=exactly(MEMORY_OVER_200GI)))
    )
    assert response["allowed"] is True
    (warning,) = response["warnings"]
    assert warning.startswith("spec.devices.requests[0]: asks for 1 device, 0 can match")
    assert "largest gpu.nvidia.com/memory is 80Gi" in warning


def test_same_claim_against_141gi_and_288gi_gpus_passes(make_app: Any) -> None:
    response = answer(make_app(BIG_GPU_CLUSTER), claim(request(exactly=exactly(MEMORY_OVER_200GI))))
    assert response == {"uid": "test-uid", "allowed": True}


def test_unsatisfiable_claim_is_denied_where_the_mode_says_deny(make_app: Any) -> None:
    policy = policy_from("cel:\n  selectors:\n    unsatisfiableByMode: {dra-only: deny}\n")
    harness = make_app(EIGHTY_GI_CLUSTER, policy=policy)
    denied = answer(
        harness, claim(request(exactly=exactly(MEMORY_OVER_200GI)), namespace="gpu-e2e")
    )
    assert denied["allowed"] is False
    assert denied["status"]["code"] == 403
    assert "no device in the cluster can satisfy ResourceClaim big" in denied["status"]["message"]
    assert "largest gpu.nvidia.com/memory is 80Gi" in denied["status"]["message"]
    warned = answer(harness, claim(request(exactly=exactly(MEMORY_OVER_200GI))))
    assert warned["allowed"] is True and warned["warnings"]


def test_checks_can_be_switched_off(make_app: Any) -> None:
    policy = policy_from("cel:\n  selectors:\n    unsatisfiable: 'off'\n")
    response = answer(
        make_app(EIGHTY_GI_CLUSTER, policy=policy),
        claim(request(exactly=exactly(MEMORY_OVER_200GI))),
    )
    assert response == {"uid": "test-uid", "allowed": True}


def test_asking_more_devices_than_match_is_warned_with_the_count(make_app: Any) -> None:
    cluster = [*DEMO_NAMESPACES, device_class(), resource_slice("n", "80Gi", "141Gi")]
    big = 'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("100Gi")) > 0'
    response = answer(make_app(cluster), claim(request(exactly=exactly(big, count=2))))
    (warning,) = response["warnings"]
    assert "asks for 2 devices, 1 can match" in warning
    assert "1 of the 2 devices of class gpu.nvidia.com match" in warning


def test_selectors_that_each_match_but_not_together_are_explained(make_app: Any) -> None:
    cluster = [
        *DEMO_NAMESPACES,
        device_class(),
        resource_slice("a", "80Gi", model="H100"),
        resource_slice("b", "288Gi", model="B300"),
    ]
    response = answer(make_app(cluster), claim(request(exactly=exactly(MEMORY_OVER_200GI, H100))))
    (warning,) = response["warnings"]
    assert "but only 0 match all of them" in warning


def test_first_available_is_fine_when_any_alternative_can_be_satisfied(make_app: Any) -> None:
    harness = make_app(EIGHTY_GI_CLUSTER)
    alternatives = [
        {"name": "big", **exactly(MEMORY_OVER_200GI)},
        {"name": "any", **exactly(H100)},
    ]
    response = answer(harness, claim(request(firstAvailable=alternatives)))
    assert response == {"uid": "test-uid", "allowed": True}
    response = answer(harness, claim(request(firstAvailable=alternatives[:1] * 2)))
    (warning,) = response["warnings"]
    assert "none of its 2 firstAvailable alternatives can be satisfied" in warning


def test_missing_device_class_and_unknown_attribute_are_reported(make_app: Any) -> None:
    harness = make_app(EIGHTY_GI_CLUSTER)
    response = answer(harness, claim(request(exactly=exactly(device_class_name="nope.example"))))
    assert response["warnings"] == [
        "spec.devices.requests[0]: DeviceClass nope.example does not exist"
    ]
    unknown = 'device.attributes["gpu.nvidia.com"].profile == "1g.10gb"'
    response = answer(harness, claim(request(exactly=exactly(unknown))))
    (warning,) = response["warnings"]
    assert "no device has attribute gpu.nvidia.com/profile" in warning


NET_CLASS = device_class(
    "net.example.com",
    f'device.driver == "gpu.nvidia.com" && cidr("10.0.0.0/8").containsIP({NET}.ip)',
)
DENY_IN_DRA_ONLY = "  selectors:\n    unsatisfiableByMode: {dra-only: deny}\n"


@pytest.mark.parametrize("backend", BACKENDS)
def test_satisfiability_is_skipped_with_a_warning_for_a_class_this_engine_cannot_check(
    make_app: Any, backend: str
) -> None:
    cluster = [*EIGHTY_GI_CLUSTER, NET_CLASS]
    harness = make_app(cluster, policy=on(backend, DENY_IN_DRA_ONLY))
    # more than any node has, within the 32 devices a claim may hold (over it, the limit alone
    # says never: tests/allocation/test_limits.py)
    wanted = claim(
        request(exactly=exactly(H100, count=24, device_class_name="net.example.com")),
        namespace="gpu-e2e",
    )
    response = answer(harness, wanted)
    assert response["allowed"] is True, response
    (warning,) = response["warnings"]
    assert warning.startswith("spec.devices.requests[0].exactly: satisfiability not checked: ")
    assert "cidr() is not supported by this webhook's CEL engine" in warning
    assert "in a selector of DeviceClass net.example.com" in warning


@pytest.mark.parametrize("backend", BACKENDS)
def test_satisfiability_is_skipped_for_a_request_selector_this_engine_cannot_check(
    make_app: Any, backend: str
) -> None:
    harness = make_app(EIGHTY_GI_CLUSTER, policy=on(backend, DENY_IN_DRA_ONLY))
    unchecked = f"isIP({NET}.ip)"
    response = answer(
        harness, claim(request(exactly=exactly(unchecked, count=8)), namespace="gpu-e2e")
    )
    assert response["allowed"] is True, response
    (warning,) = response["warnings"]
    assert "not checked: isIP() is not supported" in warning
    # The same count without the unchecked selector is still found unsatisfiable.
    denied = answer(harness, claim(request(exactly=exactly(H100, count=8)), namespace="gpu-e2e"))
    assert denied["allowed"] is False
    assert "asks for 8 devices, 4 can match" in denied["status"]["message"]


# -- a pod's claims together ------------------------------------------------------------------


def _template(name: str, count: int) -> Obj:
    request = {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": count}}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"spec": {"devices": {"requests": [request]}}},
    }


def _claim(name: str, count: int) -> Obj:
    request = {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": count}}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"devices": {"requests": [request]}},
    }


def _pod(*entries: Obj) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "trainer", "namespace": NS},
        "spec": {
            "containers": [{"name": "app", "image": "x"}],
            "resourceClaims": list(entries),
        },
    }


def _pipeline(*extra: Obj, policy: str = "") -> Pipeline:
    objects = [
        *DEMO_NAMESPACES,
        *CLASSES,
        node_slice("node-a"),
        node_slice("node-b"),
        _template("two", 2),
        _claim("named-two", 2),
        *extra,
    ]
    return make_pipeline(objects, policy_from(policy) if policy else None)


def _decide(pipeline: Pipeline, pod: Obj) -> Decision:
    return pipeline.review(Endpoint.VALIDATE, decode_review(orjson.dumps(wrap(pod))))


TWO = {"name": "a", "resourceClaimTemplateName": "two"}
NAMED = {"name": "b", "resourceClaimName": "named-two"}


def test_a_2_gpu_and_a_1_gpu_claim_can_share_nothing_but_fit_two_nodes_apart() -> None:
    one = {"name": "c", "resourceClaimTemplateName": "one"}
    decision = _decide(_pipeline(_template("one", 1)), _pod(TWO, one))
    assert decision.warnings == (
        "spec.resourceClaims: each of the 2 requests can be satisfied on some node, but no node "
        "has enough devices for all of them together (a pod's claims are allocated on one node)",
    )


def test_two_1_gpu_claims_fit_one_node() -> None:
    one = {"name": "c", "resourceClaimTemplateName": "one"}
    other = {"name": "d", "resourceClaimTemplateName": "one"}
    assert _decide(_pipeline(_template("one", 1)), _pod(one, other)).warnings == ()


def test_two_2_gpu_claims_of_one_pod_never_fit_a_2_gpu_node() -> None:
    decision = _decide(_pipeline(), _pod(TWO, NAMED))
    assert decision.allowed
    assert decision.warnings == (
        "spec.resourceClaims: each of the 2 requests can be satisfied on some node, but no node "
        "has enough devices for all of them together (a pod's claims are allocated on one node)",
    )


def test_the_joint_verdict_is_denied_where_the_policy_says_so() -> None:
    policy = "cel:\n  selectors:\n    unsatisfiable: deny\n"
    decision = _decide(_pipeline(policy=policy), _pod(TWO, NAMED))
    assert not decision.allowed
    assert "no node in the cluster can satisfy the claims of Pod trainer" in decision.message


def test_a_claim_already_allocated_is_left_out() -> None:
    held = allocated_claim("named-two", ("node-a", "gpu-0"), ("node-a", "gpu-1"))
    held["metadata"]["namespace"] = NS
    held["spec"] = _claim("named-two", 2)["spec"]
    decision = _decide(_pipeline(held), _pod(TWO, NAMED))
    assert decision.warnings == ()


def test_a_pod_with_one_claim_is_not_checked_again() -> None:
    held = allocated_claim("other", ("node-a", "gpu-0"), ("node-b", "gpu-0"))
    assert _decide(_pipeline(held), _pod(TWO)).warnings == ()


def test_devices_held_by_others_make_it_not_now() -> None:
    one = {"name": "c", "resourceClaimTemplateName": "one"}
    other = {"name": "d", "resourceClaimTemplateName": "one"}
    held = allocated_claim("other", ("node-a", "gpu-0"), ("node-b", "gpu-0"))
    decision = _decide(_pipeline(held, _template("one", 1)), _pod(one, other))
    assert decision.warnings == (
        "spec.resourceClaims: not now: the free devices cannot satisfy all requests together "
        "on one node",
    )


def test_unknown_claims_are_left_to_their_own_checks() -> None:
    missing = {"name": "c", "resourceClaimTemplateName": "missing"}
    assert _decide(_pipeline(), _pod(missing, {"name": "d"})).warnings == ()


# -- names a DeviceClass maps: the claim the scheduler makes for them ---------------------------

MAPPED = "spec.containers[0].resources.limits[nvidia.com/gpu]"
SERVED = "which the scheduler serves from DeviceClass gpu.nvidia.com (extendedResourceName)"


@pytest.mark.parametrize(
    ("ns", "count", "warnings"),
    [
        pytest.param("ml-audit", 8, (), id="8 fit one 8-GPU node"),
        pytest.param(
            "ml-audit",
            9,
            (
                f"{MAPPED}: asks for 9 nvidia.com/gpu, {SERVED}: never: the most on any node is 8 "
                "(node-a, node-b)",
            ),
            id="9: never, per node",
        ),
        pytest.param(
            "default",
            17,
            (
                f"{MAPPED}: asks for 17 nvidia.com/gpu, {SERVED}: never: the whole cluster has 16 "
                "devices of the class",
            ),
            id="17: never, in the whole cluster (no mode)",
        ),
        pytest.param("ml-research", 9, (), id="translate: translation's claims, not this path"),
    ],
)
def test_a_pod_asking_for_a_mapped_name_is_judged_as_the_claim_the_scheduler_makes(
    ns: str, count: int, warnings: tuple[str, ...]
) -> None:
    decision = mapped.review(mapped.pipeline(), mapped.pod(ns, mapped.container("cuda", count)))
    assert decision.allowed
    assert [w for w in decision.warnings if "scheduler serves" in w] == list(warnings)


def test_a_mapped_name_whose_devices_are_held_is_warned_not_now() -> None:
    where = mapped.pipeline(
        mapped.held("a", "ml-audit", "node-a", 4), mapped.held("b", "ml-audit", "node-b", 4)
    )
    decision = mapped.review(where, mapped.pod("ml-audit", mapped.container("cuda", 6)))
    assert f"{MAPPED}: asks for 6 nvidia.com/gpu, {SERVED}: not now: " in decision.warnings[-1]


def test_init_and_app_containers_are_one_claim_on_one_node() -> None:
    obj = mapped.pod("ml-audit", mapped.container("cuda", 6), init=(mapped.container("warm", 3),))
    decision = mapped.review(mapped.pipeline(), obj)
    assert decision.warnings[-1] == (
        "spec: the scheduler's claim for nvidia.com/gpu (warm 3 + cuda 6 of gpu.nvidia.com): "
        "never: each of the 2 requests can be satisfied on some node, but no node has enough "
        "devices for all of them together (a pod's requests are allocated on one node)"
    )


def test_the_implicit_name_of_a_missing_class_is_never_served() -> None:
    resource = "deviceclass.resource.kubernetes.io/nope.example"
    obj = mapped.pod("ml-audit", mapped.container("cuda", 1, resource))
    decision = mapped.review(mapped.pipeline(), obj)
    assert decision.warnings == (
        f"spec.containers[0].resources.limits[{resource}]: asks for 1 {resource}, which the "
        "scheduler serves from DeviceClass nope.example: never: DeviceClass nope.example does "
        "not exist",
    )


def test_a_mapped_name_is_judged_together_with_the_pods_own_claim() -> None:
    template = _template("six", 6)
    template["metadata"]["namespace"] = "ml-audit"
    obj = mapped.pod(
        "ml-audit",
        mapped.container("cuda", 4),
        resourceClaims=[{"name": "a", "resourceClaimTemplateName": "six"}],
    )
    decision = mapped.review(mapped.pipeline(template), obj)
    (warning,) = [w for w in decision.warnings if "no node has enough" in w]
    assert warning.startswith("spec.resourceClaims: each of the 2 requests")


def test_never_is_denied_where_the_policy_says_so_but_only_for_names_no_plugin_can_serve() -> None:
    policy = policy_from("cel:\n  selectors:\n    unsatisfiable: deny\n")
    where = mapped.pipeline(policy=policy)
    implicit = mapped.pod("ml-audit", mapped.container("cuda", 9, mapped.IMPLICIT))
    decision = mapped.review(where, implicit)
    assert not decision.allowed
    assert "no node in the cluster can satisfy the extended resources of Pod trainer" in (
        decision.message
    )
    assert f"asks for 9 {mapped.IMPLICIT}, which the scheduler serves from DeviceClass " in (
        decision.message
    )
    # a node still running the device plugin for nvidia.com/gpu could take the pod: warned
    warned = mapped.review(where, mapped.pod("ml-audit", mapped.container("cuda", 9)))
    assert warned.allowed
    assert f"{MAPPED}: asks for 9 nvidia.com/gpu, {SERVED}: never: " in warned.warnings[-1]


def test_a_deployments_pods_are_judged_at_apply_time_and_again_only_when_they_change() -> None:
    where = mapped.pipeline()
    nine = mapped.deployment("ml-audit", 2, mapped.container("cuda", 9))
    decision = mapped.review(where, nine)
    template = "spec.template.spec.containers[0].resources.limits[nvidia.com/gpu]"
    assert f"{template}: asks for 9 nvidia.com/gpu, {SERVED}: never: " in decision.warnings[-1]
    scaled = mapped.deployment("ml-audit", 5, mapped.container("cuda", 9))
    again = mapped.review(where, scaled, operation="UPDATE", old=nine)
    assert not [w for w in again.warnings if "scheduler serves" in w]
    ten = mapped.deployment("ml-audit", 2, mapped.container("cuda", 10))
    changed = mapped.review(where, ten, operation="UPDATE", old=nine)
    assert f"{template}: asks for 10 nvidia.com/gpu" in changed.warnings[-1]


def test_a_cluster_without_the_mapping_asks_nothing_of_the_scheduler() -> None:
    decision = mapped.review(
        mapped.pipeline(mapped=False), mapped.pod("ml-audit", mapped.container("cuda", 99))
    )
    assert not [w for w in decision.warnings if "scheduler serves" in w]
