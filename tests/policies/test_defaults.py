"""DeviceClass defaults: what is added, what is never touched, and the patch's validity."""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
import kubernetes_validate
import orjson
import pytest

from app.config import Policy
from app.errors import PolicyError
from app.pipeline import Decision, Endpoint, Pipeline
from app.policies.cel_runtime import cel_runtime
from app.policies.defaults import apply_to_template, claim_defaults, plan
from app.policies.parts import Parts
from app.transport.review import decode_review
from tests.claim_objects import GPU, claim, claim_spec, exact, first, sub, template
from tests.helpers import load_fixture, make_pipeline, make_view, policy_from, wrap

Obj = dict[str, Any]
EXAMPLE = "gpu.example.com"
A100 = 'device.attributes["gpu.example.com"].model == "A100"'
BIG = 'device.capacity["gpu.example.com"].memory.compareTo(quantity("40Gi")) >= 0'

DEFAULTS = f"""
defaults:
  deviceClasses:
    gpu.example.com:
      selectors:
        - '{A100}'
        - '{BIG}'
      config:
        - driver: gpu.example.com
          parameters:
            apiVersion: gpu.example.com/v1
            kind: GpuConfig
            sharing: {{strategy: TimeSlicing}}
      tolerations:
        - {{key: example.com/maintenance, operator: Exists, effect: NoSchedule}}
      count: 2
    gpu.nvidia.com:
      tolerations:
        - {{key: nvidia.com/gpu, operator: Equal, value: present, effect: NoExecute,
            tolerationSeconds: 30}}
  namespaceDeviceClasses:
    - namespaceSelector: {{matchExpressions: [{{key: gpu-mode, operator: In, values: [dra-only]}}]}}
      deviceClassName: gpu.example.com
    - namespaceSelector: {{}}
      deviceClassName: gpu.nvidia.com
"""


@pytest.fixture(scope="module")
def policy() -> Policy:
    return policy_from(DEFAULTS)


@pytest.fixture
def pipeline(policy: Policy) -> Pipeline:
    return make_pipeline(policy=policy)


def mutate(pipeline: Pipeline, body: Obj) -> Decision:
    return pipeline.review(Endpoint.MUTATE, decode_review(orjson.dumps(body)))


def patched(obj: Obj, decision: Decision) -> Obj:
    result: Obj = jsonpatch.apply_patch(obj, list(decision.patch))
    return result


def assert_kept(original: Any, result: Any, path: str = "") -> None:
    """Every field of `original` is in `result` with the same value; lists may only grow."""
    if isinstance(original, dict):
        assert isinstance(result, dict), path
        for key, value in original.items():
            assert key in result, f"{path}.{key} was removed"
            assert_kept(value, result[key], f"{path}.{key}")
    elif isinstance(original, list):
        assert isinstance(result, list), path
        assert len(result) >= len(original), f"{path} shrank"
        for index, value in enumerate(original):
            assert_kept(value, result[index], f"{path}[{index}]")
    else:
        assert original == result, f"{path}: {original!r} became {result!r}"


