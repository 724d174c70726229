"""Preemption: what a GPU pod that may preempt loses on DRA, said at admission
(app.policies.preemption), and who holds the devices a pod waits for (satisfiability)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.cluster import release
from app.cluster.release import ServedRelease
from app.pipeline import Decision, Endpoint, Pipeline
from app.transport.review import decode_review
from tests.allocation.nvidia import CLASSES, allocated_claim, node_slice
from tests.helpers import DEMO_NAMESPACES, make_pipeline, policy_from, wrap

Obj = dict[str, Any]
LOSES = "may evict lower-priority pods for nvidia.com/gpu today"


def priority_class(name: str, value: int, **fields: Any) -> Obj:
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name},
        "value": value,
        **fields,
    }


def holder(name: str, gpu: str, pod: str, uid: str) -> Obj:
    """A claim in namespace `other` allocated one GPU of node-a, reserved for `pod`."""
    claim = allocated_claim(name, ("node-a", gpu))
    claim["status"]["reservedFor"] = [{"resource": "pods", "name": pod, "uid": uid}]
    return claim


def holder_pod(name: str, uid: str, priority: int) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "other", "uid": uid},
        "spec": {
            "priority": priority,
            "resourceClaims": [{"name": "g", "resourceClaimName": "x"}],
            "containers": [{"name": "main", "image": "cuda"}],
        },
    }


FULL = [
    holder("held-0", "gpu-0", "train-0", "u-0"),
    holder("held-1", "gpu-1", "train-1", "u-1"),
]
"""Both GPUs of the one node taken by claims of training pods."""
TRAINING = [holder_pod("train-0", "u-0", 0), holder_pod("train-1", "u-1", 0)]


def pipeline(*extra: Obj, policy: str = "") -> Pipeline:
    objects = [
        *DEMO_NAMESPACES,
        *CLASSES,
        node_slice("node-a"),
        priority_class("inference-high", 1000),
        *extra,
    ]
    return make_pipeline(objects, policy_from(policy) if policy else None)


def gpu_pod(namespace: str, *, priority: int | None = 1000, **spec: Any) -> Obj:
    """A pod asking for one device-plugin GPU, as admitted (the Priority admission plugin has
    set its priority and policy)."""
    body: Obj = {
        "containers": [
            {"name": "serve", "image": "cuda", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
        ],
        **spec,
    }
    if priority is not None:
        body.setdefault("priority", priority)
        body.setdefault("preemptionPolicy", "PreemptLowerPriority")
        body.setdefault("priorityClassName", "inference-high" if priority == 1000 else "")
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "inference", "namespace": namespace},
        "spec": body,
    }


def deployment(namespace: str, **pod_spec: Any) -> Obj:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "serve", "namespace": namespace},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "serve"}},
            "template": {
                "metadata": {"labels": {"app": "serve"}},
                "spec": {
                    "containers": [
                        {
                            "name": "serve",
                            "image": "cuda",
                            "resources": {"limits": {"nvidia.com/gpu": "1"}},
                        }
                    ],
                    **pod_spec,
                },
            },
        },
    }


def decide(pipe: Pipeline, obj: Obj, endpoint: Endpoint, **wrap_args: Any) -> Decision:
    return pipe.review(endpoint, decode_review(orjson.dumps(wrap(obj, **wrap_args))))


def said(decision: Decision) -> str:
    return "\n".join(decision.warnings)


# -- admission: what the pod loses ------------------------------------------------------------


def test_a_translated_pod_that_may_preempt_is_told_what_it_loses() -> None:
    decision = decide(pipeline(), gpu_pod("ml-research"), Endpoint.MUTATE)
    assert decision.allowed and decision.patch
    (warning,) = [w for w in decision.warnings if LOSES in w]
    assert warning == (
        "spec: Pod inference (priority 1000, class inference-high) may evict lower-priority pods "
        "for nvidia.com/gpu today; translated to DRA it will not: this cluster's Kubernetes does "
        "not preempt for DRA devices, it waits until one frees up"
    )


def test_a_dra_only_pod_gets_the_same_sentence_beside_the_fix() -> None:
    decision = decide(pipeline(), gpu_pod("gpu-e2e"), Endpoint.VALIDATE)
    assert not decision.allowed
    assert "use DeviceClass gpu.nvidia.com" in decision.message
    assert "through DRA claims (the fix) it will not" in said(decision)


def test_an_audit_pod_gets_the_same_sentence_beside_the_finding() -> None:
    decision = decide(pipeline(), gpu_pod("ml-audit"), Endpoint.VALIDATE)
    assert decision.allowed
    assert "would be denied in a dra-only namespace" in said(decision)
    assert "under dra-only it will not" in said(decision)


@pytest.mark.parametrize(
    ("spec", "why"),
    [
        ({"priority": 0, "priorityClassName": ""}, "priority 0: no pod ranks below it"),
        ({"preemptionPolicy": "Never"}, "it never preempts, on any release"),
    ],
)
def test_a_pod_that_may_not_preempt_is_told_nothing(spec: Obj, why: str) -> None:
    decision = decide(pipeline(), gpu_pod("ml-research", **spec), Endpoint.MUTATE)
    assert LOSES not in said(decision), why


def test_a_pod_without_gpus_is_told_nothing() -> None:
    pod = gpu_pod("ml-research")
    pod["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "1"}}
    assert LOSES not in said(decide(pipeline(), pod, Endpoint.MUTATE))


def test_a_deployment_naming_a_preempting_class_is_told_for_its_pods() -> None:
    decision = decide(
        pipeline(), deployment("ml-research", priorityClassName="inference-high"), Endpoint.VALIDATE
    )
    (warning,) = [w for w in decision.warnings if LOSES in w]
    assert warning.startswith(
        "spec.template.spec: the pods of Deployment serve (priority 1000, class inference-high) "
        "may evict"
    )


def test_a_deployment_under_a_global_default_class_is_told_too() -> None:
    everyday = priority_class("everyday", 10, globalDefault=True)
    decision = decide(pipeline(everyday), deployment("ml-audit"), Endpoint.VALIDATE)
    assert "priority 10, class everyday" in said(decision)


def test_a_class_the_view_does_not_hold_is_taken_from_the_policy() -> None:
    obj = deployment("ml-research", priorityClassName="batch-urgent")
    assert LOSES not in said(decide(pipeline(), obj, Endpoint.VALIDATE))
    policy = "preemption:\n  priorityClasses:\n  - {name: batch-urgent, value: 500}\n"
    assert "priority 500, class batch-urgent" in said(
        decide(pipeline(policy=policy), obj, Endpoint.VALIDATE)
    )


def test_an_update_that_keeps_the_template_is_not_told_again() -> None:
    obj = deployment("ml-research", priorityClassName="inference-high")
    decision = decide(pipeline(), obj, Endpoint.VALIDATE, operation="UPDATE", old=obj)
    assert LOSES not in said(decision)
    low = deployment("ml-research")
    raised = decide(pipeline(), obj, Endpoint.VALIDATE, operation="UPDATE", old=low)
    assert LOSES in said(raised)


def test_a_translated_workload_is_told_before_translation_rewrites_it() -> None:
    policy = "translation:\n  translateWorkloads: true\n"
    obj = deployment("ml-research", priorityClassName="inference-high")
    decision = decide(pipeline(policy=policy), obj, Endpoint.MUTATE)
    assert decision.patch
    assert LOSES in said(decision)


def test_the_policy_can_turn_the_warning_off() -> None:
    decision = decide(
        pipeline(policy="preemption:\n  warn: false\n"), gpu_pod("ml-research"), Endpoint.MUTATE
    )
    assert LOSES not in said(decision)


def test_a_release_whose_scheduler_preempts_for_dra_is_told_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(release, "PREEMPTS_FOR_DRA", frozenset({36}))
    pipe = pipeline(*FULL, *TRAINING)
    pipe.view.set_release(ServedRelease.from_defaults("v1.36.5"))
    decision = decide(pipe, gpu_pod("ml-research"), Endpoint.MUTATE)
    assert LOSES not in said(decision)
    assert "which DRA will not preempt" not in said(decision)
    pipe.view.set_release(ServedRelease.from_defaults("v1.35.6"))
    assert LOSES in said(decide(pipe, gpu_pod("ml-research"), Endpoint.MUTATE))


# -- satisfiability: who holds the devices ----------------------------------------------------


def test_not_now_names_the_lower_priority_pods_holding_the_devices() -> None:
    decision = decide(pipeline(*FULL, *TRAINING), gpu_pod("ml-research"), Endpoint.MUTATE)
    assert decision.allowed
    assert (
        "spec: not now: DRA will not preempt the lower-priority pods holding the devices: "
        "other/train-0 (0), other/train-1 (0)" in said(decision)
    )


def test_holders_of_the_same_or_higher_priority_are_not_named() -> None:
    peers = [holder_pod("train-0", "u-0", 1000), holder_pod("train-1", "u-1", 2000)]
    decision = decide(pipeline(*FULL, *peers), gpu_pod("ml-research"), Endpoint.MUTATE)
    assert "not now:" in said(decision)
    assert "holding the devices" not in said(decision)


def test_without_the_holders_pods_the_claims_are_named() -> None:
    decision = decide(pipeline(*FULL), gpu_pod("ml-research"), Endpoint.MUTATE)
    assert (
        "not now: DRA will not preempt the allocated claims holding the devices: other/held-0, "
        "other/held-1" in said(decision)
    )


def test_a_pod_of_another_uid_is_not_taken_for_the_holder() -> None:
    impostors = [holder_pod("train-0", "other-uid", 0), holder_pod("train-1", "u-1", 0)]
    decision = decide(pipeline(*FULL, *impostors), gpu_pod("ml-research"), Endpoint.MUTATE)
    assert "holding the devices: other/held-0, other/train-1 (0)" not in said(decision)
    assert "lower-priority pods holding the devices: other/train-1 (0)" in said(decision)


def test_a_pod_that_may_not_preempt_is_not_told_who_holds_the_devices() -> None:
    pod = gpu_pod("ml-research", priority=0)
    decision = decide(pipeline(*FULL, *TRAINING), pod, Endpoint.MUTATE)
    assert "not now:" in said(decision)
    assert "holding the devices" not in said(decision)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.dictionaries(
        st.sampled_from(["priority", "priorityClassName", "preemptionPolicy"]),
        st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1), st.text(max_size=8), st.booleans()),
    )
)
def test_any_priority_fields_a_user_writes_get_an_answer(fields: Obj) -> None:
    obj = deployment("ml-audit", **fields)
    for endpoint in Endpoint:
        decision = decide(pipeline(), obj, endpoint)
        assert decision.denied_by != ("internal-error",)
