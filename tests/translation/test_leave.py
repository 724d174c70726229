"""Leaving to the scheduler (app/translation/leave.py): which legacy requests translation keeps
as written where a DeviceClass maps their name, and why the others are translated.

Over generated pods: every legacy request is either translated or left, never both; what is left
is exactly what the checks judge as the scheduler's claim (`left_to_scheduler`), and quota's
forecast counts the plan's claims plus that one claim. Then one example per rule of the switch.
"""

from __future__ import annotations

import functools
from typing import Any

import jsonpatch
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.errors import PolicyError
from app.pipeline import Endpoint, Pipeline
from app.policies.base import Context, Mode
from app.policies.builders import plan_for
from app.policies.mapped import left_to_scheduler
from app.policies.quota.demand import pod_demand
from app.translation import TranslationPlan
from app.transport.review import decode_review
from tests.helpers import DEMO_NAMESPACES, make_pipeline, policy_from, wrap
from tests.policies.mapped_objects import mapping_class
from tests.specs import pod_spec

Obj = dict[str, Any]
NS = "ml-research"
GPU = "nvidia.com/gpu"
CLASS = "gpu.nvidia.com"
IMPLICIT = f"deviceclass.resource.kubernetes.io/{CLASS}"
LEGACY = [GPU, "amd.com/gpu", "nvidia.com/mig-1g.10gb", "nvidia.com/gpumem", IMPLICIT]
NAMES = ["cuda", "train", "warm", "proxy"]
LEAVING = "translation: {leaveMapped: true}"
WITH_IMPLICIT = (
    "legacyResources: {names: [nvidia.com/gpu, nvidia.com/mig-*, amd.com/gpu, "
    "'deviceclass.resource.kubernetes.io/*']}"
)


def pipeline(
    policy: str = LEAVING, *, mapped: bool = True, extra: tuple[Obj, ...] = ()
) -> Pipeline:
    if not extra:
        return _pipeline(policy, mapped)
    classes = [mapping_class()] if mapped else []
    return make_pipeline([*DEMO_NAMESPACES, *classes, *extra], policy_from(policy))


@functools.cache
def _pipeline(policy: str, mapped: bool) -> Pipeline:
    classes = [mapping_class()] if mapped else []
    return make_pipeline([*DEMO_NAMESPACES, *classes], policy_from(policy))


def context(p: Pipeline, mode: Mode = Mode.TRANSLATE) -> Context:
    labels = p.view.namespace_labels(NS)
    assert labels is not None
    return Context(p.view, p.policy, p.parts, mode, labels)


def gpus(name: str, count: int, resource: str = GPU, **more: str) -> Obj:
    limits = {resource: str(count), **more}
    return {"name": name, "image": "cuda:12", "resources": {"limits": limits, "requests": limits}}


def pod(*containers: Obj, init: tuple[Obj, ...] = (), **spec: Any) -> Obj:
    body: Obj = {"containers": list(containers), **spec}
    if init:
        body["initContainers"] = list(init)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": NS},
        "spec": body,
    }


def planned(p: Pipeline, obj: Obj, mode: Mode = Mode.TRANSLATE) -> TranslationPlan:
    spec = pod_spec("Pod", obj)
    assert spec is not None
    return plan_for(spec, NS, context(p, mode))


def left(plan: TranslationPlan) -> list[tuple[str, str, int, str]]:
    return [
        (x.legacy.container.name, x.legacy.resource, x.count, x.device_class) for x in plan.left
    ]


def translated(plan: TranslationPlan) -> list[tuple[str, str]]:
    return [(w.legacy.container.name, w.legacy.resource) for w in plan.wants]


# -- over generated pods ---------------------------------------------------------------------


