"""GPU sharing through the pipeline: each legacy source's names become one consumable-capacity
request (translate), are denied with that request as the fix (dra-only); what capacity quotas
count of them is in tests/policies/quota/test_shares.py."""

from __future__ import annotations

import re
from typing import Any

import kubernetes_validate
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.errors import PolicyError
from app.pipeline import Decision, Endpoint, Pipeline
from tests.helpers import policy_from
from tests.policies.translate_support import KUBERNETES_VERSION, apply, assert_valid
from tests.sharing_objects import SHARED, container, decide, pipeline, pod

Obj = dict[str, Any]
SHARE_NAMES = re.compile(r"^(nvidia\.com/gpu.*|volcano\.sh/.*|aliyun\.com/.*)$")
SHAREABLE = "device.allowMultipleAllocations"


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
