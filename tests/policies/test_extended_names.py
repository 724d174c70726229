"""DeviceClass extendedResourceName collisions (app.policies.extended_names): two classes for one
name (the scheduler uses the newest), a policy mapping to another class, a sharing name."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from app.cli import main
from app.cluster.view import newest_class
from app.config import load_policy
from app.policies.builders import mapping_resolver, sharing_rules
from app.policies.extended_names import WARNING_LIMIT, class_conflicts, cluster_conflicts
from app.policies.parts import Parts
from tests.helpers import decide, make_view, namespace

Obj = dict[str, Any]
GPU = "nvidia.com/gpu"


def device_class(name: str, extended: str | None, created: str | None = None) -> Obj:
    meta: Obj = {"name": name}
    if created:
        meta["creationTimestamp"] = created
    spec: Obj = {"selectors": [{"cel": {"expression": 'device.driver == "gpu.nvidia.com"'}}]}
    if extended:
        spec["extendedResourceName"] = extended
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": meta,
            "spec": spec}  # fmt: skip


OLD = device_class("gpu.nvidia.com", GPU, "2026-01-01T00:00:00Z")
NEW = device_class("gpu-b.nvidia.com", GPU, "2026-06-01T00:00:00Z")


def _conflicts(obj: Obj, *cluster: Obj) -> list[str]:
    parts = Parts(load_policy())
    view = make_view([namespace("ml"), *cluster])
    return class_conflicts(obj, view, parts.build(mapping_resolver), parts.build(sharing_rules))


def test_the_scheduler_uses_the_class_created_last_then_the_name_sorted_first() -> None:
    assert newest_class([OLD, NEW])["metadata"]["name"] == "gpu-b.nvidia.com"
    same = device_class("a.example.com", GPU, "2026-01-01T00:00:00Z")
    assert newest_class([OLD, same])["metadata"]["name"] == "a.example.com"
    fresh = device_class("z.example.com", GPU)  # being created: no timestamp yet
    assert newest_class([OLD, NEW, fresh])["metadata"]["name"] == "z.example.com"


def test_a_second_class_for_the_same_name_is_named_with_the_one_the_scheduler_uses() -> None:
    (line,) = [c for c in _conflicts(NEW, OLD) if c.startswith("DeviceClass ")]
    assert line == (
        "DeviceClass gpu.nvidia.com already maps nvidia.com/gpu: the scheduler serves it from the "
        "class created last, gpu-b.nvidia.com; give each name to one class"
    )


def test_a_class_the_policy_does_not_translate_the_name_to_is_named() -> None:
    found = _conflicts(device_class("other.nvidia.com", GPU))
    assert found == [
        "dra-webhook's mappings translate nvidia.com/gpu to DeviceClass gpu.nvidia.com: "
        "translated pods get it, pods the scheduler serves get other.nvidia.com; map the name "
        "to one class"
    ]
    assert _conflicts(device_class("gpu.nvidia.com", GPU)) == []


def test_a_sharing_name_is_named() -> None:
    (line,) = _conflicts(device_class("gpu.nvidia.com", "nvidia.com/gpumem"))
    assert "read nvidia.com/gpumem as a share of a device" in line


@pytest.mark.parametrize("extended", [None, ""])
def test_a_class_mapping_nothing_has_no_conflicts(extended: str | None) -> None:
    assert _conflicts(device_class("gpu.nvidia.com", extended), OLD, NEW) == []


def test_report_lists_the_conflicts_cluster_wide_each_pair_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    parts = Parts(load_policy())
    view = make_view([namespace("ml"), OLD, NEW])
    found = list(cluster_conflicts(view, parts.build(mapping_resolver), parts.build(sharing_rules)))
    assert [f.split(":")[0] for f in found] == ["DeviceClass gpu-b.nvidia.com"] * 2
    cluster, dump = tmp_path / "cluster.yaml", tmp_path / "dump.yaml"
    cluster.write_text(yaml.safe_dump_all([namespace("ml"), OLD, NEW]))
    dump.write_text(yaml.safe_dump_all([{"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ml"}, "spec": {"containers": []}}]))  # fmt: skip
    assert main(["report", "--cluster-file", str(cluster), str(dump)]) == 0
    out = capsys.readouterr().out
    assert "conflict: DeviceClass gpu-b.nvidia.com: DeviceClass gpu.nvidia.com already maps" in out


def test_a_device_class_create_mapping_a_taken_name_is_admitted_with_a_warning() -> None:
    decision = decide(NEW, objects=[namespace("ml"), OLD])
    assert decision.allowed
    assert any(
        w.startswith("spec.extendedResourceName: DeviceClass gpu.nvidia.com already maps")
        for w in decision.warnings
    ), decision.warnings
    assert decide(OLD, objects=[namespace("ml")]).warnings == ()


def test_each_warning_fits_the_api_server_s_limit_with_40_character_names() -> None:
    long_class = "c" * 27 + ".example.com"  # 39, and 40 with the x below
    long_name = "e" * 15 + ".example.com/" + "f" * 12
    mine = device_class(long_class + "x", long_name)
    found = _conflicts(mine, device_class(long_class, long_name, "2026-01-01T00:00:00Z"))
    assert found and all(
        len(f"spec.extendedResourceName: {line}") <= WARNING_LIMIT for line in found
    ), [len(line) for line in found]
