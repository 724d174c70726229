"""DeviceClass allow-lists (policy `deviceClasses`): which classes a tenant's namespaces may use,
in claims, templates, firstAvailable alternatives, pods and workloads, and the claims
translation writes."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.bounded import live_caches
from app.errors import PolicyError
from app.pipeline import Endpoint, Pipeline
from app.transport.review import decode_review
from app.verdict import Decision
from tests.claim_objects import claim, exact, first, sub, template, workload
from tests.helpers import json_paths, make_pipeline, namespace, policy_from, wrap

Obj = dict[str, Any]
GPU, MIG, AMD = "gpu.nvidia.com", "mig.nvidia.com", "gpu.amd.com"

POLICY = """
deviceClasses:
  - name: team-a
    namespaceSelector: {matchLabels: {team: a}}
    allowed: [gpu.nvidia.com]
  - name: team-a-mig
    namespaceSelector: {matchLabels: {team: a, mig: "yes"}}
    allowed: ["mig.*"]
  - name: team-w
    namespaceSelector: {matchLabels: {team: w}}
    allowed: [gpu.nvidia.com]
    action: warn
exceptions:
  - name: legacy-inference
    namespaceSelector: {matchLabels: {team: a}}
    objectSelector: {matchLabels: {app: legacy}}
    until: 2999-12-31
    reason: vendor image