@st.composite
def pods(draw: st.DrawFn) -> Obj:
    names = draw(st.permutations(NAMES))
    n_app, n_init = draw(st.integers(1, 3)), draw(st.integers(0, 1))

    def one(name: str) -> Obj:
        legacy = draw(st.dictionaries(st.sampled_from(LEGACY), st.integers(0, 20), max_size=2))
        limits = {k: str(v) for k, v in legacy.items()}
        body: Obj = {"name": name, "image": "cuda:12"}
        if limits:
            body["resources"] = {"limits": limits, "requests": dict(limits)}
        return body

    spec: Obj = {"containers": [one(n) for n in names[:n_app]]}
    inits = [one(n) for n in names[n_app : n_app + n_init]]
    for init in inits:
        if draw(st.booleans()):
            init["restartPolicy"] = "Always"
    if inits:
        spec["initContainers"] = inits
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": NS},
        "spec": spec,
    }


@pytest.mark.parametrize("init_mode", ["share", "separate"])
@settings(max_examples=80, deadline=None)
@given(obj=pods())
def test_a_request_is_translated_or_left_never_both_and_the_checks_read_what_is_left(
    init_mode: str, obj: Obj
) -> None:
    p = pipeline(
        f"{WITH_IMPLICIT}\ntranslation: {{leaveMapped: true, initContainers: {init_mode}}}"
    )
    plan = planned(p, obj)
    spec = pod_spec("Pod", obj)
    assert spec is not None
    wanted = {(w.legacy.container.path, r.resource) for w in plan.wants for r in w.requests}
    kept = {(x.legacy.container.path, x.legacy.resource) for x in plan.left}
    assert not wanted & kept
    for x in plan.left:
        assert x.legacy.resource in (GPU, IMPLICIT) and x.device_class == CLASS
        assert x.count > 0
        limits = x.legacy.container.container["resources"]["limits"]
        assert "nvidia.com/gpumem" not in limits  # a share is never left
        if init_mode == "share":
            inits = obj["spec"].get("initContainers", [])
            assert not any(
                c.get("restartPolicy") != "Always"
                and int(c.get("resources", {}).get("limits", {}).get(x.legacy.resource, 0))
                for c in inits
            )
    assert sum(x.count for x in plan.left) <= 32
    # the checks judge what is left as the scheduler's claim, and nothing else of the pod
    mapped = left_to_scheduler("Pod", spec, context(p))
    assert {(m.container.path, m.resource) for m in mapped} == kept
    if plan.problems or plan.over_cap is not None:
        return
    demand = pod_demand(spec, NS, context(p))
    expected = plan.devices()
    for x in plan.left:
        expected[x.device_class] = expected.get(x.device_class, 0) + x.count
    assert dict(demand.devices) == expected
    assert demand.claims == len(plan.claims) + (1 if plan.left else 0)
    # and admission leaves them in the pod as written
    decision = p.review(Endpoint.MUTATE, decode_review(orjson.dumps(wrap(obj))))
    if not decision.allowed:
        return  # (a joint "never" the policy denies: not this test's concern)
    admitted = jsonpatch.apply_patch(obj, list(decision.patch))
    for x in plan.left:
        ref = x.legacy.container
        resources = admitted["spec"][ref.field][ref.index]["resources"]
        assert resources["limits"][x.legacy.resource] == x.legacy.limit
        assert resources["requests"][x.legacy.resource] == x.legacy.request
    assert decision.translated.count("left:deviceclass") == sum(
        1 for x in plan.left if not x.implicit
    )


# -- the rules, one by one -------------------------------------------------------------------


def test_a_plain_request_a_class_maps_is_left_with_the_class_named() -> None:
    plan = planned(pipeline(), pod(gpus("cuda", 2)))
    assert left(plan) == [("cuda", GPU, 2, CLASS)]
    assert not plan.wants and not plan.claims and not plan.templates
    assert [x.warning() for x in plan.left] == [
        "container cuda: left nvidia.com/gpu: 2 to the scheduler: DeviceClass gpu.nvidia.com "
        "maps it (extendedResourceName)"
    ]
    assert plan.left[0].rule == "left:deviceclass"
    assert not plan.notes


