"""The view's stale marks and its handling of repeated versions (what the live source relies on)."""

from __future__ import annotations

from typing import Any

from app.cluster.view import ClusterView, Kind
from tests.cluster import objects


def stored(obj: dict[str, Any], version: str, uid: str = "u-1") -> dict[str, Any]:
    obj["metadata"].update(resourceVersion=version, uid=uid)
    return obj


def test_a_view_is_fresh_until_a_source_marks_a_kind_stale_and_fresh_again() -> None:
    view = ClusterView()
    assert view.stale_kinds == frozenset()
    view.mark_stale(Kind.RESOURCE_SLICE)
    view.mark_stale(Kind.NAMESPACE)
    assert view.stale_kinds == {Kind.RESOURCE_SLICE, Kind.NAMESPACE}
    view.mark_fresh(Kind.RESOURCE_SLICE)
    assert view.stale_kinds == {Kind.NAMESPACE}


def test_the_same_version_applied_again_keeps_the_object_and_its_generation() -> None:
    view = ClusterView()
    seen: list[object] = []
    view.subscribe(lambda kind, old, new: seen.append(new))
    view.apply(Kind.RESOURCE_SLICE, stored(objects.resource_slice("n", 2), "10"))
    first = view.get(Kind.RESOURCE_SLICE, "n-gpu.nvidia.com-0")
    generation = view.generation(Kind.RESOURCE_SLICE)

    view.apply(Kind.RESOURCE_SLICE, stored(objects.resource_slice("n", 2), "10"))
    view.replace(Kind.RESOURCE_SLICE, [stored(objects.resource_slice("n", 2), "10")])
    assert view.get(Kind.RESOURCE_SLICE, "n-gpu.nvidia.com-0") is first
    assert view.generation(Kind.RESOURCE_SLICE) == generation
    assert len(seen) == 1  # listeners (derived indexes) were told once

    view.apply(Kind.RESOURCE_SLICE, stored(objects.resource_slice("n", 3), "11"))
    assert view.generation(Kind.RESOURCE_SLICE) == generation + 1
    view.apply(Kind.RESOURCE_SLICE, stored(objects.resource_slice("n", 3), "11", uid="u-2"))
    assert view.generation(Kind.RESOURCE_SLICE) == generation + 2  # recreated: a new object


def test_objects_without_a_resource_version_are_always_reindexed() -> None:
    view = ClusterView()
    view.apply(Kind.NAMESPACE, objects.namespace("a", **{"gpu-mode": "audit"}))
    generation = view.generation(Kind.NAMESPACE)
    view.apply(Kind.NAMESPACE, objects.namespace("a", **{"gpu-mode": "dra-only"}))
    assert view.generation(Kind.NAMESPACE) == generation + 1
    assert (view.namespace_labels("a") or {})["gpu-mode"] == "dra-only"
