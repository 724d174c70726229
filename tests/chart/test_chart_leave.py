"""Names translation leaves to the scheduler, as the chart renders them (real helm): in translate
namespaces the ValidatingAdmissionPolicy refuses legacy names on a pod the mutating call judged
(a later mutation added them), but not a name the policy leaves where a DeviceClass maps it
(`policy.translation.leaveMapped`, `policy.mappings[].leaveToScheduler`). The policy cannot see
DeviceClasses, so the chart renders which names may be left from the values; shares and rules
with selectors (MIG profiles) are never left, so they are still refused.

Pods go through the real pipeline with the chart's own policy and a class that maps
`nvidia.com/gpu`; the admission policy's CEL is evaluated on both backends of this project's
engine, against the pod as the pipeline answered it, then as a later mutation changed it.
"""

from __future__ import annotations

import copy
import functools
import re
from typing import Any

import jsonpatch
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.cel.engine import BACKENDS
from app.config.policy import parse_policy
from app.pipeline import Endpoint, Pipeline
from app.policies.translate_judged import JUDGED_ANNOTATION
from app.transport.review import decode_review
from tests.chart.helpers import (
    CHART,
    RELEASE,
    dra_only_policy,
    pod_verdict,
    render,
    run_helm,
)
from tests.helpers import DEMO_NAMESPACES, make_pipeline, wrap
from tests.policies.mapped_objects import mapping_class

Obj = dict[str, Any]
NS = "ml-research"
GPU = "nvidia.com/gpu"
LEAVE = ("--set", "policy.translation.leaveMapped=true")
OWN_CLASS = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "DeviceClass",
    "metadata": {"name": "nic.example.com"},
    "spec": {"selectors": [{"cel": {"expression": 'device.driver == "nic.example.com"'}}]},
}
OWN_CLAIM = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaim",
    "metadata": {"name": "mine", "namespace": NS},
    "spec": {
        "devices": {"requests": [{"name": "n", "exactly": {"deviceClassName": "nic.example.com"}}]}
    },
}

by_backend = pytest.mark.parametrize("backend", BACKENDS)


@functools.cache
def _pipeline(*args: str) -> Pipeline:
    (config,) = [d for d in render(*args) if d["kind"] == "ConfigMap"]
    policy = parse_policy(config["data"]["policy.yaml"], "the chart's ConfigMap")
    amd = mapping_class("gpu.amd.com", "amd.com/gpu")
    return make_pipeline([*DEMO_NAMESPACES, mapping_class(), amd, OWN_CLASS, OWN_CLAIM], policy)


def _pod(*containers: Obj, claims: bool = True) -> Obj:
    spec: Obj = {
        "containers": [
            {"name": "nic", "image": "i", "resources": {"claims": [{"name": "n"}]}},
            *containers,
        ]
    }
    if claims:
        spec["resourceClaims"] = [{"name": "n", "resourceClaimName": "mine"}]
    else:
        spec["containers"] = list(containers)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": NS},
        "spec": spec,
    }


def _asks(name: str, **limits: str) -> Obj:
    asked = {k: str(v) for k, v in limits.items()}
    return {"name": name, "image": "cuda", "resources": {"limits": asked, "requests": dict(asked)}}


def _gpu(name: str = "cuda", count: int = 2) -> Obj:
    return _asks(name, **{GPU: str(count)})


def _mutated(pod: Obj, *args: str) -> Obj:
    decision = _pipeline(*args).review(Endpoint.MUTATE, decode_review(orjson.dumps(wrap(pod))))
    assert decision.allowed, decision.message
    patched: Obj = jsonpatch.apply_patch(pod, list(decision.patch))
    return patched


def _added(pod: Obj, container: Obj) -> Obj:
    changed = copy.deepcopy(pod)
    changed["spec"]["containers"].append(container)
    return changed


# -- what the webhook leaves the admission policy lets through --------------------------------


@by_backend
def test_a_judged_pod_with_a_name_left_to_the_scheduler_is_not_refused(backend: str) -> None:
    judged = _mutated(_pod(_gpu()), *LEAVE)
    assert judged["metadata"]["annotations"][JUDGED_ANNOTATION] == "c:mine"
    assert judged["spec"]["containers"][1]["resources"]["limits"] == {GPU: "2"}  # left
    assert pod_verdict(judged, NS, "translate", backend, *LEAVE) == (True, "")
    # without the switch the same pod, as written after a judged call, is refused: the chart
    # held every legacy name of a judged pod to be a later mutation's
    allowed, message = pod_verdict(judged, NS, "translate", backend)
    assert not allowed
    assert "container cuda asks for nvidia.com/gpu: 2 -> use DeviceClass gpu.nvidia.com" in message


ADDED_AFTER = [
    ("a MIG profile (a rule with selectors)", _asks("slice", **{"nvidia.com/mig-1g.10gb": "1"})),
    ("a share's memory (HAMi)", _asks("share", **{GPU: "1", "nvidia.com/gpumem": "4000"})),
    ("a time-slicing replica name", _asks("ts", **{"nvidia.com/gpu.shared": "2"})),
]