def test_without_the_switch_or_outside_translate_namespaces_it_is_translated() -> None:
    obj = pod(gpus("cuda", 2))
    assert translated(planned(pipeline(""), obj)) == [("cuda", GPU)]
    # dra-only's fix and the other readers of the plan in other modes still see claims
    assert translated(planned(pipeline(), obj, Mode.DRA_ONLY)) == [("cuda", GPU)]
    assert translated(planned(pipeline(), obj, Mode.AUDIT)) == [("cuda", GPU)]


def test_a_name_no_class_maps_is_translated_without_a_word() -> None:
    plan = planned(pipeline(mapped=False), pod(gpus("cuda", 2), gpus("rocm", 1, "amd.com/gpu")))
    assert translated(plan) == [("cuda", GPU), ("rocm", "amd.com/gpu")]
    assert not plan.left and not plan.notes


def test_the_implicit_name_of_a_class_is_left_saying_so() -> None:
    plan = planned(pipeline(f"{WITH_IMPLICIT}\n{LEAVING}"), pod(gpus("cuda", 1, IMPLICIT)))
    (only,) = plan.left
    assert (only.implicit, only.rule) == (True, "left:implicit")
    assert only.warning() == (
        f"container cuda: left {IMPLICIT}: 1 to the scheduler: it names DeviceClass "
        f"{CLASS} (deviceclass.resource.kubernetes.io/<class>)"
    )


def test_mig_profiles_and_shares_in_the_same_pod_are_still_translated() -> None:
    mig = mapping_class("mig.nvidia.com", "nvidia.com/mig-1g.10gb")
    p = pipeline(extra=(mig,))
    obj = pod(
        gpus("cuda", 1),
        gpus("slice", 1, "nvidia.com/mig-1g.10gb"),
        gpus("hami", 1, **{"nvidia.com/gpumem": "4000"}),
    )
    plan = planned(p, obj)
    assert left(plan) == [("cuda", GPU, 1, CLASS)]
    assert translated(plan) == [("hami", GPU), ("slice", "nvidia.com/mig-1g.10gb")]
    # the MIG rule has selectors: never left, nothing to say; HAMi's gpu is a share's count
    assert not plan.notes


def test_a_plain_name_beside_a_share_in_one_container_is_translated_with_the_reason() -> None:
    amd = mapping_class("gpu.amd.com", "amd.com/gpu")
    plan = planned(
        pipeline(extra=(amd,)),
        pod(gpus("mixed", 1, "amd.com/gpu", **{"aliyun.com/gpu-mem": "4"})),
    )
    assert not plan.left
    assert plan.notes == [
        "container mixed: amd.com/gpu: 1 is translated, not left to the scheduler (DeviceClass "
        "gpu.amd.com maps it (extendedResourceName)): the container also asks for a GPU share "
        "(the policy's sharing rules)"
    ]


@pytest.mark.parametrize(
    ("policy", "is_left"),
    [
        pytest.param("translation: {leaveMapped: true}", True, id="globally"),
        pytest.param(
            "mappings: [{resource: nvidia.com/gpu, deviceClassName: gpu.nvidia.com, "
            "leaveToScheduler: true}]",
            True,
            id="by its rule alone",
        ),
        pytest.param(
            "translation: {leaveMapped: true}\nmappings: [{resource: nvidia.com/gpu, "
            "deviceClassName: gpu.nvidia.com, leaveToScheduler: false}]",
            False,
            id="its rule says no",
        ),
        pytest.param(
            "mappings: [{resource: amd.com/gpu, deviceClassName: gpu.amd.com, "
            "leaveToScheduler: true}]",
            False,
            id="another rule's switch",
        ),
    ],
)
def test_the_switch_is_global_and_per_mapping_rule(policy: str, is_left: bool) -> None:
    plan = planned(pipeline(policy), pod(gpus("cuda", 1)))
    assert bool(plan.left) is is_left
    assert bool(plan.wants) is not is_left


