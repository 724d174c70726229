"""What a DeviceTaintRule reaches: devices, the claims holding them, their pods (and the CEL
selectors of a 1.34 rule, on each backend)."""

from __future__ import annotations

from typing import Any

import pytest

from app.allocation.holders import DeviceHolders
from app.allocation.taint_reach import Reach, reach
from app.cel.engine import Engine
from app.cluster.release import ServedRelease
from app.cluster.view import ClusterView, Kind
from app.devices.index import DeviceIndex
from app.k8s.taint_rules import parse_taint_rule
from tests.policies import taint_objects as t

Obj = dict[str, Any]


def _view(objects: list[Obj], release: str | None = None) -> tuple[ClusterView, DeviceHolders]:
    view = ClusterView()
    if release is not None:
        view.set_release(ServedRelease.from_defaults(release))
    for obj in objects:
        view.apply(Kind(obj["kind"]), obj)
    return view, view.derived(DeviceHolders)


def _reach(
    selector: Any,
    effect: str = "NoExecute",
    *,
    objects: list[Obj] | None = None,
    release: str | None = None,
    index: DeviceIndex | None = None,
) -> Reach:
    view, holders = _view(t.cluster() if objects is None else objects, release)
    return reach(parse_taint_rule(t.rule("r", selector, effect)), view, holders, index)


def _pods(found: Reach) -> dict[str, tuple[str, ...]]:
    return {ns: c.pods for ns, c in found.by_namespace.items() if c.pods}


def test_an_empty_selector_evicts_every_pod_but_those_whose_claims_tolerate_it() -> None:
    found = _reach({})
    assert found.selects_all
    assert (found.published, found.pools, found.free) == (9, 3, 4)
    assert _pods(found) == {"ml-a": ("a-0", "a-1", "a-2"), "ml-b": ("b-0",)}
    assert found.tolerating == (("ml-c", "patient"),)
    assert found.pod_namespaces() == [("ml-a", 3), ("ml-b", 1)]


def test_a_rule_naming_one_device_reaches_its_one_pod() -> None:
    found = _reach({"driver": t.DRIVER, "pool": "node-a", "device": "gpu-2"})
    assert (found.published, found.held, found.pods) == (1, 1, 1)
    assert _pods(found) == {"ml-a": ("a-2",)}


def test_a_claim_shared_by_two_pods_evicts_both_and_a_device_of_another_driver_is_not_named() -> (
    None
):
    assert _pods(_reach({"pool": "node-a", "device": "gpu-1"})) == {"ml-a": ("a-0", "a-1")}
    fpga = _reach({"driver": t.OTHER_DRIVER})
    assert (fpga.published, fpga.pods) == (1, 0)


def test_a_held_device_no_slice_publishes_any_more_is_still_evicted_as_the_controller_does() -> (
    None
):
    objects = [o for o in t.cluster() if o["kind"] != "ResourceSlice"]
    found = _reach({"pool": "node-b"}, objects=objects)
    assert found.published == 0
    assert _pods(found) == {"ml-b": ("b-0",)}


def test_no_selector_reaches_nothing_from_1_35_and_everything_on_1_34() -> None:
    assert _reach(None).pods == 0
    assert _reach(None, release="1.36").pods == 0
    assert _reach(None, release="1.34").pods == 4


def test_no_schedule_keeps_devices_off_and_its_holders_keep_theirs() -> None:
    found = _reach({"pool": "node-b"}, "NoSchedule")
    assert (found.published, found.free, found.claims) == (4, 2, 2)
    assert _pods(found) == {"ml-b": ("b-0",), "ml-c": ("c-0",)}


def test_none_reaches_what_no_execute_would_evict_as_the_controller_simulates_it() -> None:
    assert _pods(_reach({"pool": "node-b"}, "None")) == {"ml-b": ("b-0",)}


def test_a_toleration_with_seconds_delays_eviction_and_a_pod_group_counts() -> None:
    claim = t.held_claim(
        "ml-d", "later", [("node-a", "gpu-3")], [], groups=["trainers"],
        tolerations=[{"key": "example.com/maintenance", "operator": "Exists",
                      "effect": "NoExecute", "tolerationSeconds": 300}],
    )  # fmt: skip
    found = _reach({"pool": "node-a", "device": "gpu-3"}, objects=[*t.cluster(), claim])
    assert found.delayed == 1
    assert found.by_namespace["ml-d"].groups == ("podgroups/trainers",)


def test_the_holders_index_follows_claims_as_they_change_and_go() -> None:
    view, holders = _view(t.cluster())
    claim = t.held_claim("ml-b", "one", [("node-b", "gpu-3")], ["b-0"])
    claim["metadata"]["resourceVersion"] = "2"
    view.apply(Kind.RESOURCE_CLAIM, claim)
    assert [h.device for h in holders.held(t.DRIVER, "node-b")] == ["gpu-1", "gpu-3"]
    view.remove(Kind.RESOURCE_CLAIM, claim)
    assert [h.device for h in holders.held(t.DRIVER, "node-b")] == ["gpu-1"]
    assert ("ml-b", "one") not in holders.claims


# -- 1.34's v1alpha3 rules: a DeviceClass and CEL selectors ----------------------------------


def _cel_reach(engine: Engine, selector: Obj, classes: list[Obj] = ()) -> Reach:  # type: ignore[assignment]
    view, holders = _view([*classes, *t.cluster()], "1.34")
    index = DeviceIndex(engine)
    view.subscribe(index.on_change)
    obj = t.rule("r", selector, version="v1alpha3")
    return reach(parse_taint_rule(obj), view, holders, index)


def test_cel_selectors_select_devices_as_a_claim_selector_would(engine: Engine) -> None:
    found = _cel_reach(
        engine,
        {"selectors": [{"cel": {"expression": 'device.attributes["gpu.example.com"].index >= 2'}}]},
    )
    assert (found.published, found.pods) == (4, 1)  # gpu-2 and gpu-3 of both nodes
    assert _pods(found) == {"ml-a": ("a-2",)}


def test_a_device_class_that_does_not_exist_selects_nothing(engine: Engine) -> None:
    found = _cel_reach(engine, {"deviceClassName": "missing"})
    assert found.pods == 0
    assert found.notes[0][0] == "spec.deviceSelector.deviceClassName"
    assert not found.problems  # (not a denial: upstream's tracker skips the rule)


def test_a_selector_that_does_not_compile_is_a_problem_with_its_path(engine: Engine) -> None:
    found = _cel_reach(
        engine,
        {"selectors": [{"cel": {"expression": "true"}}, {"cel": {"expression": "device.("}}]},
    )
    assert found.pods == 0
    path, message = found.problems[0]
    assert path == "spec.deviceSelector.selectors[1].cel.expression"
    assert "does not compile" in message


def test_a_runtime_error_leaves_the_device_unselected_and_is_said(engine: Engine) -> None:
    found = _cel_reach(
        engine, {"selectors": [{"cel": {"expression": 'device.attributes["x"].missing == 1'}}]}
    )
    assert found.published == 0
    assert found.erring


@pytest.mark.parametrize("expression", ['device.driver == "gpu.example.com"'])
def test_a_class_selector_and_the_rule_s_own_both_apply(engine: Engine, expression: str) -> None:
    gpu_class = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
                 "metadata": {"name": "gpu"},
                 "spec": {"selectors": [{"cel": {"expression": expression}}]}}  # fmt: skip
    found = _cel_reach(engine, {"deviceClassName": "gpu", "pool": "node-a"}, [gpu_class])
    assert (found.published, found.pods) == (4, 3)
