"""Translation in gpu-mode=translate namespaces, through the pipeline (policy tests: no HTTP)."""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

import kubernetes_validate
import orjson
import pytest

from app.config.policy import Policy
from app.errors import PolicyError
from app.pipeline import Decision, Endpoint
from app.policies.translate_judged import JUDGED_ANNOTATION
from tests.helpers import (
    DEMO_NAMESPACES,
    load_fixture,
    make_pipeline,
    policy_from,
    review,
    wrap,
)
from tests.policies.translate_objects import (
    GPU,
    GPU_CLASS,
    NS,
    claim,
    claim_refs,
    container,
    decide,
    deployment,
    device_class,
    entry_for,
    gpus,
    pod,
    rct,
    reapplied_manifest,
    sidecar,
    translate,
)
from tests.policies.translate_support import (
    apply,
    assert_valid,
    claim_users,
    devices_after,
    template_index,
)

Obj = dict[str, Any]


def test_legacy_pod_fixture_in_a_translate_namespace_asks_for_two_devices_through_dra() -> None:
    body = review("pod-create-legacy-gpu", namespace=NS)
    decision = decide(body)
    assert decision.allowed
    assert decision.denied_by == ()
    result = apply(body["request"]["object"], decision.patch)
    assert_valid(result)
    cuda = result["spec"]["containers"][0]
    assert "limits" not in cuda["resources"]
    assert "requests" not in cuda["resources"]
    assert claim_refs(cuda) == ["gpu-cuda"]
    (template,) = decision.templates
    assert entry_for(result, "gpu-cuda") == {
        "name": "gpu-cuda",
        "resourceClaimTemplateName": template["metadata"]["name"],
    }
    (request,) = template["spec"]["spec"]["devices"]["requests"]
    assert request["exactly"] == {
        "deviceClassName": "gpu.nvidia.com",
        "allocationMode": "ExactCount",
        "count": 2,
    }
    assert template["metadata"]["namespace"] == NS
    assert template["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "dra-webhook"}


def test_warning_says_what_was_translated_into_which_claim_template_and_class() -> None:
    decision = decide(review("pod-create-legacy-gpu", namespace=NS))
    # the second warning: this cluster has no DeviceClass gpu.nvidia.com (test_sharing.py has
    # translation's satisfiability verdicts)
    warning, unsatisfiable = decision.warnings
    assert "DeviceClass gpu.nvidia.com does not exist" in unsatisfiable
    assert re.fullmatch(
        r"container cuda: nvidia\.com/gpu: 2 -> claim gpu-cuda "
        r"\(template dra-gpu-nvidia-com-2-[0-9a-f]{10}, class gpu\.nvidia\.com\)",
        warning,
    ), warning


def test_running_on_its_own_output_changes_nothing() -> None:
    body = review("pod-create-legacy-gpu", namespace=NS)
    first = decide(body)
    body["request"]["object"] = apply(body["request"]["object"], first.patch)
    second = decide(body)
    assert second.allowed
    assert second.patch == ()
    assert second.templates == ()
    assert second.warnings == ()


@pytest.mark.parametrize(
    ("namespace", "fixture"),
    [
        ("gpu-e2e", "pod-create-legacy-gpu"),  # dra-only: the validating webhook denies it
        ("ml-audit", "pod-create-legacy-gpu"),
        ("default", "pod-create-legacy-gpu"),
        ("kube-system", "pod-create-legacy-gpu"),
        (NS, "pod-update-legacy-gpu"),  # Pods are translated on CREATE only
        (NS, "deployment-create-legacy-gpu"),  # workloads only with translateWorkloads
    ],
)
def test_reviews_translation_does_not_apply_to_are_left_unchanged(
    namespace: str, fixture: str
) -> None:
    decision = decide(review(fixture, namespace=namespace))
    assert decision.allowed
    assert decision.patch == ()
    assert decision.templates == ()


def test_a_pod_already_asking_through_dra_is_only_marked_with_the_claims_its_call_judged() -> None:
    decision = decide(review("pod-create-with-resourceclaims", namespace=NS))
    assert decision.allowed
    assert decision.templates == ()
    assert decision.patch == (
        {
            "op": "add",
            "path": "/metadata/annotations",
            "value": {JUDGED_ANNOTATION: "c:gpu-claim,t:gpu-template"},
        },
    )


# -- the patch -----------------------------------------------------------------------------


def test_only_the_legacy_name_leaves_limits_and_requests_with_escaped_pointers() -> None:
    cuda = container(
        "cuda",
        limits={GPU: "1", "cpu": "2", "memory": "4Gi"},
        requests={"cpu": "1", "memory": "4Gi"},
    )
    decision, result = translate(pod(cuda))
    paths = [op["path"] for op in decision.patch if op["op"] == "remove"]
    assert paths == [
        "/spec/containers/0/resources/limits/nvidia.com~1gpu",
        "/spec/containers/0/resources/requests/nvidia.com~1gpu",
    ]
    resources = result["spec"]["containers"][0]["resources"]
    assert resources["limits"] == {"cpu": "2", "memory": "4Gi"}
    assert resources["requests"] == {"cpu": "1", "memory": "4Gi"}


def test_each_container_keeps_its_own_devices() -> None:
    decision, result = translate(pod(gpus("train", 2), gpus("eval", 1), container("log")))
    train, evaluate, log = result["spec"]["containers"]
    assert claim_refs(train) == ["gpu-train"]
    assert claim_refs(evaluate) == ["gpu-eval"]
    assert "claims" not in log["resources"]
    index = template_index(decision.templates)
    per_container = devices_after(result["spec"], index)
    assert per_container["containers", "train"] == Counter({GPU_CLASS: 2})
    assert per_container["containers", "eval"] == Counter({GPU_CLASS: 1})
    assert claim_users(result["spec"]) == {
        "gpu-train": {("containers", "train")},
        "gpu-eval": {("containers", "eval")},
    }


def test_containers_of_the_same_shape_share_a_template_but_not_a_claim() -> None:
    decision, result = translate(pod(gpus("a", 1), gpus("b", 1)))
    (template,) = decision.templates
    entries = result["spec"]["resourceClaims"]
    assert [e["name"] for e in entries] == ["gpu-a", "gpu-b"]
    assert {e["resourceClaimTemplateName"] for e in entries} == {template["metadata"]["name"]}


def test_a_container_asking_for_two_legacy_names_gets_two_claims() -> None:
    both = container("mixed", limits={GPU: "1", "amd.com/gpu": "2"})
    decision, result = translate(pod(both))
    assert claim_refs(result["spec"]["containers"][0]) == ["gpu-mixed", "gpu-mixed-2"]
    classes = {v[0][0]: v[1] for v in template_index(decision.templates).values()}
    assert classes == {"gpu.nvidia.com": 1, "gpu.amd.com": 2}


def test_a_zero_count_is_removed_without_a_claim() -> None:
    decision, result = translate(pod(gpus("idle", 0), gpus("busy", 1)))
    idle, busy = result["spec"]["containers"]
    assert idle["resources"] == {}
    assert claim_refs(busy) == ["gpu-busy"]
    assert "container idle: nvidia.com/gpu: 0 -> removed (no devices asked for)" in (
        decision.warnings
    )


def test_user_claims_are_kept_and_generated_names_never_collide_with_them() -> None:
    theirs = rct("example-template", "gpu.example.com")
    cuda = gpus("cuda", 1)
    cuda["resources"]["claims"] = [{"name": "gpu-cuda"}]
    obj = pod(
        cuda, resourceClaims=[{"name": "gpu-cuda", "resourceClaimTemplateName": "example-template"}]
    )
    decision, result = translate(obj, objects=[*DEMO_NAMESPACES, theirs])
    assert [e["name"] for e in result["spec"]["resourceClaims"]] == ["gpu-cuda", "gpu-cuda-2"]
    assert claim_refs(result["spec"]["containers"][0]) == ["gpu-cuda", "gpu-cuda-2"]
    appended = [op["path"] for op in decision.patch if op["op"] == "add"]
    assert appended == [
        "/spec/containers/0/resources/claims/-",
        "/spec/resourceClaims/-",
        "/metadata/annotations",  # what was translated (dra-webhook/translated)
    ]


def test_long_names_still_give_dns_labels_of_at_most_63_characters() -> None:
    long_name = "c" * 63
    decision, result = translate(pod(gpus(long_name, 1), gpus(long_name[:-1] + "d", 1)))
    names = [e["name"] for e in result["spec"]["resourceClaims"]]
    assert all(len(n) <= 63 for n in names)
    assert len(set(names)) == 2
    assert all(len(t["metadata"]["name"]) <= 63 for t in decision.templates)


def test_claim_name_prefix_from_the_policy_is_used() -> None:
    policy = policy_from("translation: {claimNamePrefix: legacy}")
    _, result = translate(pod(gpus("cuda", 1)), policy=policy)
    assert claim_refs(result["spec"]["containers"][0]) == ["legacy-gpu-cuda"]


# -- mappings ------------------------------------------------------------------------------


def test_mig_names_map_to_the_mig_class_with_the_profile_as_a_selector() -> None:
    mig = container("cuda", limits={"nvidia.com/mig-1g.10gb": "1"})
    decision, result = translate(pod(mig))
    assert claim_refs(result["spec"]["containers"][0]) == ["mig-1g-10gb-cuda"]
    (template,) = decision.templates
    exactly = template["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    assert exactly["deviceClassName"] == "mig.nvidia.com"
    assert exactly["selectors"] == [
        {"cel": {"expression": 'device.attributes["gpu.nvidia.com"].profile == "1g.10gb"'}}
    ]


def test_a_deviceclass_extended_resource_name_maps_an_otherwise_unknown_name() -> None:
    objects = [*DEMO_NAMESPACES, device_class("gpu.intel.com", "gpu.intel.com/i915")]
    i915 = container("render", limits={"gpu.intel.com/i915": "1"})
    decision, _ = translate(pod(i915), objects=objects)
    (template,) = decision.templates
    assert template["spec"]["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] == (
        "gpu.intel.com"
    )


def test_the_implicit_deviceclass_name_names_its_class() -> None:
    policy = policy_from("legacyResources: {names: ['deviceclass.resource.kubernetes.io/*']}")
    implicit = container("cuda", limits={"deviceclass.resource.kubernetes.io/gpu.example.com": "2"})
    decision, result = translate(pod(implicit), policy=policy)
    (template,) = decision.templates
    assert template["spec"]["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] == (
        "gpu.example.com"
    )
    assert claim_refs(result["spec"]["containers"][0]) == ["gpu-example-com-cuda"]


def test_a_legacy_name_without_a_mapping_is_denied_with_the_config_key_to_add() -> None:
    i915 = container("render", limits={"gpu.intel.com/i915": "1"})
    decision = decide(wrap(pod(i915, gpus("cuda", 1))))
    assert not decision.allowed
    assert decision.code == 403
    assert decision.denied_by == ("translate",)
    assert "spec.containers[0].resources.limits[gpu.intel.com/i915]" in decision.message
    assert "no DeviceClass is known for gpu.intel.com/i915" in decision.message
    assert (
        "add `mappings: [{resource: gpu.intel.com/i915, deviceClassName: <class>}]`"
        in decision.message
    )
    assert "spec.extendedResourceName: gpu.intel.com/i915" in decision.message
    assert "gpu-mode=translate" in decision.message


# -- counts --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("limits", "requests", "path", "text"),
    [
        ({GPU: "1.5"}, None, "limits[nvidia.com/gpu]", "1.5 is not a whole number"),
        ({GPU: "500m"}, None, "limits[nvidia.com/gpu]", "500m is not a whole number"),
        ({GPU: "two"}, None, "limits[nvidia.com/gpu]", "two is not a whole number"),
        ({GPU: "-1"}, None, "limits[nvidia.com/gpu]", "-1 is not a whole number"),
        (None, {GPU: "0.5"}, "requests[nvidia.com/gpu]", "0.5 is not a whole number"),
        ({GPU: "2"}, {GPU: "1"}, "requests[nvidia.com/gpu]", "requests (1) and limits (2)"),
    ],
)
def test_counts_that_are_not_one_whole_number_are_denied_with_the_path(
    limits: Obj | None, requests: Obj | None, path: str, text: str
) -> None:
    bad: Obj = {"name": "cuda", "image": "cuda:12", "resources": {}}
    if limits is not None:
        bad["resources"]["limits"] = limits
    if requests is not None:
        bad["resources"]["requests"] = requests
    decision = decide(wrap(pod(bad)))
    assert not decision.allowed
    assert f"spec.containers[0].resources.{path}" in decision.message
    assert text in decision.message


@pytest.mark.parametrize(("raw", "count"), [("2", 2), (3, 3), ("2000m", 2), ("0.03k", 30)])
def test_whole_number_quantities_in_any_form_are_read_as_counts(raw: Any, count: int) -> None:
    cuda = {"name": "cuda", "image": "cuda:12", "resources": {"limits": {GPU: raw}}}
    decision, _ = translate(pod(cuda))
    ((_, translated),) = template_index(decision.templates).values()
    assert translated == count


def test_every_problem_is_listed_not_only_the_first() -> None:
    a = container("a", limits={GPU: "0.5"})
    b = container("b", limits={"gpu.intel.com/i915": "1"})
    decision = decide(wrap(pod(a, b)))
    assert "spec.containers[0].resources.limits[nvidia.com/gpu]" in decision.message
    assert "spec.containers[1].resources.limits[gpu.intel.com/i915]" in decision.message


# -- DRA already in the pod ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("entry", "objects", "described"),
    [
        (
            {"name": "mine", "resourceClaimTemplateName": "my-gpus"},
            [rct("my-gpus", "gpu.nvidia.com")],
            "spec.resourceClaims[0] mine: ResourceClaimTemplate my-gpus",
        ),
        (
            {"name": "mine", "resourceClaimName": "shared-gpu"},
            [
                claim(
                    "shared-gpu", [{"name": "g", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]
                )
            ],
            "spec.resourceClaims[0] mine: ResourceClaim shared-gpu",
        ),
        (
            {"name": "mine", "resourceClaimName": "any-gpu"},
            [
                claim(
                    "any-gpu",
                    [
                        {
                            "name": "g",
                            "firstAvailable": [
                                {"name": "big", "deviceClassName": "gpu.example.com"},
                                {"name": "small", "deviceClassName": "gpu.nvidia.com"},
                            ],
                        }
                    ],
                )
            ],
            "spec.resourceClaims[0] mine: ResourceClaim any-gpu",
        ),
    ],
)
def test_a_pod_asking_for_the_same_class_through_dra_and_a_legacy_name_is_denied(
    entry: Obj, objects: list[Obj], described: str
) -> None:
    cuda = gpus("cuda", 1)
    cuda["resources"]["claims"] = [{"name": "mine"}]
    decision = decide(wrap(pod(cuda, resourceClaims=[entry])), objects=[*DEMO_NAMESPACES, *objects])
    assert not decision.allowed
    assert "spec.containers[0].resources.limits[nvidia.com/gpu]" in decision.message
    assert "nvidia.com/gpu maps to DeviceClass gpu.nvidia.com" in decision.message
    assert f"already requests through DRA ({described})" in decision.message
    assert "not both ways" in decision.message


def test_a_dra_claim_the_view_does_not_know_is_warned_about_and_translation_goes_on() -> None:
    entry = {"name": "theirs", "resourceClaimTemplateName": "not-synced-yet"}
    decision, result = translate(pod(gpus("cuda", 1), resourceClaims=[entry]))
    assert len(result["spec"]["resourceClaims"]) == 2
    assert any(
        "spec.resourceClaims[0] theirs: ResourceClaimTemplate not-synced-yet: not in" in w
        for w in decision.warnings
    )


def test_the_captured_claims_fixture_plus_a_legacy_request_of_its_class_is_denied() -> None:
    body = review("pod-create-with-resourceclaims", namespace=NS)
    obj = body["request"]["object"]
    obj["spec"]["containers"][0]["resources"]["limits"] = {GPU: "1"}
    obj["spec"]["containers"][0]["resources"]["requests"] = {GPU: "1"}
    theirs = rct("gpu-template", "gpu.nvidia.com")
    decision = decide(body, objects=[*DEMO_NAMESPACES, theirs])
    assert not decision.allowed
    assert "ResourceClaimTemplate gpu-template" in decision.message


# -- init containers and sidecars -----------------------------------------------------------


def _init_case(
    init: tuple[Obj, ...], app: tuple[Obj, ...], policy: Policy | None = None
) -> tuple[Decision, Obj, dict[tuple[str, str], Counter[Any]], int]:
    decision, result = translate(pod(*app, init=init), policy=policy)
    index = template_index(decision.templates)
    per_container = devices_after(result["spec"], index)
    held = sum(
        index[e["resourceClaimTemplateName"]][1] for e in result["spec"].get("resourceClaims", [])
    )
    return decision, result, per_container, held


@pytest.mark.parametrize(
    ("init", "app", "refs", "held"),
    [
        # shares the app container's claim: the pod holds one device, as with the device plugin
        ((gpus("warm", 1),), (gpus("cuda", 1),), {"warm": ["gpu-cuda"]}, 1),
        # a bigger app claim is shared too (the init container sees its two devices)
        ((gpus("warm", 1),), (gpus("cuda", 2),), {"warm": ["gpu-cuda"]}, 2),
        # the smallest claim that is big enough
        ((gpus("warm", 1),), (gpus("big", 2), gpus("small", 1)), {"warm": ["gpu-small"]}, 3),
        # no single claim is big enough: one top-up claim for its whole count, never the whole
        # pool (the pod holds 3 where the device plugin would hold 2: at most the top-up more)
        ((gpus("warm", 2),), (gpus("cuda", 1),), {"warm": ["gpu-init"]}, 3),
        ((gpus("warm", 3),), (gpus("a", 1), gpus("b", 1)), {"warm": ["gpu-init"]}, 5),
        # one top-up, sized for the largest init container without a claim of its own size
        (
            (gpus("one", 1), gpus("three", 3), gpus("four", 4)),
            (gpus("cuda", 2),),
            {"one": ["gpu-cuda"], "three": ["gpu-init"], "four": ["gpu-init"]},
            6,
        ),
        # a smaller app claim that is big enough is preferred to the top-up
        (
            (gpus("two", 2), gpus("five", 5)),
            (gpus("cuda", 2),),
            {"two": ["gpu-cuda"], "five": ["gpu-init"]},
            7,
        ),
        # no app container asks: the top-up is all there is, shared by the init containers
        (
            (gpus("one", 1), gpus("two", 2)),
            (container("app"),),
            {"one": ["gpu-init"], "two": ["gpu-init"]},
            2,
        ),
        # a sidecar started before it runs alongside: not shareable, so the pod needs 1 + 2
        ((sidecar("proxy", 1), gpus("warm", 2)), (container("app"),), {"warm": ["gpu-init"]}, 3),
        # a sidecar started after it is shareable
        ((gpus("warm", 1), sidecar("proxy", 1)), (container("app"),), {"warm": ["gpu-proxy"]}, 1),
        # a sidecar before it does not help, the app container does
        ((sidecar("proxy", 1), gpus("warm", 1)), (gpus("cuda", 1),), {"warm": ["gpu-cuda"]}, 2),
    ],
)
def test_init_containers_get_no_devices_beyond_what_the_device_plugin_would_hold(
    init: tuple[Obj, ...], app: tuple[Obj, ...], refs: dict[str, list[str]], held: int
) -> None:
    _, result, per_container, total = _init_case(init, app)
    inits = {c["name"]: c for c in result["spec"]["initContainers"]}
    for name, expected in refs.items():
        assert claim_refs(inits[name]) == expected
    assert total == held
    for c in [*init, *app]:
        asked = int(c["resources"].get("limits", {}).get(GPU, 0))
        field = "initContainers" if c in init else "containers"
        got = per_container[field, c["name"]][GPU_CLASS]
        if field == "containers" or c.get("restartPolicy") == "Always":
            assert got == asked, c["name"]
        else:
            assert got >= asked, c["name"]


def test_a_sidecar_gets_a_claim_of_its_own_like_an_app_container() -> None:
    decision, result, per_container, held = _init_case((sidecar("proxy", 1),), (gpus("cuda", 2),))
    assert claim_refs(result["spec"]["initContainers"][0]) == ["gpu-proxy"]
    assert per_container["initContainers", "proxy"] == Counter({GPU_CLASS: 1})
    assert held == 3
    assert any(
        w.startswith("sidecar container proxy: nvidia.com/gpu: 1 -> claim gpu-proxy")
        for w in decision.warnings
    )


def test_the_init_container_warning_says_which_claims_it_shares() -> None:
    decision, _, _, _ = _init_case((gpus("warm", 3),), (gpus("cuda", 1),))
    expected = (
        r"init container warm: nvidia\.com/gpu: 3 -> shares claim gpu-init "
        r"\(template dra-gpu-nvidia-com-3-[0-9a-f]{10}, class gpu\.nvidia\.com\)"
    )
    assert any(re.fullmatch(expected, w) for w in decision.warnings), decision.warnings


def test_with_init_containers_separate_each_init_container_gets_its_own_claim() -> None:
    policy = policy_from("translation: {initContainers: separate}")
    _, result, per_container, held = _init_case((gpus("warm", 1),), (gpus("cuda", 2),), policy)
    assert claim_refs(result["spec"]["initContainers"][0]) == ["gpu-warm"]
    assert per_container["initContainers", "warm"] == Counter({GPU_CLASS: 1})
    assert held == 3


def test_ephemeral_containers_are_left_to_the_api_server() -> None:
    obj = pod(gpus("cuda", 1), ephemeralContainers=[gpus("debug", 1)])
    decision = decide(wrap(obj))
    assert decision.allowed
    touched = {op["path"].split("/resources")[0] for op in decision.patch}
    assert "/spec/ephemeralContainers/0" not in touched


# -- workloads -----------------------------------------------------------------------------


def test_workload_templates_are_left_alone_by_default() -> None:
    decision = decide(wrap(deployment(gpus("cuda", 2))))
    assert decision.allowed
    assert decision.patch == ()


@pytest.mark.parametrize("operation", ["CREATE", "UPDATE"])
def test_translate_workloads_rewrites_the_pod_template_of_a_deployment(operation: str) -> None:
    policy = policy_from("translation: {translateWorkloads: true}")
    body = review("deployment-create-legacy-gpu", namespace=NS, operation=operation)
    obj = body["request"]["object"]
    if operation == "UPDATE":
        body["request"]["oldObject"] = obj
    decision = decide(body, policy=policy)
    assert decision.allowed
    result = apply(obj, decision.patch)
    assert_valid(result)
    spec = result["spec"]["template"]["spec"]
    assert spec["containers"][0]["resources"] == {"claims": [{"name": "gpu-cuda"}]}
    (template,) = decision.templates
    assert spec["resourceClaims"] == [
        {"name": "gpu-cuda", "resourceClaimTemplateName": template["metadata"]["name"]}
    ]


def test_translate_workloads_reaches_the_pod_template_of_a_cronjob() -> None:
    policy = policy_from("translation: {translateWorkloads: true}")
    cronjob = {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": "nightly", "namespace": NS},
        "spec": {
            "schedule": "0 3 * * *",
            "jobTemplate": {
                "spec": {
                    "template": {
                        "spec": {"restartPolicy": "Never", "containers": [gpus("train", 4)]}
                    }
                }
            },
        },
    }
    decision, result = translate(cronjob, policy=policy)
    spec = result["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert claim_refs(spec["containers"][0]) == ["gpu-train"]
    assert decision.patch[0]["path"].startswith("/spec/jobTemplate/spec/template/spec/containers/0")


def test_a_workload_that_could_not_be_translated_is_denied_when_applied() -> None:
    i915 = container("render", limits={"gpu.intel.com/i915": "1"})
    decision = decide(wrap(deployment(i915)), Endpoint.VALIDATE)
    assert not decision.allowed
    assert decision.denied_by == ("translate-validate",)
    assert "spec.template.spec.containers[0].resources.limits[gpu.intel.com/i915]" in (
        decision.message
    )
    assert (
        "add `mappings: [{resource: gpu.intel.com/i915, deviceClassName: <class>}]`"
        in decision.message
    )


def test_a_translatable_workload_is_told_what_its_pods_will_get() -> None:
    decision = decide(review("deployment-create-legacy-gpu", namespace=NS), Endpoint.VALIDATE)
    assert decision.allowed
    assert decision.warnings == (
        "container cuda: nvidia.com/gpu: 2 becomes a DRA claim on DeviceClass gpu.nvidia.com "
        "when its pods are created (gpu-mode=translate)",
    )


def test_a_workload_update_keeps_problems_it_already_had_as_warnings() -> None:
    i915 = container("render", limits={"gpu.intel.com/i915": "1"})
    old = deployment(i915)
    new = deployment(i915)
    new["metadata"]["labels"] = {"team": "research"}
    decision = decide(wrap(new, operation="UPDATE", old=old), Endpoint.VALIDATE)
    assert decision.allowed
    assert any("predates this change" in w for w in decision.warnings)
    worse = deployment(i915, container("second", limits={"gpu.intel.com/i915": "1"}))
    decision = decide(wrap(worse, operation="UPDATE", old=old), Endpoint.VALIDATE)
    assert not decision.allowed
    assert "containers[1]" in decision.message
    assert "containers[0]" not in decision.message


def test_pods_are_not_validated_again_so_a_fail_open_pod_can_still_run() -> None:
    decision = decide(review("pod-create-legacy-gpu", namespace=NS), Endpoint.VALIDATE)
    assert decision.allowed
    assert decision.warnings == ()


# -- bad input and policy ------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec",
    [
        {"containers": [{"name": "c", "resources": {"limits": "many"}}]},
        {"containers": [{"name": "c", "resources": {"limits": {GPU: "1"}}}], "resourceClaims": {}},
        {
            "containers": [{"name": "c", "resources": {"limits": {GPU: "1"}}}],
            "resourceClaims": ["x"],
        },
        {"containers": [{"name": "c", "resources": {"limits": {GPU: "1"}, "claims": "x"}}]},
    ],
)
def test_a_malformed_pod_is_allowed_unchanged_by_the_mutating_webhook(spec: Obj) -> None:
    obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": NS},
        "spec": spec,
    }
    decision = decide(wrap(obj))
    assert decision.allowed
    assert decision.patch == ()


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("translation: {templateNamePrefix: Bad_Prefix}", "translation.templateNamePrefix"),
        ("translation: {templateNamePrefix: ''}", "translation.templateNamePrefix"),
        ("translation: {claimNamePrefix: -x}", "translation.claimNamePrefix"),
        ("translation: {initContainers: maybe}", "translation.initContainers"),
        (
            "translation: {translateWorkload: true}",
            "unknown key `translateWorkload` under `translation` (did you mean "
            "`translateWorkloads`?)",
        ),
    ],
)
def test_translation_policy_errors_name_the_key(text: str, key: str) -> None:
    with pytest.raises(PolicyError, match=re.escape(key)):
        policy_from(text)


