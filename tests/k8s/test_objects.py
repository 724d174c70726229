"""Pod specs and containers of every pod-bearing kind, with field paths and JSON pointers; a
malformed object raises ObjectShapeError naming the field."""

from __future__ import annotations

from typing import Any

import pytest

from app.errors import ObjectShapeError
from app.k8s.objects import (
    CONTAINER_FIELDS,
    containers,
    list_field,
    object_name,
    resource_map,
)
from tests.specs import BUILT_IN, pod_spec, spec_parts

Obj = dict[str, Any]


def nest(kind: str, spec: Obj) -> Obj:
    """An object of `kind` with `spec` where that kind carries its pod spec."""
    obj: Obj = {"kind": kind}
    node = obj
    parts = spec_parts(kind)
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = spec
    return obj


@pytest.mark.parametrize("kind", sorted(BUILT_IN))
def test_every_pod_bearing_kind_gives_its_pod_spec_with_path_and_pointer(kind: str) -> None:
    spec = {"containers": [{"name": "c"}]}
    ref = pod_spec(kind, nest(kind, spec))
    assert ref is not None
    assert ref.spec is spec
    parts = spec_parts(kind)
    assert ref.path == ".".join(parts)
    assert ref.pointer == "/" + "/".join(parts)


def test_a_kind_without_a_pod_spec_or_an_absent_spec_gives_none() -> None:
    assert pod_spec("ConfigMap", {"data": {}}) is None
    assert pod_spec("Deployment", {"spec": {}}) is None


def test_a_pod_spec_that_is_not_an_object_names_the_field() -> None:
    with pytest.raises(ObjectShapeError, match=r"spec\.template: must be an object"):
        pod_spec("Deployment", {"spec": {"template": []}})


def test_containers_come_in_kubelet_order_with_paths_pointers_and_sidecars() -> None:
    spec = {
        "containers": [{"name": "app"}],
        "initContainers": [{"name": "init"}, {"name": "side", "restartPolicy": "Always"}],
        "ephemeralContainers": [{"name": "debug"}],
    }
    ref = pod_spec("Pod", {"spec": spec})
    assert ref is not None
    found = list(containers(ref))
    assert [(c.field, c.name) for c in found] == [
        ("initContainers", "init"),
        ("initContainers", "side"),
        ("containers", "app"),
        ("ephemeralContainers", "debug"),
    ]
    assert CONTAINER_FIELDS == ("initContainers", "containers", "ephemeralContainers")
    side = found[1]
    assert (side.path, side.pointer) == ("spec.initContainers[1]", "/spec/initContainers/1")
    assert side.is_sidecar and side.runs_with_app
    assert not found[0].is_sidecar and not found[0].runs_with_app
    assert found[2].runs_with_app
    assert not found[3].runs_with_app


@pytest.mark.parametrize(
    ("spec", "where"),
    [
        ({"containers": {}}, r"spec\.containers: must be a list"),
        ({"containers": ["x"]}, r"spec\.containers\[0\]: must be an object"),
        ({"initContainers": [{"name": 3}]}, r"spec\.initContainers\[0\]\.name: must be a string"),
    ],
)
def test_a_malformed_container_list_names_the_field(spec: Obj, where: str) -> None:
    ref = pod_spec("Pod", {"spec": spec})
    assert ref is not None
    with pytest.raises(ObjectShapeError, match=where):
        list(containers(ref))


def _container(resources: Any) -> Any:
    ref = pod_spec("Pod", {"spec": {"containers": [{"name": "c", "resources": resources}]}})
    assert ref is not None
    return next(containers(ref))


def test_resource_maps_are_read_and_absent_ones_are_empty() -> None:
    c = _container({"limits": {"nvidia.com/gpu": 2}})
    assert resource_map(c, "limits") == {"nvidia.com/gpu": 2}
    assert resource_map(c, "requests") == {}
    assert resource_map(_container(None), "limits") == {}


@pytest.mark.parametrize(
    ("resources", "where"),
    [
        ([], r"spec\.containers\[0\]\.resources: must be an object"),
        ({"limits": []}, r"spec\.containers\[0\]\.resources\.limits: must be an object"),
        (
            {"limits": {"nvidia.com/gpu": True}},
            r"spec\.containers\[0\]\.resources\.limits\[nvidia\.com/gpu\]: must be a quantity",
        ),
        (
            {"limits": {"nvidia.com/gpu": {"n": 1}}},
            r"spec\.containers\[0\]\.resources\.limits\[nvidia\.com/gpu\]: must be a quantity",
        ),
    ],
)
def test_a_malformed_resource_map_names_the_field(resources: Any, where: str) -> None:
    with pytest.raises(ObjectShapeError, match=where):
        resource_map(_container(resources), "limits")


def test_list_fields_are_empty_when_absent_and_named_when_not_lists() -> None:
    assert list_field({}, "resourceClaims", "spec") == []
    assert list_field({"resourceClaims": [1]}, "resourceClaims", "spec") == [1]
    with pytest.raises(ObjectShapeError, match=r"spec\.resourceClaims: must be a list"):
        list_field({"resourceClaims": {}}, "resourceClaims", "spec")
    with pytest.raises(ObjectShapeError, match=r"^resourceClaims: must be a list"):
        list_field({"resourceClaims": "x"}, "resourceClaims", "")


@pytest.mark.parametrize(
    ("obj", "name"),
    [
        ({"metadata": {"name": "p"}}, "p"),
        ({"metadata": {"generateName": "p-"}}, "p-"),
        ({"metadata": {"name": 3}}, ""),
        ({"metadata": []}, ""),
        ({}, ""),
    ],
)
def test_object_name_is_the_name_or_generate_name(obj: Obj, name: str) -> None:
    assert object_name(obj) == name
