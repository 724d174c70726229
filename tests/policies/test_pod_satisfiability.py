"""A pod's claims checked together: the scheduler allocates them all on one node."""

from __future__ import annotations

from typing import Any

import orjson

from app.pipeline import Decision, Endpoint, Pipeline
from app.transport.review import decode_review
from tests.allocation.nvidia import CLASSES, allocated_claim, node_slice
from tests.helpers import DEMO_NAMESPACES, make_pipeline, policy_from, wrap

Obj = dict[str, Any]
NS = "gpu-e2e"


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
