"""GPU sharing through the pipeline: each legacy source's names become one consumable-capacity
request (translate), are denied with that request as the fix (dra-only), and the capacity they
ask for is counted by capacity quotas after the devices' requestPolicy rounding."""

from __future__ import annotations

import re
from typing import Any

import kubernetes_validate
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.config.policy import Policy
from app.errors import PolicyError
from app.pipeline import Decision, Endpoint, Pipeline
from app.transport.review import decode_review
from tests.helpers import DEMO_NAMESPACES, make_pipeline, namespace, policy_from, wrap
from tests.policies.translate_support import KUBERNETES_VERSION, apply, assert_valid
from tests.sharing_objects import SHARED, sharing_cluster

Obj = dict[str, Any]
NS = "ml-research"
SHARE_NAMES = re.compile(r"^(nvidia\.com/gpu.*|volcano\.sh/.*|aliyun\.com/.*)$")
SHAREABLE = "device.allowMultipleAllocations"


def container(name: str, limits: Obj, **extra: Any) -> Obj:
    """As the API server sends it: limits copied into requests, amounts canonicalized."""
    return {
        "name": name,
        "image": "cuda:12",
        "resources": {"limits": dict(limits), "requests": dict(limits)},
        **extra,
    }


def pod(*containers: Obj, ns: str = NS, init: tuple[Obj, ...] = ()) -> Obj:
    spec: Obj = {"containers": list(containers)}
    if init:
        spec["initContainers"] = list(init)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": ns},
        "spec": spec,
    }


def pipeline(policy: Policy | None = None, objects: list[Obj] | None = None) -> Pipeline:
    return make_pipeline([*DEMO_NAMESPACES, *sharing_cluster(), *(objects or [])], policy)


def decide(p: Pipeline, obj: Obj, endpoint: Endpoint = Endpoint.MUTATE, **kw: Any) -> Decision:
    return p.review(endpoint, decode_review(orjson.dumps(wrap(obj, **kw))))


def translated(p: Pipeline, obj: Obj) -> tuple[Obj, list[Obj], Decision]:
    decision = decide(p, obj)
    assert decision.allowed, decision.message
    patched = apply(obj, decision.patch) if decision.patch else obj
    return patched, list(decision.templates), decision


def exactly(template: Obj) -> Obj:
    (request,) = template["spec"]["spec"]["devices"]["requests"]
    result: Obj = request["exactly"]
    return result


PERCENT_OF = """
sharing:
  - name: hami
    deviceClassName: gpu-shared.nvidia.com
    count: nvidia.com/gpu
    capacities:
      - {resource: nvidia.com/gpumem, capacity: memory, unit: Mi}
      - {resource: nvidia.com/gpumem-percentage, capacity: memory, percent: true,
         percentOf: 80Gi, selectSize: true}
      - {resource: nvidia.com/gpucores, capacity: cores}
"""

