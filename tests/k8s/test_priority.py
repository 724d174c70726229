"""A pod's priority and whether it may preempt (app.k8s.priority)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.k8s.priority import Classes, Priority, PriorityClass

HIGH = PriorityClass("inference-high", 1000)
LOW = PriorityClass("training-low", -10)
POLITE = PriorityClass("polite", 5000, "Never")
DEFAULT = PriorityClass("everyday", 10, global_default=True)


def test_a_pods_own_priority_and_policy_are_taken_as_the_admission_plugin_set_them() -> None:
    found = Classes([HIGH]).of_spec(
        {"priority": 1000, "priorityClassName": "inference-high", "preemptionPolicy": "Never"}
    )
    assert found == Priority(1000, "Never", "inference-high")


def test_a_templates_class_is_resolved_through_the_classes_known() -> None:
    found = Classes([HIGH]).of_spec({"priorityClassName": "inference-high"})
    assert found == Priority(1000, "PreemptLowerPriority", "inference-high")
    assert Classes([POLITE]).of_spec({"priorityClassName": "polite"}) == Priority(
        5000, "Never", "polite"
    )


def test_a_template_naming_an_unknown_class_has_no_known_priority() -> None:
    assert Classes([HIGH]).of_spec({"priorityClassName": "nobody-knows"}) is None


def test_a_template_naming_no_class_gets_the_global_default_or_zero() -> None:
    assert Classes([DEFAULT]).of_spec({}) == Priority(10, "PreemptLowerPriority", "everyday")
    assert Classes([HIGH]).of_spec({}) == Priority(0, "PreemptLowerPriority", "")


def test_the_cluster_class_wins_over_the_declared_one_of_the_same_name() -> None:
    declared = PriorityClass("inference-high", 1)
    assert Classes([HIGH], [declared]).of_spec({"priorityClassName": "inference-high"}) == (
        Priority(1000, "PreemptLowerPriority", "inference-high")
    )


def test_the_built_in_classes_are_always_known() -> None:
    found = Classes().of_spec({"priorityClassName": "system-node-critical"})
    assert found is not None and found.value == 2_000_001_000


@pytest.mark.parametrize(
    ("classes", "spec", "may"),
    [
        ([HIGH], {"priorityClassName": "inference-high"}, True),
        ([HIGH], {}, False),  # priority 0: no pod below it
        ([HIGH, LOW], {}, True),  # a class below 0: a default pod outranks its pods
        ([LOW], {"priorityClassName": "training-low"}, False),  # the lowest outranks no one
        ([POLITE], {"priorityClassName": "polite"}, False),  # Never: waits its turn
        ([HIGH], {"priorityClassName": "unknown"}, False),
    ],
)
def test_a_pod_may_preempt_when_its_policy_allows_and_some_pod_ranks_below_it(
    classes: list[PriorityClass], spec: dict[str, Any], may: bool
) -> None:
    known = Classes(classes)
    assert known.may_preempt(known.of_spec(spec)) is may


def test_the_preempting_classes_leave_the_built_in_ones_out() -> None:
    assert [c.name for c in Classes([HIGH, LOW, POLITE]).preempting()] == ["inference-high"]


def test_a_class_object_is_read_from_its_top_level_fields() -> None:
    obj = {
        "metadata": {"name": "x"},
        "value": 7,
        "preemptionPolicy": "Never",
        "globalDefault": True,
    }
    assert PriorityClass.read(obj) == PriorityClass("x", 7, "Never", True)
    assert PriorityClass.read({"metadata": {"name": "x"}, "value": "7"}) is None
    assert PriorityClass.read({"value": 7}) is None


@given(
    st.dictionaries(
        st.sampled_from(["priority", "priorityClassName", "preemptionPolicy"]),
        st.one_of(
            st.none(), st.integers(), st.text(max_size=20), st.booleans(), st.lists(st.none())
        ),
    )
)
def test_any_pod_spec_resolves_without_raising(spec: dict[str, Any]) -> None:
    known = Classes([HIGH, LOW, DEFAULT])
    found = known.of_spec(spec)
    assert found is None or isinstance(found.value, int)
    known.may_preempt(found)