"""


def _device_class(name: str, extended: str | None = None) -> Obj:
    spec: Obj = {"selectors": [{"cel": {"expression": f'device.driver == "{name}"'}}]}
    if extended:
        spec["extendedResourceName"] = extended
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name},
            "spec": spec}  # fmt: skip


CLUSTER = [
    namespace("a", "dra-only", team="a"),
    namespace("a-translate", "translate", team="a"),
    namespace("a-mig", "dra-only", team="a", mig="yes"),
    namespace("a-audit", "audit", team="a"),
    namespace("w", "dra-only", team="w"),
    namespace("free", "dra-only"),
    _device_class(GPU),
    _device_class(MIG),
    _device_class(AMD),
    _device_class("fpga.example.com", extended="example.com/fpga"),
    template("mig-template", exact("m", MIG), namespace="a"),
    template("gpu-template", exact("g", GPU), namespace="a"),
    claim("shared-mig", exact("m", MIG), namespace="a"),
]


@pytest.fixture(autouse=True, scope="module")
def _release_memos() -> Iterator[None]:
    """The pipelines made here memoize their decisions against the process-wide cache budget
    (app.bounded), and may outlive the module: empty the caches made here when it is done, so
    the tests after it start from the budget they expect."""
    before = {id(cache) for cache in live_caches()}
    yield
    for cache in live_caches():
        if id(cache) not in before:
            cache.clear()


@pytest.fixture(scope="module")
def pipeline() -> Pipeline:
    return make_pipeline(CLUSTER, policy_from(POLICY))


def _review(
    pipeline: Pipeline,
    obj: Obj,
    endpoint: Endpoint = Endpoint.VALIDATE,
    old: Obj | None = None,
) -> Decision:
    body = wrap(obj, operation="UPDATE" if old is not None else "CREATE", old=old)
    return pipeline.review(endpoint, decode_review(orjson.dumps(body)))


def _in(ns: str, obj: Obj) -> Obj:
    obj["metadata"]["namespace"] = ns
    return obj


# -- claims and templates --------------------------------------------------------------------

CLAIMS: list[tuple[str, Obj, str | None]] = [
    (
        "a class outside the list",
        claim("c", exact("gpu", MIG), namespace="a"),
        "spec.devices.requests[0].exactly.deviceClassName: asks for DeviceClass mig.nvidia.com",
    ),
    (
        "a firstAvailable whose second alternative is outside",
        claim("c", first("gpu", sub("big", GPU), sub("small", MIG)), namespace="a"),
        "spec.devices.requests[0].firstAvailable[1].deviceClassName: alternative small asks for "
        "DeviceClass mig.nvidia.com",
    ),
    (
        "a template",
        template("t", exact("gpu", GPU), exact("amd", AMD), namespace="a"),
        "spec.spec.devices.requests[1].exactly.deviceClassName: asks for DeviceClass gpu.amd.com",
    ),
    (
        "a v1beta1 request",
        {
            **claim("c", namespace="a"),
            "spec": {"devices": {"requests": [{"name": "r", "deviceClassName": AMD}]}},
        },
        "spec.devices.requests[0].deviceClassName: asks for DeviceClass gpu.amd.com",
    ),
    ("an allowed class", claim("c", exact("gpu", GPU), namespace="a"), None),
    (
        "firstAvailable all allowed",
        claim("c", first("gpu", sub("big", GPU, 2), sub("small", GPU)), namespace="a"),
        None,
    ),
    ("a pattern of a second entry", claim("c", exact("m", MIG), namespace="a-mig"), None),
    ("a namespace no entry selects", claim("c", exact("m", AMD), namespace="free"), None),
]


@pytest.mark.parametrize(("case", "obj", "said"), CLAIMS, ids=[row[0] for row in CLAIMS])
def test_claims_and_templates_use_only_the_classes_their_namespace_may(
    pipeline: Pipeline, case: str, obj: Obj, said: str | None
) -> None:
    decision = _review(pipeline, obj)
    assert decision.allowed is (said is None), decision.message
    if said is not None:
        assert decision.code == 403 and decision.denied_by == ("device-classes",)
        assert f"- {said}, which namespace a may not use" in decision.message
        assert "(allowed: gpu.nvidia.com (deviceClasses entry team-a))" in decision.message
        assert decision.message.startswith(
            "namespace a may use only the DeviceClasses its dra-webhook deviceClasses entries "
            f"allow (team-a); {obj['kind']} c"
            if obj["kind"] == "ResourceClaim"
            else "namespace a"
        )


def test_every_entry_selecting_a_namespace_is_named_with_what_it_allows(
    pipeline: Pipeline,
) -> None:
    decision = _review(pipeline, claim("c", exact("amd", AMD), namespace="a-mig"))
    assert (
        "(allowed: gpu.nvidia.com (deviceClasses entry team-a); mig.* (deviceClasses entry "
        "team-a-mig))"
    ) in decision.message
    assert "deviceClasses entries allow (team-a, team-a-mig)" in decision.message


def test_audit_namespaces_and_warn_entries_warn_and_count_a_finding(pipeline: Pipeline) -> None:
    for ns in ("a-audit", "w"):
        decision = _review(pipeline, claim("c", exact("m", MIG), namespace=ns))
        assert decision.allowed, decision.message
        (warning,) = [w for w in decision.warnings if "deviceClassName" in w]
        assert warning.startswith("spec.devices.requests[0].exactly.deviceClassName: asks for")
        assert decision.findings == 1


# -- pods and workloads ----------------------------------------------------------------------

PODS: list[tuple[str, Obj, str | None]] = [
    (
        "a pod using a template of a class outside the list",
        workload("Pod", "p", templates=("mig-template",), namespace="a"),
        "spec.resourceClaims[0].resourceClaimTemplateName: ResourceClaimTemplate mig-template "
        "(spec.spec.devices.requests[0].exactly.deviceClassName) asks for DeviceClass "
        "mig.nvidia.com",
    ),
    (
        "a pod using a claim of a class outside the list",
        workload("Pod", "p", claims=("shared-mig",), namespace="a"),
        "spec.resourceClaims[0].resourceClaimName: ResourceClaim shared-mig "
        "(spec.devices.requests[0].exactly.deviceClassName) asks for DeviceClass mig.nvidia.com",
    ),
    (
        "a Deployment's pod template",
        workload("Deployment", "d", templates=("gpu-template", "mig-template"), namespace="a"),
        "spec.template.spec.resourceClaims[1].resourceClaimTemplateName: ResourceClaimTemplate "
        "mig-template",
    ),
    (
        "a CronJob's",
        workload("CronJob", "cj", templates=("mig-template",), namespace="a"),
        "spec.jobTemplate.spec.template.spec.resourceClaims[0].resourceClaimTemplateName",
    ),
    (
        "an extended resource naming its class (KEP-5004)",
        workload(
            "Pod",
            "p",
            legacy={"deviceclass.resource.kubernetes.io/gpu.amd.com": "1"},
            namespace="a",
        ),
        "spec.containers[0].resources.limits[deviceclass.resource.kubernetes.io/gpu.amd.com]: "
        "container main asks for deviceclass.resource.kubernetes.io/gpu.amd.com: 1, which names "
        "DeviceClass gpu.amd.com",
    ),
    (
        "an extended resource a class serves",
        workload("Pod", "p", legacy={"example.com/fpga": "1"}, namespace="a"),
        "spec.containers[0].resources.limits[example.com/fpga]: container main asks for "
        "example.com/fpga: 1, which the scheduler serves (spec.extendedResourceName) from "
        "DeviceClass fpga.example.com",
    ),
    (
        "a pod of allowed templates",
        workload("Pod", "p", templates=("gpu-template",), namespace="a"),
        None,
    ),
    (
        "a template not in the view",
        workload("Pod", "p", templates=("later",), namespace="a"),
        None,
    ),
]


@pytest.mark.parametrize(("case", "obj", "said"), PODS, ids=[row[0] for row in PODS])
def test_pods_and_workloads_use_only_the_classes_their_namespace_may(
    pipeline: Pipeline, case: str, obj: Obj, said: str | None
) -> None:
    decision = _review(pipeline, obj)
    assert ("device-classes" in decision.denied_by) is (said is not None), decision.message
    if said is not None:
        assert f"- {said}" in decision.message
        assert "which namespace a may not use (allowed: gpu.nvidia.com" in decision.message


PATH = "spec.template.spec.resourceClaims[0].resourceClaimTemplateName"


def test_a_workload_update_is_denied_only_for_uses_it_did_not_have(pipeline: Pipeline) -> None:
    old = workload("Deployment", "d", templates=("mig-template",), namespace="a")
    rescaled = workload("Deployment", "d", 5, templates=("mig-template",), namespace="a")
    decision = _review(pipeline, rescaled, old=old)
    assert decision.allowed, decision.message
    assert any(w.startswith(f"{PATH}: predates this change: ") for w in decision.warnings)
    grown = workload("Deployment", "d", templates=("gpu-template", "mig-template"), namespace="a")
    decision = _review(pipeline, grown, old=workload("Deployment", "d", namespace="a"))
    assert not decision.allowed


# -- translation -----------------------------------------------------------------------------


def test_translation_never_writes_a_claim_the_namespace_may_not_use(pipeline: Pipeline) -> None:
    pod = workload("Pod", "p", legacy={"nvidia.com/mig-1g.10gb": "1"}, namespace="a-translate")
    decision = _review(pipeline, pod, Endpoint.MUTATE)
    assert not decision.allowed and decision.denied_by == ("device-classes-translate",)
    assert not decision.templates and not decision.patch
    assert (
        "- spec.containers[0].resources.limits[nvidia.com/mig-1g.10gb]: container main asks "
        "for nvidia.com/mig-1g.10gb: 1, which translation turns into a claim on DeviceClass "
        "mig.nvidia.com, which namespace a-translate may not use (allowed: gpu.nvidia.com "
        "(deviceClasses entry team-a)); change the dra-webhook policy's mappings[1] "
        "(nvidia.com/mig-(.+) -> mig.nvidia.com) to a class the namespace may use"
    ) in decision.message


def test_a_name_translation_leaves_to_the_scheduler_is_judged_by_the_class_that_serves_it() -> None:
    """translation.leaveMapped: gpu.amd.com maps amd.com/gpu, as the policy's rule does, so the
    scheduler serves it; team-a may not use that class, so the pod is denied as a translated
    claim would be, naming who serves it."""
    amd = _device_class(AMD, extended="amd.com/gpu")
    cluster = [o for o in CLUSTER if o["metadata"]["name"] != AMD] + [amd]
    leaving = make_pipeline(cluster, policy_from(POLICY + "translation: {leaveMapped: true}\n"))
    pod = workload("Pod", "p", legacy={"amd.com/gpu": "1"}, namespace="a-translate")
    decision = _review(leaving, pod, Endpoint.MUTATE)
    assert not decision.allowed and not decision.templates, decision.warnings
    assert (
        "spec.containers[0].resources.limits[amd.com/gpu]: container main asks for amd.com/gpu: "
        "1, which translation leaves to the scheduler to serve from DeviceClass gpu.amd.com, "
        "which namespace a-translate may not use"
    ) in decision.message


def test_a_translation_to_an_allowed_class_goes_on_as_before(pipeline: Pipeline) -> None:
    pod = workload("Pod", "p", legacy={"nvidia.com/gpu": "1"}, namespace="a-translate")
    decision = _review(pipeline, pod, Endpoint.MUTATE)
    assert decision.allowed and decision.templates and decision.patch, decision.message


def test_a_pod_an_exception_leaves_untranslated_is_not_judged_by_its_translation(
    pipeline: Pipeline,
) -> None:
    pod = workload("Pod", "p", legacy={"nvidia.com/mig-1g.10gb": "1"}, namespace="a-translate")
    pod["metadata"]["labels"] = {"app": "legacy"}
    decision = _review(pipeline, pod, Endpoint.MUTATE)
    assert decision.allowed and not decision.patch, decision.message


def test_a_workload_is_judged_at_apply_time_by_the_claims_its_pods_will_get(
    pipeline: Pipeline,
) -> None:
    deployment = workload(
        "Deployment", "d", legacy={"nvidia.com/mig-1g.10gb": "1"}, namespace="a-translate"
    )
    decision = _review(pipeline, deployment)
    assert "device-classes" in decision.denied_by
    assert "spec.template.spec.containers[0].resources.limits[nvidia.com/mig-1g.10gb]" in (
        decision.message
    )
    assert "change the dra-webhook policy's mappings[1]" in decision.message


def test_a_class_that_serves_a_legacy_name_is_the_mapping_to_change() -> None:
    cluster = [*CLUSTER, _device_class("gaudi.habana.ai", extended="habana.ai/gaudi")]
    pipeline = make_pipeline(cluster, policy_from(POLICY))
    pod = workload("Pod", "p", legacy={"habana.ai/gaudi": "1"}, namespace="a-translate")
    decision = _review(pipeline, pod, Endpoint.MUTATE)
    assert "DeviceClass gaudi.habana.ai maps habana.ai/gaudi (spec.extendedResourceName)" in (
        decision.message
    )


# -- bad input and the policy ----------------------------------------------------------------

MALFORMED = [
    (
        "a class that is not a string",
        {**claim("c", namespace="a"), "spec": {"devices": {"requests": [
            {"name": "r", "exactly": {"deviceClassName": 7}}]}}},
        "spec.devices.requests[0].exactly.deviceClassName: must be a string",
    ),
    (
        "requests that are not a list",
        {**claim("c", namespace="a"), "spec": {"devices": {"requests": {"r": 1}}}},
        "spec.devices.requests: must be a list",
    ),
    (
        "resourceClaims that are not a list",
        {**workload("Pod", "p", namespace="a"), "spec": {"containers": [], "resourceClaims": 1}},
        "spec.resourceClaims: must be a list",
    ),
    (
        "a template name that is not a string",
        {**workload("Pod", "p", namespace="a"), "spec": {"containers": [], "resourceClaims": [
            {"name": "x", "resourceClaimTemplateName": ["t"]}]}},
        "spec.resourceClaims[0].resourceClaimTemplateName: must be a string",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("case", "obj", "said"), MALFORMED, ids=[row[0] for row in MALFORMED])
def test_a_malformed_object_is_denied_with_the_field_path(
    pipeline: Pipeline, case: str, obj: Obj, said: str
) -> None:
    decision = _review(pipeline, obj)
    assert not decision.allowed and decision.code == 422, decision
    assert said in decision.message


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("deviceClasses: [{name: a, allowed: []}, {name: a, allowed: []}]", "used twice"),
        ("deviceClasses: [{name: a, allowed: ['GPU!']}]", "not a DeviceClass name or pattern"),
        ("deviceClasses: [{name: A, allowed: []}]", "lower-case"),
        ("deviceClasses: [{name: a}]", "allowed"),
    ],
)
def test_a_bad_entry_stops_the_policy_naming_it(text: str, said: str) -> None:
    with pytest.raises(PolicyError, match="deviceClasses") as refused:
        policy_from(text)
    assert said in str(refused.value)


def test_an_empty_allow_list_allows_no_class(pipeline: Pipeline) -> None:
    policy = policy_from("deviceClasses: [{name: none, allowed: []}]")
    decision = _review(make_pipeline(CLUSTER, policy), claim("c", exact("g", GPU), namespace="a"))
    assert not decision.allowed
    assert "(allowed: none (deviceClasses entry none))" in decision.message


@pytest.fixture(scope="module")
def fuzz_pipeline() -> Pipeline:
    """The allow-lists, and admin access allowed nowhere: every tenancy check has work."""
    extra = "adminAccess: {enabled: true, namespaceSelector: {matchLabels: {x: y}}}"
    return make_pipeline(CLUSTER, policy_from(POLICY + extra))


VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 50) | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3)
    ),
    max_leaves=12,
)
SEEDS = [
    claim(
        "c", exact("g", GPU, adminAccess=True), first("f", sub("a", MIG), sub("b")), namespace="a"
    ),
    template("t", exact("g", AMD), namespace="a-translate"),
    workload("Deployment", "d", templates=("mig-template",), claims=("shared-mig",), namespace="a"),
    workload("Pod", "p", legacy={"nvidia.com/mig-1g.10gb": "1"}, namespace="a-translate"),
]


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(range(len(SEEDS))), st.data(), VALUES)
def test_any_value_anywhere_is_answered_without_an_internal_error(
    fuzz_pipeline: Pipeline, seed: int, data: st.DataObject, value: Any
) -> None:
    """Odd shapes reach the tenancy checks with a policy that selects their namespaces: a shape
    denial (422 with the path) or an answer, never a bug."""
    obj = copy.deepcopy(SEEDS[seed])
    paths = [p for p in json_paths(obj) if p and p[0] == "spec"]
    where = data.draw(st.sampled_from(paths))
    node = obj
    for key in where[:-1]:
        node = node[key]
    node[where[-1]] = value
    body = orjson.dumps(wrap(obj))
    for endpoint in (Endpoint.MUTATE, Endpoint.VALIDATE):
        decision = fuzz_pipeline.review(endpoint, decode_review(body))
        assert "internal-error" not in decision.denied_by
        assert decision.failed_checks == ()
        if not decision.allowed:
            assert decision.code in (403, 422), decision