def test_defaults_on_the_captured_template_validate_strictly_and_keep_every_user_field(
    pipeline: Pipeline,
) -> None:
    body = load_fixture("resourceclaimtemplate-create")
    original = copy.deepcopy(body["request"]["object"])
    decision = mutate(pipeline, body)
    assert decision.allowed
    assert decision.patch
    result = patched(original, decision)

    assert kubernetes_validate.validate(result, "1.34.0", strict=True) == "1.34"
    assert_kept(original, result)
    request = result["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    assert [s["cel"]["expression"] for s in request["selectors"]] == [A100, BIG]
    assert request["count"] == 2  # the user's (defaulted) count, not the class default
    assert request["tolerations"] == [
        {"key": "example.com/maintenance", "operator": "Exists", "effect": "NoSchedule"}
    ]
    assert result["spec"]["spec"]["devices"]["config"] == [
        {
            "requests": ["gpu"],
            "opaque": {
                "driver": EXAMPLE,
                "parameters": {
                    "apiVersion": "gpu.example.com/v1",
                    "kind": "GpuConfig",
                    "sharing": {"strategy": "TimeSlicing"},
                },
            },
        }
    ]
    assert decision.warnings == (
        "ResourceClaimTemplate gpu-template: dra-webhook added to request gpu: "
        "1 selector of gpu.example.com, tolerations of gpu.example.com",
        "ResourceClaimTemplate gpu-template: dra-webhook added config for driver "
        "gpu.example.com (requests gpu)",
    )


def test_defaults_on_the_captured_claim_validate_strictly(pipeline: Pipeline) -> None:
    body = load_fixture("resourceclaim-create")
    original = copy.deepcopy(body["request"]["object"])
    result = patched(original, mutate(pipeline, body))
    assert kubernetes_validate.validate(result, "1.34.0", strict=True) == "1.34"
    assert_kept(original, result)
    selectors = result["spec"]["devices"]["requests"][0]["exactly"]["selectors"]
    assert [s["cel"]["expression"] for s in selectors] == [BIG, A100]


def test_a_request_without_a_class_gets_the_namespace_default_and_its_class_defaults(
    pipeline: Pipeline,
) -> None:
    obj = claim("c", {"name": "gpu"}, {"name": "other", "exactly": {"deviceClassName": ""}})
    obj["metadata"]["namespace"] = "gpu-e2e"
    decision = mutate(pipeline, wrap(obj))
    result = patched(obj, decision)
    first_request, second = result["spec"]["devices"]["requests"]
    assert first_request["exactly"]["deviceClassName"] == EXAMPLE
    assert first_request["exactly"]["count"] == 2  # neither allocationMode nor count given
    assert second["exactly"]["deviceClassName"] == EXAMPLE
    assert result["spec"]["devices"]["config"][0]["requests"] == ["gpu", "other"]
    assert kubernetes_validate.validate(result, "1.34.0", strict=True) == "1.34"
    assert decision.warnings[0].startswith(
        "ResourceClaim c: dra-webhook added to request gpu: deviceClassName gpu.example.com "
        "(namespace default), 2 selectors of gpu.example.com"
    )


def test_the_first_matching_namespace_default_wins(pipeline: Pipeline) -> None:
    obj = claim("c", {"name": "gpu", "exactly": {}}, namespace="default")
    result = patched(obj, mutate(pipeline, wrap(obj)))
    request = result["spec"]["devices"]["requests"][0]["exactly"]
    assert request["deviceClassName"] == GPU
    assert request["tolerations"][0]["tolerationSeconds"] == 30


@pytest.mark.parametrize(
    ("request_", "unchanged"),
    [
        pytest.param(
            exact(device_class=EXAMPLE, count=None, mode="All"), "count", id="all-gets-no-count"
        ),
        pytest.param(exact(device_class=EXAMPLE, count=5, mode=None), "count", id="count-kept"),
        pytest.param(
            exact(device_class=EXAMPLE, tolerations=[]), "tolerations", id="empty-tolerations-kept"
        ),
        pytest.param(
            exact(device_class=EXAMPLE, tolerations=[{"key": "k", "operator": "Exists"}]),
            "tolerations",
            id="tolerations-kept",
        ),
    ],
)
def test_what_the_user_wrote_is_never_replaced(
    pipeline: Pipeline, request_: Obj, unchanged: str
) -> None:
    obj = claim("c", request_, namespace="gpu-e2e")
    decision = mutate(pipeline, wrap(obj))
    result = patched(obj, decision)
    assert result["spec"]["devices"]["requests"][0]["exactly"].get(unchanged) == request_[
        "exactly"
    ].get(unchanged)
    assert all(op["op"] == "add" for op in decision.patch)
    assert_kept(obj, result)


def test_selectors_already_present_are_not_added_twice(pipeline: Pipeline) -> None:
    request_ = exact(device_class=EXAMPLE, selectors=[{"cel": {"expression": BIG}}])
    obj = claim("c", request_, namespace="gpu-e2e")
    result = patched(obj, mutate(pipeline, wrap(obj)))
    selectors = result["spec"]["devices"]["requests"][0]["exactly"]["selectors"]
    assert [s["cel"]["expression"] for s in selectors] == [BIG, A100]


@pytest.mark.parametrize(
    ("config", "added_for"),
    [
        pytest.param(None, ["gpu"], id="no-config"),
        pytest.param(
            [{"opaque": {"driver": EXAMPLE, "parameters": {"mine": True}}}], None, id="user-all"
        ),
        pytest.param(
            [{"requests": ["gpu"], "opaque": {"driver": EXAMPLE, "parameters": {}}}],
            None,
            id="user-this-request",
        ),
        pytest.param(
            [{"requests": ["other"], "opaque": {"driver": EXAMPLE, "parameters": {}}}],
            ["gpu"],
            id="user-other-request",
        ),
        pytest.param(
            [{"opaque": {"driver": "other.example.com", "parameters": {}}}],
            ["gpu"],
            id="user-other-driver",
        ),
    ],
)
def test_config_is_added_only_when_the_user_gave_none_for_that_driver(
    pipeline: Pipeline, config: list[Obj] | None, added_for: list[str] | None
) -> None:
    obj = claim("c", namespace="gpu-e2e")
    obj["spec"] = claim_spec(exact(device_class=EXAMPLE), config=config)
    result = patched(obj, mutate(pipeline, wrap(obj)))
    configs = result["spec"]["devices"].get("config", [])
    assert configs[: len(config or [])] == (config or [])
    ours = configs[len(config or []) :]
    assert [c["requests"] for c in ours] == ([added_for] if added_for else [])


def test_first_available_alternatives_get_their_class_defaults(pipeline: Pipeline) -> None:
    obj = claim("c", first("gpu", sub("big", EXAMPLE, 2), sub("any", GPU)), namespace="gpu-e2e")
    result = patched(obj, mutate(pipeline, wrap(obj)))
    big, any_ = result["spec"]["devices"]["requests"][0]["firstAvailable"]
    assert len(big["selectors"]) == 2
    assert any_["tolerations"][0]["key"] == "nvidia.com/gpu"
    assert result["spec"]["devices"]["config"][0]["requests"] == ["gpu/big"]
    assert kubernetes_validate.validate(result, "1.34.0", strict=True) == "1.34"


@pytest.mark.parametrize(
    "obj",
    [
        pytest.param(
            claim("c", exact(device_class="other.example.com")), id="class-without-defaults"
        ),
        pytest.param({**claim("c"), "spec": "oops"}, id="malformed-spec"),
        pytest.param(
            {**claim("c"), "spec": {"devices": {"requests": ["x", 3]}}}, id="bad-requests"
        ),
        pytest.param({**claim("c"), "spec": {}}, id="no-devices"),
        pytest.param(
            claim("c", *(exact(f"r{i}") for i in range(33))), id="more-requests-than-the-api-takes"
        ),
    ],
)
def test_nothing_to_add_means_no_patch(pipeline: Pipeline, obj: Obj) -> None:
    obj["metadata"]["namespace"] = "ml-research"
    decision = mutate(pipeline, wrap(obj))
    assert decision.allowed
    assert decision.patch == ()
    assert decision.warnings == ()


def test_an_update_is_left_alone(pipeline: Pipeline) -> None:
    obj = claim("c", {"name": "gpu"}, namespace="gpu-e2e")
    assert mutate(pipeline, wrap(obj, operation="UPDATE", old=obj)).patch == ()


def test_no_defaults_configured_means_no_patch() -> None:
    body = load_fixture("resourceclaimtemplate-create")
    assert mutate(make_pipeline(), body).patch == ()


def test_apply_to_template_matches_the_patch_and_does_not_touch_its_input(policy: Policy) -> None:
    defaults = Parts(policy).build(claim_defaults)
    built = template("gpu-x", {"name": "gpu", "exactly": {"deviceClassName": EXAMPLE}})
    before = copy.deepcopy(built)
    labels = {"gpu-mode": "translate"}
    result, added = apply_to_template(built, defaults, labels)
    assert built == before
    planned = plan("ResourceClaimTemplate", built, defaults, labels)
    assert result == jsonpatch.apply_patch(built, planned.patch)
    assert result["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"] == 2
    assert added == tuple(planned.added)
    assert kubernetes_validate.validate(result, "1.34.0", strict=True) == "1.34"
    unchanged, nothing = apply_to_template(template("t", exact(device_class="x")), defaults, labels)
    assert nothing == ()
    assert unchanged == template("t", exact(device_class="x"))


def test_default_selectors_are_compiled_at_load_and_a_bad_one_names_its_class() -> None:
    bad = policy_from(
        "defaults: {deviceClasses: {gpu.nvidia.com: {selectors: ['true', 'device.driver ==']}}}"
    )
    with pytest.raises(
        PolicyError,
        match=r"defaults\.deviceClasses\.gpu\.nvidia\.com\.selectors\[1\] does not compile",
    ):
        Pipeline(bad, make_view(), own_namespace="dra-webhook")
    good = Pipeline(policy_from(DEFAULTS), make_view(), own_namespace="dra-webhook").parts
    assert (
        good.get(cel_runtime).cache.stats().misses == 2
    )  # the two gpu.example.com selectors, compiled once


def test_templates_translation_creates_get_the_class_defaults_and_validate_strictly() -> None:
    mapping = "mappings: [{resource: nvidia.com/gpu, deviceClassName: gpu.example.com}]\n"
    plain = make_pipeline(policy=policy_from(mapping))
    with_defaults = make_pipeline(policy=policy_from(DEFAULTS + mapping))
    body = load_fixture("pod-create-legacy-gpu")
    body["request"]["namespace"] = "ml-research"
    body["request"]["object"]["metadata"]["namespace"] = "ml-research"
    before = mutate(plain, copy.deepcopy(body)).templates
    after = mutate(with_defaults, body).templates
    assert len(before) == len(after) == 1
    made = after[0]
    exactly = made["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    assert [s["cel"]["expression"] for s in exactly["selectors"]] == [A100, BIG]
    assert exactly["tolerations"][0]["key"] == "example.com/maintenance"
    assert (
        exactly["count"] == before[0]["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"]
    )
    assert made["spec"]["spec"]["devices"]["config"][0]["opaque"]["driver"] == EXAMPLE
    assert made["metadata"]["name"] != before[0]["metadata"]["name"]  # named by its content
    assert kubernetes_validate.validate(made, "1.34.0", strict=True) == "1.34"
    # The create comes back through /mutate: nothing more to add, so it is created as named.
    assert mutate(with_defaults, wrap(made)).patch == ()