def test_the_embedded_policy_ships_translation_off_for_workloads_and_sharing_init_devices() -> None:
    policy = make_pipeline().policy
    assert policy.translation.translate_workloads is False
    assert policy.translation.init_containers == "share"
    assert policy.translation.template_name_prefix == "dra"


@pytest.mark.parametrize("name", ["pod-create-legacy-gpu", "deployment-create-legacy-gpu"])
def test_the_captured_objects_pass_the_schema_check_before_translation(name: str) -> None:
    kubernetes_validate.validate(load_fixture(name)["request"]["object"], "1.34.0", strict=True)


def test_reapplying_a_translated_workload_manifest_gives_the_same_translation_again() -> None:
    """`kubectl apply` (client-side) keeps the claims the webhook added and re-adds the GPU."""
    reapplied, translated, decision = reapplied_manifest(templates_in_view=True)
    assert decision.allowed, decision.message
    again = apply(reapplied, decision.patch)
    assert_valid(again)
    assert orjson.dumps(again, option=orjson.OPT_SORT_KEYS) == orjson.dumps(
        translated, option=orjson.OPT_SORT_KEYS
    )


def test_a_workload_update_with_its_own_claim_of_the_same_class_is_still_denied() -> None:
    policy = policy_from("translation: {translateWorkloads: true}")
    cuda = gpus("cuda", 1)
    cuda["resources"]["claims"] = [{"name": "mine"}]
    obj = deployment(cuda)
    obj["spec"]["template"]["spec"]["resourceClaims"] = [
        {"name": "mine", "resourceClaimTemplateName": "my-gpus"}
    ]
    decision = decide(
        wrap(obj, operation="UPDATE", old=obj),
        objects=[*DEMO_NAMESPACES, rct("my-gpus", "gpu.nvidia.com")],
        policy=policy,
    )
    assert not decision.allowed
    assert "ResourceClaimTemplate my-gpus" in decision.message
