"""What the cluster view keeps of PriorityClasses and Pods (app.cluster.slim, app.cluster.view)."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from app.cluster.slim import slim
from app.cluster.view import ClusterView, Kind
from tests.cluster.objects import pod_holding_claims as pod
from tests.cluster.objects import priority_class

Obj = dict[str, Any]


def test_a_pod_keeps_who_it_is_its_priority_and_its_claim_names_only() -> None:
    kept = slim("Pod", pod("train-0", priority=100))
    assert kept == {
        "kind": "Pod",
        "metadata": {"name": "train-0", "namespace": "ml", "uid": "u-1", "resourceVersion": "7"},
        "spec": {
            "priority": 100,
            "priorityClassName": "low",
            "preemptionPolicy": "PreemptLowerPriority",
            "resourceClaims": [{"name": "g"}],
        },
    }
    assert slim("Pod", kept) == kept


def test_a_priority_class_keeps_its_value_default_and_policy() -> None:
    raw = priority_class("high", 1000, globalDefault=False, preemptionPolicy="Never")
    kept = slim("PriorityClass", raw)
    assert {k: kept[k] for k in ("value", "globalDefault", "preemptionPolicy")} == {
        "value": 1000,
        "globalDefault": False,
        "preemptionPolicy": "Never",
    }
    assert "description" not in kept
    assert slim("PriorityClass", kept) == kept


def test_the_view_holds_only_the_pods_that_reference_resource_claims() -> None:
    view = ClusterView()
    view.replace(Kind.POD, [pod("train-0"), pod("web-0", claims=False, uid="u-2")])
    view.apply(Kind.POD, pod("web-1", claims=False, uid="u-3"))
    view.apply(Kind.POD, pod("train-1", uid="u-4"))
    assert sorted(view.in_namespace(Kind.POD, "ml")) == ["train-0", "train-1"]
    view.remove(Kind.POD, pod("train-0"))
    assert sorted(view.in_namespace(Kind.POD, "ml")) == ["train-1"]


def test_priority_classes_are_cluster_scoped_in_the_view() -> None:
    view = ClusterView()
    view.replace(Kind.PRIORITY_CLASS, [priority_class("high", 1000)])
    assert view.get(Kind.PRIORITY_CLASS, "high") is not None
    assert not Kind.PRIORITY_CLASS.namespaced
    assert Kind.POD.namespaced


@given(
    st.dictionaries(
        st.sampled_from(["metadata", "spec", "value", "globalDefault", "status"]),
        st.one_of(
            st.none(),
            st.integers(),
            st.text(max_size=5),
            st.lists(st.integers(), max_size=2),
            st.dictionaries(
                st.sampled_from(["name", "resourceClaims", "priority"]),
                st.one_of(st.none(), st.text(max_size=3), st.lists(st.none(), max_size=2)),
                max_size=3,
            ),
        ),
    )
)
def test_odd_pods_and_classes_from_the_wire_never_raise(obj: Obj) -> None:
    slim("Pod", obj)
    slim("PriorityClass", obj)