def test_a_rule_with_selectors_cannot_ask_to_be_left() -> None:
    with pytest.raises(PolicyError, match="leaveToScheduler needs a rule without selectors"):
        policy_from(
            "mappings: [{resource: nvidia.com/gpu, deviceClassName: gpu.nvidia.com, "
            "selectors: ['device.driver == \"x\"'], leaveToScheduler: true}]"
        )


def test_a_rule_sending_the_name_to_another_class_keeps_it_translated() -> None:
    other = mapping_class("gpu-b.nvidia.com")
    p = make_pipeline([*DEMO_NAMESPACES, other], policy_from(LEAVING))
    plan = planned(p, pod(gpus("cuda", 1)))
    assert translated(plan) == [("cuda", GPU)]
    assert plan.notes == [
        "container cuda: nvidia.com/gpu: 1 is translated, not left to the scheduler (DeviceClass "
        "gpu-b.nvidia.com maps it (extendedResourceName)): the policy's mappings send it to "
        "DeviceClass gpu.nvidia.com, the scheduler would serve it from gpu-b.nvidia.com"
    ]


def test_class_defaults_the_scheduler_would_not_carry_keep_it_translated() -> None:
    policy = (
        f"{LEAVING}\ndefaults:\n  deviceClasses:\n    gpu.nvidia.com:\n"
        '      selectors: [\'device.attributes["gpu.nvidia.com"].architecture == "Hopper"\']'
    )
    plan = planned(pipeline(policy), pod(gpus("cuda", 1)))
    assert translated(plan) == [("cuda", GPU)]
    (note,) = plan.notes
    assert note.endswith(
        "defaults.deviceClasses[gpu.nvidia.com] adds to its claims what the scheduler's claim "
        "would lack"
    )


def test_an_init_container_sharing_devices_keeps_the_name_translated_in_the_whole_pod() -> None:
    obj = pod(gpus("cuda", 2), gpus("side", 1), init=(gpus("warm", 1),))
    plan = planned(pipeline(), obj)
    assert not plan.left
    assert translated(plan) == [("warm", GPU), ("cuda", GPU), ("side", GPU)]
    assert len(plan.notes) == 3  # one a request
    assert plan.notes[0].endswith(
        "init container warm asks for it too: translation shares devices with it "
        "(translation.initContainers: share), the scheduler would give it devices of its own"
    )
    # each init container its own devices: the scheduler's layout
    separate = planned(pipeline("translation: {leaveMapped: true, initContainers: separate}"), obj)
    assert [x[0] for x in left(separate)] == ["warm", "cuda", "side"]


def test_a_sidecar_is_left_like_an_app_container() -> None:
    sidecar = {**gpus("proxy", 1), "restartPolicy": "Always"}
    plan = planned(pipeline(), pod(gpus("cuda", 1), init=(sidecar,)))
    assert [x[0] for x in left(plan)] == ["proxy", "cuda"]


def test_more_devices_than_one_claim_holds_keeps_the_pod_translated() -> None:
    plan = planned(pipeline(), pod(gpus("a", 20), gpus("b", 20)))
    assert translated(plan) == [("a", GPU), ("b", GPU)]
    assert plan.notes[0].endswith(
        "the scheduler's one claim for the pod would hold 40 devices, more than the 32 a claim can"
    )


def test_a_pod_asking_for_the_class_through_dra_too_is_a_problem_as_when_translated() -> None:
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "mine", "namespace": NS},
        "spec": {"devices": {"requests": [{"name": "g", "exactly": {"deviceClassName": CLASS}}]}},
    }
    obj = pod(gpus("cuda", 1), resourceClaims=[{"name": "mine", "resourceClaimName": "mine"}])
    plan = planned(pipeline(extra=(claim,)), obj)
    (problem,) = plan.problems
    assert "which this pod already requests through DRA" in problem.message


def test_zero_asks_for_nothing_and_is_removed_as_before() -> None:
    plan = planned(pipeline(), pod(gpus("cuda", 0)))
    assert not plan.left
    assert plan.warnings == ["container cuda: nvidia.com/gpu: 0 -> removed (no devices asked for)"]
