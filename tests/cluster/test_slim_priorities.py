"""What the cluster view keeps of PriorityClasses and Pods (app.cluster.slim, app.cluster.view)."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from app.cluster.slim import slim
from app.cluster.view import ClusterView, Kind

Obj = dict[str, Any]


def pod(name: str, *, claims: bool = True, priority: int = 0, uid: str = "u-1") -> Obj:
    """A pod as the API server sends it, with what the view has no use for."""
    spec: Obj = {
        "priority": priority,
        "priorityClassName": "low",
        "preemptionPolicy": "PreemptLowerPriority",
        "nodeName": "node-1",
        "containers": [{"name": "main", "image": "cuda", "resources": {"claims": [{"name": "g"}]}}],
    }
    if claims:
        spec["resourceClaims"] = [{"name": "g", "resourceClaimTemplateName": "one-gpu"}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "ml",
            "uid": uid,
            "resourceVersion": "7",
            "labels": {"app": "train"},
            "annotations": {"big": "x" * 1000},
            "managedFields": [{"manager": "kubectl"}],
        },
        "spec": spec,
        "status": {"phase": "Running", "conditions": [{"type": "Ready"}]},
    }


def priority_class(name: str, value: int, **fields: Any) -> Obj:
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name, "uid": f"pc-{name}", "resourceVersion": "3"},
        "value": value,
        "description": "long text nobody reads here",
        **fields,
    }


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