@by_backend
@pytest.mark.parametrize(("case", "container"), ADDED_AFTER, ids=[c[0] for c in ADDED_AFTER])
def test_names_the_policy_never_leaves_added_after_the_mutating_call_are_refused(
    case: str, container: Obj, backend: str
) -> None:
    judged = _mutated(_pod(_gpu()), *LEAVE)
    allowed, message = pod_verdict(_added(judged, container), NS, "translate", backend, *LEAVE)
    assert not allowed, case
    assert message.startswith(
        f"namespace {NS} translates device-plugin requests into DRA claims (gpu-mode=translate), "
        "but the pod asks for legacy extended resources again after dra-webhook translated it: "
    ), message
    assert "container cuda asks" not in message  # the left request is no offence


RULES = [
    (
        "leaveMapped, the rule says no",
        ("--set", "policy.translation.leaveMapped=true", "--set-json",
         'policy.mappings=[{"resource": "nvidia.com/gpu", "deviceClassName": "gpu.nvidia.com",'
         ' "leaveToScheduler": false}]'),
        {GPU: False, "amd.com/gpu": True},
    ),
    (
        "one rule asks for it",
        ("--set-json",
         'policy.mappings=[{"resource": "nvidia.com/gpu", "deviceClassName": "gpu.nvidia.com",'
         ' "leaveToScheduler": true}, {"resource": "amd.com/gpu", "deviceClassName": "gpu.amd.com"}]'),
        {GPU: True, "amd.com/gpu": False},
    ),
]  # fmt: skip


@by_backend
@pytest.mark.parametrize(("case", "args", "left"), RULES, ids=[r[0] for r in RULES])
def test_the_first_rule_that_matches_a_name_decides_as_the_webhook_does(
    case: str, args: tuple[str, ...], left: dict[str, bool], backend: str
) -> None:
    for name, is_left in left.items():
        judged = _mutated(_pod(_asks("cuda", **{name: "1"})), *args)
        still_there = "limits" in judged["spec"]["containers"][1].get("resources", {})
        assert still_there is is_left, (case, name)
        # what the webhook left is let through; a name it translates, added back, is refused
        added = judged if is_left else _added(judged, _asks("again", **{name: "1"}))
        assert pod_verdict(added, NS, "translate", backend, *args)[0] is is_left, (case, name)


@by_backend
def test_dra_only_and_audit_namespaces_are_unchanged_by_the_switch(backend: str) -> None:
    plain = _pod(_gpu(), claims=False)
    assert not pod_verdict(plain, NS, "dra-only", backend, *LEAVE)[0]
    assert not pod_verdict(plain, NS, "audit", backend, *LEAVE)[0]  # (its binding only warns)


def test_without_anything_to_leave_the_admission_policy_is_rendered_as_before() -> None:
    default, off = (
        dra_only_policy(),
        dra_only_policy("--set", "policy.translation.leaveMapped=false"),
    )
    assert default == off
    assert "legacyShareWith)) &&" not in str(default["spec"]["validations"])
    assert "legacyShareWith)) &&" in str(dra_only_policy(*LEAVE)["spec"]["validations"])


@pytest.mark.parametrize("args", [(), LEAVE], ids=["default", "leaveMapped"])
def test_each_variable_of_the_admission_policy_reads_only_those_before_it(
    args: tuple[str, ...],
) -> None:
    """The API server compiles a variable with the ones declared before it only (this engine
    inlines them all, so it would not notice): `mode` comes before the offences that read it."""
    names = [v["name"] for v in dra_only_policy(*args)["spec"]["variables"]]
    for index, variable in enumerate(dra_only_policy(*args)["spec"]["variables"]):
        used = set(re.findall(r"\bvariables\.(\w+)", variable["expression"]))
        assert used <= set(names[:index]), (variable["name"], used - set(names[:index]))


def test_the_values_schema_refuses_a_switch_that_is_not_a_boolean() -> None:
    result = run_helm(
        "template", RELEASE, str(CHART), "--set", "policy.translation.leaveMapped=maybe"
    )
    assert result.returncode != 0
    assert "leaveMapped" in result.stderr


# -- over generated pods: the admission policy never refuses what the webhook left -------------

NAMES = [GPU, "amd.com/gpu", "nvidia.com/mig-1g.10gb", "nvidia.com/gpumem", "nvidia.com/gpu.shared"]


@st.composite
def _pods(draw: st.DrawFn) -> Obj:
    containers = []
    for index in range(draw(st.integers(1, 3))):
        asked = draw(st.dictionaries(st.sampled_from(NAMES), st.integers(1, 3), max_size=2))
        containers.append(_asks(f"c{index}", **{k: str(v) for k, v in asked.items()}))
    init = draw(st.booleans())
    pod = _pod(*containers, claims=draw(st.booleans()))
    if init:
        pod["spec"]["initContainers"] = [_asks("warm", **{GPU: "1"})]
    return pod


@pytest.mark.parametrize("backend", BACKENDS)
@settings(max_examples=40, deadline=None)
@given(pod=_pods())
def test_a_pod_the_webhook_judged_is_never_refused_for_what_it_left(backend: str, pod: Obj) -> None:
    decision = _pipeline(*LEAVE).review(Endpoint.MUTATE, decode_review(orjson.dumps(wrap(pod))))
    if not decision.allowed or not decision.vouched:
        return  # denied, or not judged whole: the admission policy leaves it to the webhook
    admitted = jsonpatch.apply_patch(pod, list(decision.patch))
    assert pod_verdict(admitted, NS, "translate", backend, *LEAVE) == (True, ""), decision.warnings
