"""Reading a DeviceTaintRule in each version that serves it, and the toleration facts."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.errors import ObjectShapeError
from app.k8s.taint_rules import parse_taint_rule, tolerated_forever, tolerates
from tests.policies.taint_objects import rule


@pytest.mark.parametrize("version", ["v1alpha3", "v1beta2", "v1"])
def test_a_rule_reads_alike_in_every_version_that_serves_it(version: str) -> None:
    read = parse_taint_rule(
        rule("drain", {"driver": "d", "pool": "p", "device": "x"}, version=version)
    )
    assert (read.driver, read.pool, read.device, read.effect) == ("d", "p", "x", "NoExecute")
    assert read.api_version == f"resource.k8s.io/{version}"
    assert not read.uses_cel


def test_a_v1alpha3_rule_of_1_34_keeps_its_class_and_cel_selectors_with_their_paths() -> None:
    obj = rule(
        "cel",
        {"deviceClassName": "gpu", "selectors": [{"cel": {"expression": "true"}}]},
        version="v1alpha3",
    )
    read = parse_taint_rule(obj)
    assert read.device_class == "gpu"
    assert read.selectors == (("spec.deviceSelector.selectors[0].cel.expression", "true"),)
    assert read.uses_cel and not read.selects_all(34)


@pytest.mark.parametrize(
    ("selector", "minor", "everything", "nothing"),
    [
        ({}, 34, True, False),
        ({}, 37, True, False),
        ({}, None, True, False),
        (None, 34, True, False),  # the 1.34 tracker filters only when the selector is set
        (None, 35, False, True),  # 1.35 on: "No selector matches no devices"
        (None, None, False, True),
        ({"pool": "p"}, 34, False, False),
    ],
)
def test_what_a_rule_without_names_selects_depends_on_the_release(
    selector: Any, minor: int | None, everything: bool, nothing: bool
) -> None:
    read = parse_taint_rule(rule("r", selector))
    assert read.selects_all(minor) is everything
    assert read.selects_none(minor) is nothing


@pytest.mark.parametrize(
    ("obj", "path"),
    [
        ("text", "object"),
        ({"metadata": {"name": 3}, "spec": {}}, "metadata.name"),
        ({"metadata": {"name": "r"}}, "spec"),
        ({"spec": {"deviceSelector": {}}}, "spec.taint"),
        ({"spec": {"taint": {"effect": "NoExecute"}}}, "spec.taint.key"),
        ({"spec": {"taint": {"key": "k", "effect": "Evict"}}}, "spec.taint.effect"),
        ({"spec": {"taint": {"key": "k", "effect": "None"}, "deviceSelector": []}},
         "spec.deviceSelector"),
        ({"spec": {"taint": {"key": "k", "effect": "None"}, "deviceSelector": {"pool": 1}}},
         "spec.deviceSelector.pool"),
        ({"spec": {"taint": {"key": "k", "effect": "None"},
                   "deviceSelector": {"selectors": [{"cel": {}}]}}},
         "spec.deviceSelector.selectors[0].cel.expression"),
    ],
)  # fmt: skip
def test_a_malformed_rule_is_refused_naming_the_field(obj: Any, path: str) -> None:
    with pytest.raises(ObjectShapeError) as raised:
        parse_taint_rule(obj)
    assert raised.value.path == path


values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=6),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=10,
)


@given(values)
def test_any_shape_is_read_or_refused_with_a_field_path(obj: Any) -> None:
    try:
        parse_taint_rule(obj)
    except ObjectShapeError as exc:
        assert exc.path


@pytest.mark.parametrize(
    ("toleration", "tolerated"),
    [
        ({"key": "m", "operator": "Exists", "effect": "NoExecute"}, True),
        ({"operator": "Exists", "effect": "NoExecute"}, True),
        ({"key": "m", "operator": "Equal", "value": "drain", "effect": "NoExecute"}, True),
        ({"key": "m", "value": "drain", "effect": "NoExecute"}, True),
        ({"key": "m", "operator": "Equal", "value": "other", "effect": "NoExecute"}, False),
        ({"key": "other", "operator": "Exists", "effect": "NoExecute"}, False),
        ({"key": "m", "operator": "Exists", "effect": "NoSchedule"}, False),
        # it lets the scheduler allocate the device, but the eviction controller only counts a
        # toleration whose effect is NoExecute in so many words (claimEvictionTime)
        ({"key": "m", "operator": "Exists"}, False),
        ({"operator": "Exists"}, False),
        # with tolerationSeconds the pods go, later
        ({"key": "m", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 60}, False),
    ],
)
def test_only_a_no_execute_toleration_without_seconds_keeps_pods_from_eviction(
    toleration: dict[str, Any], tolerated: bool
) -> None:
    assert tolerated_forever([toleration], "m", "drain") is tolerated


def test_an_empty_effect_or_key_tolerates_any_as_upstream_tolerates_taint() -> None:
    assert tolerates({"operator": "Exists"}, "m", "v", "NoExecute")
    assert tolerates({"key": "m", "operator": "Exists"}, "m", "v", "NoSchedule")
    assert not tolerates({"key": "m", "operator": "Sometimes"}, "m", "v", "NoSchedule")
    assert not tolerates("text", "m", "v", "NoSchedule")