SOURCES = [
    pytest.param(
        {"nvidia.com/gpu": "2", "nvidia.com/gpumem": "4k", "nvidia.com/gpucores": "30"},
        None,
        2,
        {"memory": "4000Mi"},
        id="HAMi memory in MiB (4000 arrives as 4k), cores dropped",
    ),
    pytest.param(
        {"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "25", "nvidia.com/gpucores": "30"},
        PERCENT_OF,
        1,
        {"memory": "20480Mi", "cores": "30"},
        id="HAMi percentage of an 80Gi device, cores mapped by the rule",
    ),
    pytest.param(
        {"nvidia.com/gpumem": "3072"},
        None,
        1,
        {"memory": "3072Mi"},
        id="HAMi memory without nvidia.com/gpu: one share",
    ),
    pytest.param(
        {
            "volcano.sh/vgpu-number": "2",
            "volcano.sh/vgpu-memory": "2048",
            "volcano.sh/vgpu-cores": "50",
        },
        None,
        2,
        {"memory": "2048Mi"},
        id="Volcano vGPU",
    ),
    pytest.param({"volcano.sh/vgpu-number": "1"}, None, 1, {}, id="Volcano count alone"),
    pytest.param({"aliyun.com/gpu-mem": "8"}, None, 1, {"memory": "8Gi"}, id="Alibaba gpushare"),
    pytest.param(
        {"nvidia.com/gpu.shared": "2"}, None, 1, {"shares": "2"}, id="time-slicing replicas"
    ),
]


@pytest.mark.parametrize(("limits", "policy", "count", "capacity"), SOURCES)
def test_each_legacy_source_becomes_one_capacity_request_that_validates(
    limits: Obj, policy: str | None, count: int, capacity: Obj
) -> None:
    p = pipeline(policy_from(policy) if policy else None)
    obj = pod(container("cuda", {**limits, "cpu": "1"}))
    patched, templates, decision = translated(p, obj)
    assert_valid(patched)
    kubernetes_validate.validate(patched, KUBERNETES_VERSION, strict=True)
    resources = patched["spec"]["containers"][0]["resources"]
    for which in ("limits", "requests"):
        assert [n for n in resources[which] if SHARE_NAMES.match(n)] == []
        assert resources[which]["cpu"] == "1"
    (template,) = templates
    kubernetes_validate.validate(template, KUBERNETES_VERSION, strict=True)
    body = exactly(template)
    assert body["deviceClassName"] == SHARED
    assert body["count"] == count
    assert body.get("capacity", {}).get("requests", {}) == capacity
    expressions = [s["cel"]["expression"] for s in body["selectors"]]
    assert expressions[0] == SHAREABLE
    if policy == PERCENT_OF:
        assert 'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("80Gi")) == 0' in (
            expressions
        )
    (entry,) = patched["spec"]["resourceClaims"]
    assert entry["resourceClaimTemplateName"] == template["metadata"]["name"]
    assert resources["claims"] == [{"name": entry["name"]}]
    assert any(f"class {SHARED}" in w for w in decision.warnings)


def test_a_core_limit_dra_cannot_express_is_removed_with_a_warning() -> None:
    obj = pod(container("cuda", {"nvidia.com/gpu": "1", "nvidia.com/gpucores": "30"}))
    _, templates, decision = translated(pipeline(), obj)
    (warning,) = [w for w in decision.warnings if "gpucores" in w and "removed" in w]
    assert "DRA has no capacity for it (sharing rule hami)" in warning
    assert "capacity" not in exactly(templates[0])


def test_a_plain_gpu_stays_a_whole_gpu() -> None:
    _, templates, _ = translated(pipeline(), pod(container("cuda", {"nvidia.com/gpu": "1"})))
    assert exactly(templates[0])["deviceClassName"] == "gpu.nvidia.com"
    assert "capacity" not in exactly(templates[0])


def test_a_memory_percentage_without_a_size_is_denied_naming_the_key_to_add() -> None:
    obj = pod(container("cuda", {"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "50"}))
    decision = decide(pipeline(), obj)
    assert not decision.allowed
    assert "spec.containers[0].resources.limits[nvidia.com/gpumem-percentage]" in decision.message
    assert "add `percentOf: " in decision.message
    assert "sharing rule hami (sharing[0].capacities[1])" in decision.message


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        ({"nvidia.com/gpumem-percentage": "150"}, "must be 1 to 100"),
        ({"nvidia.com/gpumem": "1.5"}, "is not a whole number"),
        ({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "-4"}, "is not a whole number"),
        ({"nvidia.com/gpumem": "x"}, "is not a whole number"),
    ],
)
def test_bad_amounts_are_denied_with_the_field_path(limits: Obj, message: str) -> None:
    p = pipeline(policy_from(PERCENT_OF))
    decision = decide(p, pod(container("cuda", limits)))
    assert not decision.allowed
    assert message in decision.message
    assert "spec.containers[0].resources.limits[" in decision.message


def test_two_names_for_one_capacity_are_denied() -> None:
    p = pipeline(policy_from(PERCENT_OF))
    limits = {"nvidia.com/gpumem": "1024", "nvidia.com/gpumem-percentage": "10"}
    decision = decide(p, pod(container("cuda", limits)))
    assert not decision.allowed
    assert "both ask for memory of one share" in decision.message


def test_translation_runs_once_and_is_idempotent_and_dry_run_safe() -> None:
    p = pipeline()
    obj = pod(container("cuda", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4k"}))
    patched, templates, _ = translated(p, obj)
    again = decide(p, patched)
    assert again.allowed and not again.patch and not again.templates
    dry = decide(p, obj, dry_run=True)
    assert dry.allowed and dry.patch
    assert [t["metadata"]["name"] for t in dry.templates] == [
        t["metadata"]["name"] for t in templates
    ]


def test_init_containers_share_an_app_share_of_the_same_shape() -> None:
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4k"}
    obj = pod(container("cuda", limits), init=(container("warm", limits),))
    patched, templates, _ = translated(pipeline(), obj)
    assert len(templates) == 1
    assert len(patched["spec"]["resourceClaims"]) == 1
    (init,) = patched["spec"]["initContainers"]
    assert init["resources"]["claims"] == patched["spec"]["containers"][0]["resources"]["claims"]


def test_the_same_shape_in_two_pods_reuses_one_template_and_another_amount_does_not() -> None:
    p = pipeline()
    first = translated(p, pod(container("a", {"aliyun.com/gpu-mem": "8"})))[1]
    second = translated(p, pod(container("b", {"aliyun.com/gpu-mem": "8"})))[1]
    other = translated(p, pod(container("c", {"aliyun.com/gpu-mem": "16"})))[1]
    assert first[0]["metadata"]["name"] == second[0]["metadata"]["name"]
    assert other[0]["metadata"]["name"] != first[0]["metadata"]["name"]


# -- dra-only ---------------------------------------------------------------------------------


def test_dra_only_denies_sharing_names_and_shows_the_capacity_claim() -> None:
    obj = pod(container("cuda", {"nvidia.com/gpu": "2", "nvidia.com/gpumem": "4k"}), ns="gpu-e2e")
    decision = decide(pipeline(), obj, Endpoint.VALIDATE)
    assert not decision.allowed
    assert (
        "nvidia.com/gpumem: 4k -> use DeviceClass gpu-shared.nvidia.com "
        "(capacity memory: 4000Mi, sharing rule hami)"
    ) in decision.message
    assert "(count 2, shared, sharing rule hami)" in decision.message
    assert "capacity: {requests: {memory: 4000Mi}}" in decision.message
    assert "deviceClassName: gpu-shared.nvidia.com, count: 2" in decision.message


# -- the policy -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("sharing: [{name: a, deviceClassName: c}]", "needs a count or capacities"),
        (
            "sharing: [{name: a, deviceClassName: c, capacities: [{resource: x/y, percent: true}]}]",
            "need a capacity",
        ),
        (
            "sharing: [{name: a, deviceClassName: c, capacities: "
            "[{resource: x/y, capacity: memory, percent: true, percentOf: 0Gi}]}]",
            "not a positive size",
        ),
        (
            "sharing: [{name: a, deviceClassName: c, count: x/n}, "
            "{name: b, deviceClassName: c, count: x/n}]",
            "x/n is in sharing rules a and b",
        ),
        (
            "sharing: [{name: a, deviceClassName: c, capacities: [{resource: x/y, capacity: 'a b'}]}]",
            "is not a capacity name",
        ),
    ],
)
def test_bad_sharing_rules_fail_at_load_naming_the_key(text: str, error: str) -> None:
    with pytest.raises(PolicyError, match=re.escape(error)):
        policy_from(text)


def test_a_share_count_the_legacy_list_leaves_out_still_tells_denials_apart() -> None:
    """dra-only memoizes its answers by the legacy names a container lists; HAMi's count
    (`nvidia.com/gpu`, dropped from the list here) is not one of them, yet the fix depends on it:
    two pods differing only in their number of shares must get their own snippets."""
    policy = policy_from("legacyResources: {names: [nvidia.com/gpumem]}")
    p = pipeline(policy)
    snippets = []
    for shares in ("1", "3"):
        limits = {"nvidia.com/gpu": shares, "nvidia.com/gpumem": "4000"}
        obj = pod({"name": "c", "resources": {"limits": limits}}, ns="gpu-e2e")
        decision = decide(p, obj, Endpoint.VALIDATE)
        assert not decision.allowed
        snippets.append(decision.message)
    assert snippets[0] != snippets[1]
    assert "count: 3" in snippets[1]


@settings(max_examples=150, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(
            [
                "nvidia.com/gpu",
                "nvidia.com/gpumem",
                "nvidia.com/gpumem-percentage",
                "nvidia.com/gpucores",
                "volcano.sh/vgpu-memory",
                "aliyun.com/gpu-mem",
                "nvidia.com/gpu.shared",
            ]
        ),
        st.one_of(
            st.integers(-3, 200).map(str),
            st.sampled_from(["4k", "1.5", "", "1e3", "0x10", "Mi", "2Gi", "100m"]),
            st.text(max_size=6),
        ),
        min_size=1,
        max_size=4,
    )
)
def test_any_amount_of_any_sharing_name_is_translated_or_denied_never_an_error(
    limits: Obj,
) -> None:
    p = _fuzz_pipeline()
    decision = decide(p, pod(container("cuda", limits)))
    assert decision.code in (200, 403), decision.message
    if decision.allowed and decision.patch:
        patched = apply(pod(container("cuda", limits)), decision.patch)
        assert_valid(patched)
        for template in decision.templates:
            kubernetes_validate.validate(template, KUBERNETES_VERSION, strict=True)


_FUZZ: list[Pipeline] = []


def _fuzz_pipeline() -> Pipeline:
    if not _FUZZ:
        _FUZZ.append(pipeline(policy_from(PERCENT_OF)))
    return _FUZZ[0]


# -- capacity quotas --------------------------------------------------------------------------


QUOTA = """
quotas:
  - name: research
    namespaceSelector: {matchLabels: {team: research}}
    action: ACTION
    maxCapacityPerClaim: {gpu-shared.nvidia.com: {memory: 10Gi}, "*": {memory: 30Gi}}
    maxCapacityPerNamespace: {gpu-shared.nvidia.com: {memory: 16Gi}}
"""


def quota_pipeline(action: str = "deny", objects: list[Obj] | None = None) -> Pipeline:
    research = namespace(NS, "translate", team="research")
    return pipeline(policy_from(QUOTA.replace("ACTION", action)), [research, *(objects or [])])


def share_claim(name: str, memory: str, count: int = 1, device_class: str = SHARED) -> Obj:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "exactly": {
                            "deviceClassName": device_class,
                            "count": count,
                            "capacity": {"requests": {"memory": memory}},
                        },
                    }
                ]
            }
        },
    }


