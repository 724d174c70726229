"""The translation plan over generated pods: one plan, three readers that agree with it.

For every generated pod in a translate-mode namespace (1-4 containers, init containers and
sidecars, several legacy names and counts, both init-container rules):

- the plan applied as a JSONPatch (what the mutating webhook sends) equals the plan written
  into the manifest (what `migrate` will write), and equals what the webhook itself answers;
- quota's forecast of one pod (devices per DeviceClass, claims) equals the plan's claims, and
  the devices of the templates the patched pod references;
- every container that asked for devices uses a claim of the plan, and every claim a container
  uses is declared at pod level.
"""

from __future__ import annotations

import copy
import functools
from typing import Any

import jsonpatch
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.pipeline import Endpoint, Pipeline
from app.policies.base import Context, Mode
from app.policies.builders import plan_for
from app.policies.quota.demand import pod_demand
from app.policies.translate import TRANSLATED_ANNOTATION
from app.translation import TranslationPlan, to_patch
from app.translation.manifest import write
from app.transport.review import decode_review
from tests.helpers import DEMO_NAMESPACES, make_pipeline, policy_from, wrap
from tests.specs import pod_spec

Obj = dict[str, Any]
NS = "ml-research"
LEGACY = [
    "nvidia.com/gpu",
    "amd.com/gpu",
    "nvidia.com/mig-1g.10gb",
    "nvidia.com/gpumem",
    "aliyun.com/gpu-mem",
    "nvidia.com/gpu.shared",
]
NAMES = ["cuda", "train", "warm", "proxy", "log", "x" * 63]


@functools.cache
def pipeline(init_containers: str) -> Pipeline:
    policy = policy_from(
        f"translation: {{initContainers: {init_containers}, maxTemplatesPerPod: 256, "
        "maxClaimsPerPod: 1024}"
    )
    return make_pipeline(list(DEMO_NAMESPACES), policy)


def context(p: Pipeline) -> Context:
    labels = p.view.namespace_labels(NS)
    assert labels is not None
    return Context(p.view, p.policy, p.parts, Mode.TRANSLATE, labels)


@st.composite
def pods(draw: st.DrawFn) -> Obj:
    names = draw(st.permutations(NAMES))
    n_app, n_init = draw(st.integers(1, 3)), draw(st.integers(0, 3))

    def container(name: str) -> Obj:
        legacy = draw(st.dictionaries(st.sampled_from(LEGACY), st.integers(0, 4), max_size=2))
        limits = {k: str(v) for k, v in legacy.items()}
        if draw(st.booleans()):
            limits["cpu"] = "1"
        body: Obj = {"name": name, "image": "cuda:12"}
        if limits:
            body["resources"] = {"limits": limits, "requests": dict(limits)}
        return body

    spec: Obj = {"containers": [container(n) for n in names[:n_app]]}
    inits = [container(n) for n in names[n_app : n_app + n_init]]
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


def planned(p: Pipeline, pod: Obj) -> TranslationPlan:
    spec = pod_spec("Pod", pod)
    assert spec is not None
    return plan_for(spec, NS, context(p))


@pytest.mark.parametrize("init_mode", ["share", "separate"])
@settings(max_examples=60, deadline=None)
@given(pod=pods())
def test_a_plan_applied_as_a_patch_equals_the_plan_written_into_the_manifest(
    init_mode: str, pod: Obj
) -> None:
    p = pipeline(init_mode)
    before = copy.deepcopy(pod)
    plan = planned(p, pod)
    assert not plan.problems and plan.over_cap is None
    patched = jsonpatch.apply_patch(pod, to_patch(plan))
    assert patched == write(pod, plan)
    assert pod == before  # neither changes the object it reads

    decision = p.review(Endpoint.MUTATE, decode_review(orjson.dumps(wrap(pod))))
    assert decision.allowed
    admitted = jsonpatch.apply_patch(pod, list(decision.patch))
    # admission also says on the pod what it translated (migrate leaves manifests without it)
    annotations = admitted["metadata"].pop("annotations", {})
    assert (TRANSLATED_ANNOTATION in annotations) is bool(plan.wants)
    if not admitted["metadata"].get("annotations", True):
        del admitted["metadata"]["annotations"]
    assert admitted == patched
    assert tuple(plan.templates.values()) == decision.templates


@pytest.mark.parametrize("init_mode", ["share", "separate"])
@settings(max_examples=60, deadline=None)
@given(pod=pods())
def test_quotas_count_of_a_legacy_pod_equals_the_devices_of_its_plan(
    init_mode: str, pod: Obj
) -> None:
    p = pipeline(init_mode)
    plan = planned(p, pod)
    spec = pod_spec("Pod", pod)
    assert spec is not None
    demand = pod_demand(spec, NS, context(p))
    assert dict(demand.devices) == plan.devices()
    assert demand.claims == len(plan.claims)
    assert not demand.unbounded

    templates = {name: t["spec"]["spec"] for name, t in plan.templates.items()}
    patched = jsonpatch.apply_patch(pod, to_patch(plan))
    made: dict[str, int] = {}
    for entry in patched["spec"].get("resourceClaims") or []:
        (request,) = templates[entry["resourceClaimTemplateName"]]["devices"]["requests"]
        exactly = request["exactly"]
        made[exactly["deviceClassName"]] = (
            made.get(exactly["deviceClassName"], 0) + exactly["count"]
        )
    assert made == plan.devices()


@settings(max_examples=60, deadline=None)
@given(pod=pods())
def test_every_container_asking_for_devices_uses_a_declared_claim_of_the_plan(pod: Obj) -> None:
    plan = planned(pipeline("share"), pod)
    declared = {c.name for c in plan.claims}
    for want in plan.wants:
        used = plan.claims_of.get(want.legacy.container.pointer, [])
        if want.count:
            assert (
                plan.claim_for[
                    (want.legacy.container.field, want.legacy.container.name, want.legacy.resource)
                ]
                in used
            )
        assert set(used) <= declared
    assert len(declared) == len(plan.claims)  # names never repeat


def test_a_plan_past_a_cap_still_counts_every_claim_but_names_none_after_it() -> None:
    p = make_pipeline(list(DEMO_NAMESPACES), policy_from("translation: {maxClaimsPerPod: 1}"))
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": NS},
        "spec": {
            "containers": [
                {"name": n, "image": "i", "resources": {"limits": {"nvidia.com/gpu": "2"}}}
                for n in ("a", "b", "c")
            ]
        },
    }
    plan = planned(p, pod)
    assert plan.over_cap is not None
    assert "translation.maxClaimsPerPod" in plan.over_cap.message
    assert [c.name for c in plan.claims] == ["gpu-a", "", ""]
    assert plan.devices() == {"gpu.nvidia.com": 6}
    assert list(plan.claims_of.values()) == [["gpu-a"]]
