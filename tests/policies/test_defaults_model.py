"""The defaults planner reads claims through the claim model and still writes the same patch,
byte for byte, as the planner that walked the raw requests (tests/policies/defaults_oracle.py),
whatever the shape of the claim: well formed, partial, or with members of the wrong type."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.policies.defaults import ClaimDefaults, plan
from tests.helpers import policy_from
from tests.policies.defaults_oracle import old_plan

EXAMPLE = "gpu.example.com"
DEFAULTS = ClaimDefaults(
    policy_from(
        """
defaults:
  deviceClasses:
    gpu.example.com:
      selectors: ['device.driver == "a"', 'device.driver != "b"']
      config:
        - driver: gpu.example.com
          parameters: {kind: GpuConfig}
      tolerations: [{key: k, operator: Exists}]
      count: 2
    gpu.nvidia.com:
      tolerations: [{key: n, operator: Exists}]
      config:
        - driver: nvidia
          parameters: {kind: N}
  namespaceDeviceClasses:
    - namespaceSelector: {matchLabels: {team: a}}
      deviceClassName: gpu.example.com
"""
    ).defaults
)

ODD = st.one_of(st.none(), st.integers(-1, 3), st.booleans(), st.just(""), st.just([]), st.just({}))
CLASS = st.one_of(st.sampled_from([EXAMPLE, "gpu.nvidia.com", "other"]), ODD)
SELECTOR = st.one_of(
    st.just({"cel": {"expression": 'device.driver == "a"'}}),
    st.just({"cel": {"expression": "other"}}),
    st.just({"cel": {"expression": 3}}),
    st.just({"cel": None}),
    ODD,
)
NAME = st.one_of(st.sampled_from(["gpu", "a", "b"]), ODD)


def _members(with_class: bool) -> st.SearchStrategy[dict[str, Any]]:
    optional: dict[str, st.SearchStrategy[Any]] = {
        "name": NAME,
        "selectors": st.one_of(st.lists(SELECTOR, max_size=3), ODD),
        "tolerations": st.one_of(st.lists(st.just({"key": "t"}), max_size=2), ODD),
        "allocationMode": st.one_of(st.sampled_from(["ExactCount", "All"]), ODD),
        "count": st.one_of(st.integers(0, 4), ODD),
    }
    if with_class:
        optional["deviceClassName"] = CLASS
    return st.fixed_dictionaries({}, optional=optional)


SUB = st.one_of(_members(True), ODD)
REQUEST = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={
            "name": NAME,
            "exactly": st.one_of(_members(True), ODD),
            "firstAvailable": st.one_of(st.lists(SUB, max_size=3), ODD),
            "deviceClassName": CLASS,
        },
    ),
    ODD,
)
CONFIG = st.one_of(
    st.lists(
        st.one_of(
            st.fixed_dictionaries(
                {},
                optional={
                    "requests": st.one_of(st.lists(st.sampled_from(["gpu", "a", "gpu/b", 3])), ODD),
                    "opaque": st.one_of(
                        st.fixed_dictionaries(
                            {"driver": st.one_of(st.sampled_from([EXAMPLE, "nvidia"]), ODD)},
                            optional={"parameters": st.just({"x": 1})},
                        ),
                        ODD,
                    ),
                },
            ),
            ODD,
        ),
        max_size=3,
    ),
    ODD,
)
DEVICES = st.one_of(
    st.fixed_dictionaries(
        {}, optional={"requests": st.one_of(st.lists(REQUEST, max_size=3), ODD), "config": CONFIG}
    ),
    ODD,
)
SPEC = st.one_of(st.fixed_dictionaries({}, optional={"devices": DEVICES}), ODD)
LABELS = st.sampled_from([{}, {"team": "a"}])


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(SPEC, LABELS, st.sampled_from(["ResourceClaim", "ResourceClaimTemplate"]))
def test_the_patch_is_byte_identical_to_the_raw_walk(spec: Any, labels: Any, kind: str) -> None:
    obj = {"spec": spec} if kind == "ResourceClaim" else {"spec": {"spec": spec}}
    before = old_plan(kind, obj, DEFAULTS, labels)
    after = plan(kind, obj, DEFAULTS, labels)
    assert orjson.dumps(after.patch) == orjson.dumps(before.patch)
    assert after.added == before.added


WELL_REQUEST = st.one_of(
    st.fixed_dictionaries({"name": NAME, "exactly": _members(True)}),
    st.fixed_dictionaries(
        {"name": NAME, "firstAvailable": st.lists(st.one_of(_members(True), ODD), max_size=3)}
    ),
    st.fixed_dictionaries({"name": NAME}),
)
WELL_SPEC = st.fixed_dictionaries(
    {
        "devices": st.fixed_dictionaries(
            {"requests": st.lists(WELL_REQUEST, min_size=1, max_size=3)},
            optional={"config": CONFIG},
        )
    }
)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(WELL_SPEC, LABELS)
def test_the_patch_of_mostly_well_formed_claims_is_byte_identical(spec: Any, labels: Any) -> None:
    obj = {"spec": {"spec": spec}}
    before = old_plan("ResourceClaimTemplate", obj, DEFAULTS, labels)
    after = plan("ResourceClaimTemplate", obj, DEFAULTS, labels)
    assert orjson.dumps(after.patch) == orjson.dumps(before.patch)
    assert after.added == before.added