def test_a_claim_over_the_per_claim_capacity_is_denied_with_the_rounding_in_the_arithmetic() -> (
    None
):
    decision = decide(quota_pipeline(), share_claim("c", "4000Mi", count=3), Endpoint.VALIDATE)
    assert not decision.allowed
    assert (
        "ResourceClaim c asks for 3 x 4000Mi (counted 4Gi: the devices' requestPolicy) of memory "
        "of gpu-shared.nvidia.com = 12Gi; at most 10Gi per claim (quota research)"
    ) in decision.message


def test_rounding_applies_only_when_the_class_devices_agree_on_the_policy() -> None:
    """4 x 2500Mi is 10000Mi as written, under 10Gi; rounded up to 3Gi each it is 12Gi."""
    rounded = decide(quota_pipeline(), share_claim("c", "2500Mi", count=4), Endpoint.VALIDATE)
    assert not rounded.allowed
    assert "4 x 2500Mi (counted 3Gi: the devices' requestPolicy)" in rounded.message
    disagree = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "node-c"},
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": "node-c",
            "pool": {"name": "node-c", "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {
                    "name": "gpu-0",
                    "allowMultipleAllocations": True,
                    "capacity": {"memory": {"value": "80Gi"}},
                }
            ],
        },
    }
    p = quota_pipeline(objects=[disagree])
    assert decide(p, share_claim("c", "2500Mi", count=4), Endpoint.VALIDATE).allowed


