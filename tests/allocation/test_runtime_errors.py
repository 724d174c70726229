"""CEL runtime errors in the order upstream's allocator meets them.

``allocateOne`` (structured/internal/incubating, v1.36) skips a device that another claim holds
(or this attempt picked) before it evaluates any selector, so a selector that errs only on held
devices never aborts the pod; a device it does evaluate aborts the pod on the error
(``selectorsMatch``), whatever other devices or nodes offer. Not skipped, and so evaluated: the
devices an admin-access request considers (it ignores what others hold), a shareable device
other claims hold shares of, every device of the node for ``allocationMode: All``
(``validateDeviceRequest`` fixes its devices before the search, held ones included), and the
devices of a ``perDeviceNodeSelection`` slice the node gathered that do not reach the node
(``isSelectable`` runs the selectors before it checks the device's node selection).

The search (:func:`app.allocation.attempt.scan`) is tested here with what other claims hold and
as if every device were free; the model's verdict on the first kind is pinned at the end.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from app.allocation import NEVER, NOT_NOW, OK, Allocations
from app.allocation.attempt import scan
from app.allocation.plans import ClaimPlan, RequestPlan, SelectorError, Want
from app.cluster.view import Kind
from app.devices.index import class_selectors
from app.k8s.claims import parse_claim_spec
from tests.allocation.helpers import Cluster, request, spec
from tests.allocation.nvidia import DRIVER, allocated_claim, gpu, node_slice

Make = Callable[..., Cluster]
NVLINK = f'device.attributes["{DRIVER}"].nvlinkDomain == 0'
"""Errs on a device without the attribute ("no such key")."""


def _fleet(*held: Any) -> list[Any]:
    """node-a: gpu-0 has no nvlinkDomain (the selector errs on it), gpu-1 has one; ``held``:
    claims holding devices."""
    devices = [gpu("node-a", i, consumesCounters=[]) for i in range(2)]
    devices[1]["attributes"]["nvlinkDomain"] = {"int": 0}
    return [node_slice("node-a", devices=devices), *held]


def _scan(c: Cluster, body: Any, allocations: Allocations | None) -> tuple[list[str], Any]:
    """The search for one claim of one request, as the model plans it."""
    (claim_request,) = parse_claim_spec(body).requests
    (alt,) = claim_request.alternatives
    classes = c.view.device_classes()
    expressions = [e for _, e in alt.selectors]
    match = c.index.matching(
        alt.device_class, class_selectors(classes[alt.device_class]), expressions
    )
    want = Want(
        claim_request.name,
        alt.name,
        claim_request.path,
        alt,
        match.refs,
        {(d.slice_name, d.name): m for d, m in match.erring},
        match.count,
    )
    plan = ClaimPlan(
        "claim c", "spec", (RequestPlan(claim_request.name, claim_request.path, (want,)),)
    )
    return scan([plan], c.model.inventory(), allocations)


def _held(c: Cluster) -> Allocations:
    found: Allocations = c.view.derived(Allocations)
    return found


def test_a_device_another_claim_holds_is_skipped_before_its_selector_errs(cluster: Make) -> None:
    c = cluster(*_fleet(allocated_claim("held", ("node-a", "gpu-0"))))
    nodes, abort = _scan(c, spec(request("gpu", "gpu.nvidia.com", 1, NVLINK)), _held(c))
    assert (nodes, abort) == (["node-a"], None)


def test_the_same_device_free_aborts_the_search(cluster: Make) -> None:
    c = cluster(*_fleet())
    nodes, abort = _scan(c, spec(request("gpu", "gpu.nvidia.com", 1, NVLINK)), _held(c))
    assert nodes == []
    assert isinstance(abort, SelectorError)
    assert abort.device == f"{DRIVER}/node-a/gpu-0"
    assert "no such key" in abort.message or "nvlinkDomain" in abort.message


def test_as_if_every_device_were_free_the_held_device_errs(cluster: Make) -> None:
    c = cluster(*_fleet(allocated_claim("held", ("node-a", "gpu-0"))))
    _, abort = _scan(c, spec(request("gpu", "gpu.nvidia.com", 1, NVLINK)), None)
    assert isinstance(abort, SelectorError)


def test_an_admin_request_evaluates_the_devices_others_hold(cluster: Make) -> None:
    c = cluster(*_fleet(allocated_claim("held", ("node-a", "gpu-0"))))
    admin = spec(request("gpu", "gpu.nvidia.com", 1, NVLINK, adminAccess=True))
    _, abort = _scan(c, admin, _held(c))
    assert isinstance(abort, SelectorError)


def test_all_devices_are_fixed_before_the_search_held_ones_included(cluster: Make) -> None:
    c = cluster(*_fleet(allocated_claim("held", ("node-a", "gpu-0"))))
    every = spec(request("gpu", "gpu.nvidia.com", None, NVLINK, allocationMode="All"))
    _, abort = _scan(c, every, _held(c))
    assert isinstance(abort, SelectorError)
    assert abort.device == f"{DRIVER}/node-a/gpu-0"


def test_a_shareable_device_others_hold_shares_of_is_evaluated(cluster: Make) -> None:
    devices = [
        gpu("node-a", i, consumesCounters=[], allowMultipleAllocations=True) for i in range(2)
    ]
    devices[1]["attributes"]["nvlinkDomain"] = {"int": 0}
    share = {"shareID": "a", "consumedCapacity": {"memory": "1Gi"}}
    c = cluster(
        node_slice("node-a", devices=devices), allocated_claim("held", ("node-a", "gpu-0"), **share)
    )
    _, abort = _scan(c, spec(request("gpu", "gpu.nvidia.com", 1, NVLINK)), _held(c))
    assert isinstance(abort, SelectorError)


# -- the model's verdict ---------------------------------------------------------------------------


def test_a_claim_the_scheduler_allocates_past_a_held_erring_device_is_ok(cluster: Make) -> None:
    c = cluster(*_fleet(allocated_claim("held", ("node-a", "gpu-0"))))
    assert c.check(spec(request("gpu", "gpu.nvidia.com", 1, NVLINK))).outcome == OK


def test_a_claim_short_of_devices_past_a_held_erring_device_is_not_now_and_says_so(
    cluster: Make,
) -> None:
    c = cluster(*_fleet(allocated_claim("held", ("node-a", "gpu-0"), ("node-a", "gpu-1"))))
    verdict = c.check(spec(request("gpu", "gpu.nvidia.com", 1, NVLINK)))
    assert verdict.outcome == NOT_NOW
    assert any(
        f"selector #0 errs on device {DRIVER}/node-a/gpu-0" in p.message
        and "which another claim holds" in p.message
        for p in verdict.problems
    )


# -- perDeviceNodeSelection: the selectors run before the device's node selection ---------------


def _per_device(cluster: Make, *, erring_first: bool) -> Cluster:
    """One Node, node-a, and a perDeviceNodeSelection slice: gpu-0 (no nvlinkDomain: the
    selector errs on it) for node-z, which is no Node, and gpu-1 for node-a; ``erring_first``:
    gpu-0 comes first in the slice."""
    erring = gpu("pd", 0, consumesCounters=[], nodeName="node-z")
    fine = gpu("pd", 1, consumesCounters=[], nodeName="node-a")
    fine["attributes"]["nvlinkDomain"] = {"int": 0}
    per_device = node_slice("pd", devices=[erring, fine] if erring_first else [fine, erring])
    del per_device["spec"]["nodeName"], per_device["spec"]["sharedCounters"]
    per_device["spec"]["perDeviceNodeSelection"] = True
    made = cluster({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-a"}})
    made.view.subscribe(made.model.on_change)
    made.view.apply(Kind.RESOURCE_SLICE, per_device)
    assert [x.device.name for x in made.model.inventory().nodes["node-a"]] == ["gpu-1"]
    return made


def test_a_device_not_reaching_the_node_is_tried_before_its_node_selection(cluster: Make) -> None:
    # isSelectable: the class's selectors, the request's, then (perDeviceNodeSelection) the
    # device's node: the scheduler reaches gpu-0 first on node-a, and its error aborts the pod
    c = _per_device(cluster, erring_first=True)
    verdict = c.check(spec(request("gpu", "gpu.nvidia.com", 1, NVLINK)))
    assert verdict.outcome == NEVER
    assert f"selector #0 errs on device {DRIVER}/pd/gpu-0" in verdict.problems[0].message
    assert "SchedulerError" in verdict.problems[0].message


def test_a_device_not_reaching_the_node_after_the_one_taken_is_never_tried(
    cluster: Make,
) -> None:
    c = _per_device(cluster, erring_first=False)
    assert c.check(spec(request("gpu", "gpu.nvidia.com", 1, NVLINK))).outcome == OK


def test_all_devices_try_every_device_of_a_per_device_slice_the_node_gathered(
    cluster: Make,
) -> None:
    c = _per_device(cluster, erring_first=False)
    every = spec(request("gpu", "gpu.nvidia.com", None, NVLINK, allocationMode="All"))
    verdict = c.check(every)
    assert verdict.outcome == NEVER
    assert f"selector #0 errs on device {DRIVER}/pd/gpu-0" in verdict.problems[0].message
