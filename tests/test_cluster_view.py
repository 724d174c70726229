"""The cluster view and its static source."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from app.cluster.static import StaticSource
from app.cluster.view import ClusterView, Kind
from app.errors import ClusterFileError
from tests.helpers import namespace


def claim(name: str, ns: str = "ml") -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": ns, "managedFields": [{"big": "x" * 100}]},
        "spec": {"devices": {"requests": []}},
    }


def test_the_embedded_demo_cluster_loads_and_is_synced() -> None:
    view = ClusterView()
    StaticSource(view).load()
    assert view.synced
    assert view.namespace_labels("gpu-e2e") == {"gpu-mode": "dra-only"}
    assert view.device_class("gpu.nvidia.com") is not None
    assert len(view.resource_slices()) == 2


def test_a_file_may_be_a_list_or_several_documents(tmp_path: Path) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text("""
apiVersion: v1
kind: List
items:
- {apiVersion: v1, kind: Namespace, metadata: {name: a, labels: {gpu-mode: audit}}}
---
apiVersion: v1
kind: NamespaceList
items:
- {apiVersion: v1, kind: Namespace, metadata: {name: b}}
---
{apiVersion: v1, kind: ConfigMap, metadata: {name: ignored, namespace: a}}
---
{apiVersion: v1, kind: Namespace, metadata: {name: c}}
""")
    view = ClusterView()
    StaticSource(view, path).load()
    assert [view.namespace_labels(n) for n in "abc"] == [{"gpu-mode": "audit"}, {}, {}]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{kind: Namespace, metadata: {}}", "item 0 (Namespace): object has no metadata.name"),
        ("{kind: ResourceClaim, metadata: {name: x}}", "has no namespace"),
        ("[1, 2]", "item 0 is not a mapping"),
        ("a: [", "not valid YAML"),
    ],
)
def test_a_bad_cluster_file_says_where(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ClusterFileError, match=r"bad\.yaml") as err:
        StaticSource(ClusterView(), path).load()
    assert message in str(err.value)


def test_indexes_follow_apply_remove_and_replace() -> None:
    view = ClusterView()
    events: list[tuple[Kind, bool, bool]] = []
    view.subscribe(lambda kind, old, new: events.append((kind, old is not None, new is not None)))
    view.apply(Kind.RESOURCE_CLAIM, claim("a"))
    view.apply(Kind.RESOURCE_CLAIM, claim("b"))
    assert set(view.in_namespace(Kind.RESOURCE_CLAIM, "ml")) == {"a", "b"}
    assert "managedFields" not in view.in_namespace(Kind.RESOURCE_CLAIM, "ml")["a"]["metadata"]
    generation = view.generation(Kind.RESOURCE_CLAIM)
    view.remove(Kind.RESOURCE_CLAIM, claim("a"))
    assert set(view.in_namespace(Kind.RESOURCE_CLAIM, "ml")) == {"b"}
    assert view.generation(Kind.RESOURCE_CLAIM) > generation
    view.replace(Kind.RESOURCE_CLAIM, [claim("c", "other")])
    assert view.in_namespace(Kind.RESOURCE_CLAIM, "ml") == {}
    assert set(view.in_namespace(Kind.RESOURCE_CLAIM, "other")) == {"c"}
    assert events[:3] == [(Kind.RESOURCE_CLAIM, False, True)] * 2 + [
        (Kind.RESOURCE_CLAIM, True, False)
    ]


def test_device_classes_are_indexed_by_extended_resource_name() -> None:
    view = ClusterView()
    dc = {
        "kind": "DeviceClass",
        "metadata": {"name": "gpu.example.com"},
        "spec": {"extendedResourceName": "example.com/gpu"},
    }
    view.apply(Kind.DEVICE_CLASS, dc)
    assert view.device_class_for_extended_resource("example.com/gpu") == "gpu.example.com"
    view.apply(Kind.DEVICE_CLASS, {**dc, "spec": {}})
    assert view.device_class_for_extended_resource("example.com/gpu") is None


def _mapping(name: str, created: str) -> dict[str, object]:
    return {
        "kind": "DeviceClass",
        "metadata": {"name": name, "creationTimestamp": created},
        "spec": {"extendedResourceName": "example.com/gpu"},
    }


@pytest.mark.parametrize("order", [(0, 1, 2), (2, 1, 0), (1, 2, 0)])
def test_of_two_classes_mapping_a_name_the_newest_serves_it_whatever_the_order_seen(
    order: tuple[int, int, int],
) -> None:
    classes = [
        _mapping("old.example.com", "2026-01-01T00:00:00Z"),
        _mapping("new-b.example.com", "2026-06-01T00:00:00Z"),
        _mapping("new-a.example.com", "2026-06-01T00:00:00Z"),  # a tie: the name sorted first
    ]
    view = ClusterView()
    for index in order:
        view.apply(Kind.DEVICE_CLASS, classes[index])
    assert view.device_class_for_extended_resource("example.com/gpu") == "new-a.example.com"
    view.remove(Kind.DEVICE_CLASS, classes[2])
    assert view.device_class_for_extended_resource("example.com/gpu") == "new-b.example.com"
    view.replace(Kind.DEVICE_CLASS, [classes[0]])
    assert view.device_class_for_extended_resource("example.com/gpu") == "old.example.com"


def test_readiness_needs_every_kind_listed() -> None:
    view = ClusterView()
    for kind in Kind:
        assert not view.synced
        view.replace(kind, [namespace("x")] if kind is Kind.NAMESPACE else [])
    assert view.synced
    view.mark_unsynced(Kind.RESOURCE_SLICE)
    assert not view.synced