def test_valid_values_round_up_for_the_class_of_those_devices() -> None:
    decision = decide(
        quota_pipeline(),
        share_claim("c", "11Gi", count=2, device_class="shared.example.com"),
        Endpoint.VALIDATE,
    )
    assert not decision.allowed
    assert "2 x 11Gi (counted 20Gi: the devices' requestPolicy)" in decision.message
    assert "= 40Gi; at most 30Gi per claim" in decision.message


def test_the_namespace_capacity_counts_existing_claims() -> None:
    existing = share_claim("old", "8Gi")
    p = quota_pipeline(objects=[existing])
    decision = decide(p, share_claim("new", "9Gi"), Endpoint.VALIDATE)
    assert not decision.allowed
    assert "namespace ml-research allows 16Gi, 8Gi in use" in decision.message
    assert decide(p, share_claim("small", "8Gi"), Endpoint.VALIDATE).allowed


def test_a_deployment_of_hami_pods_is_checked_against_the_namespace_capacity() -> None:
    p = quota_pipeline()
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "infer", "namespace": NS},
        "spec": {
            "replicas": 5,
            "template": {
                "spec": {
                    "containers": [
                        container("cuda", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3500"})
                    ]
                }
            },
        },
    }
    decision = decide(p, deployment, Endpoint.VALIDATE)
    assert not decision.allowed
    assert (
        "Deployment infer needs 5 pods x 1 x 3500Mi (counted 4Gi: the devices' requestPolicy) "
        "of memory of gpu-shared.nvidia.com = 20Gi (5 replicas); namespace ml-research allows "
        "16Gi, 0 in use (quota research)"
    ) in decision.message
    warned = quota_pipeline("warn")
    decision = decide(warned, deployment, Endpoint.VALIDATE)
    assert decision.allowed and any("allows 16Gi" in w for w in decision.warnings)


def test_a_translated_share_over_the_per_claim_capacity_is_denied_naming_the_legacy_request() -> (
    None
):
    p = quota_pipeline()
    obj = pod(container("cuda", {"nvidia.com/gpu": "3", "nvidia.com/gpumem": "4k"}))
    decision = decide(p, obj, Endpoint.VALIDATE)
    assert not decision.allowed
    assert "container cuda asks for nvidia.com/gpu: 3, nvidia.com/gpumem: 4k" in decision.message
    assert "= 12Gi; at most 10Gi per claim" in decision.message


@pytest.mark.parametrize("amount", ["-1Gi", "0", "lots", True])
def test_a_bad_capacity_request_is_denied_with_its_field_path_where_a_capacity_quota_applies(
    amount: Any,
) -> None:
    decision = decide(quota_pipeline(), share_claim("c", amount), Endpoint.VALIDATE)
    assert not decision.allowed
    assert "spec.devices.requests[0].exactly.capacity.requests[memory]" in decision.message


@settings(max_examples=150, deadline=None)
@given(
    st.one_of(
        st.dictionaries(
            st.one_of(st.text(max_size=8), st.sampled_from(["memory", "gpu.nvidia.com/memory"])),
            st.one_of(
                st.text(max_size=8),
                st.integers(-5, 10**12),
                st.floats(allow_nan=True),
                st.booleans(),
                st.none(),
                st.lists(st.integers(-100, 100), max_size=2),
                st.sampled_from(["4Gi", "4000Mi", "1e3", "-1", "0.5", "10Gi"]),
            ),
            max_size=3,
        ),
        st.none(),
        st.text(max_size=5),
        st.lists(st.integers(-100, 100), max_size=2),
    )
)
def test_any_capacity_requests_are_counted_or_denied_with_a_path_never_an_error(
    requests: Any,
) -> None:
    obj = share_claim("c", "1Gi")
    obj["spec"]["devices"]["requests"][0]["exactly"]["capacity"] = {"requests": requests}
    decision = decide(_fuzz_quota(), obj, Endpoint.VALIDATE)
    assert decision.code in (200, 403, 422), decision.message  # 422: invalid, with the path
    if not decision.allowed:
        assert "spec.devices.requests[0].exactly" in decision.message


_FUZZ_QUOTA: list[Pipeline] = []


def _fuzz_quota() -> Pipeline:
    if not _FUZZ_QUOTA:
        _FUZZ_QUOTA.append(quota_pipeline())
    return _FUZZ_QUOTA[0]


def test_a_translated_share_above_every_devices_capacity_is_warned_about_as_never_satisfiable() -> (
    None
):
    """Translation creates the template itself, so it tells the pod's author what the scheduler
    will do with it: no 80Gi device can give 100000Mi."""
    obj = pod(container("cuda", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "100000"}))
    decision = decide(pipeline(), obj)
    assert decision.allowed
    assert decision.patch
    (never,) = [w for w in decision.warnings if w.startswith("claim gpu-cuda (template")]
    assert "none of the 2 matching devices can give it" in never
    assert "the most memory a device allows is 80Gi" in never


def test_a_translated_share_above_every_devices_capacity_is_denied_where_the_policy_says_so() -> (
    None
):
    policy = policy_from("cel: {selectors: {unsatisfiableByMode: {translate: deny}}}")
    obj = pod(container("cuda", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "100000"}))
    decision = decide(pipeline(policy), obj)
    assert not decision.allowed
    assert "no node in the cluster can satisfy the claims of Pod p" in decision.message
    assert "100000Mi" in decision.message
    fits = decide(
        pipeline(policy),
        pod(container("cuda", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4000"})),
    )
    assert fits.allowed
    assert not [w for w in fits.warnings if "satisfy" in w]
