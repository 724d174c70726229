"""The shortcuts of "never" and "not now" answer exactly what searching every node in full does.

A request that matches fewer devices in the whole cluster than it needs is answered without a
node; a node with fewer devices than a request needs gets no search; a node's search first
counts the devices a request could take; the nearest miss reads only the nodes it must. Each is
compared with the same model searching every node in full (``Model(exhaustive=True)``), on
small generated fleets and on the cases each shortcut is for.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.allocation import NEVER, NOT_NOW, OK, Allocations, ClaimInput, Model, Verdict
from app.allocation import search as search_module
from app.cel.factory import get_engine
from app.cluster.view import ClusterView, Kind
from app.devices.index import DeviceIndex
from app.k8s.claims import parse_claim_spec
from tests.allocation.helpers import request, spec
from tests.allocation.nvidia import CLASSES, DRIVER, allocated_claim, gpu, node_slice

Obj = dict[str, Any]
MEMORY = ("10Gi", "40Gi", "80Gi", "80Gi")
PRODUCTS = ("H100", "A100")
THRESHOLDS = ("1Mi", "1Mi", "40Gi", "80Gi", "81Gi")
UNHEALTHY = {"key": "nvidia.com/unhealthy", "effect": "NoSchedule"}


class Twins:
    """One cluster view and device index, read by a model with its shortcuts and by one that
    searches every node in full."""

    def __init__(self, objects: list[Obj]) -> None:
        self.view = ClusterView()
        self.index = DeviceIndex(get_engine())
        self.view.subscribe(self.index.on_change)
        self.fast = Model(self.index)
        self.full = Model(self.index, exhaustive=True)
        for obj in [*CLASSES, *objects]:
            self.view.apply(Kind(obj["kind"]), obj)

    def check(self, model: Model, *specs: Obj) -> Verdict:
        claims = [
            ClaimInput(
                f"claim c{i}", parse_claim_spec(s), f"claims[{i}]." if len(specs) > 1 else ""
            )
            for i, s in enumerate(specs)
        ]
        return model.check(
            claims,
            self.view.device_classes(),
            self.view.derived(Allocations),
            classes_generation=self.view.generation(Kind.DEVICE_CLASS),
        )

    def both(self, *specs: Obj) -> Verdict:
        fast = self.check(self.fast, *specs)
        assert fast == self.check(self.full, *specs)
        return fast


# -- generated fleets ---------------------------------------------------------------------------


@st.composite
def fleets(draw: st.DrawFn) -> list[Obj]:
    objects: list[Obj] = []
    for n in range(draw(st.integers(1, 7))):
        node = f"node-{n}"
        devices = []
        for i in range(draw(st.integers(0, 5))):
            extra: Obj = {"capacity": {"memory": {"value": draw(st.sampled_from(MEMORY))}}}
            if draw(st.integers(0, 5)) == 0:
                extra["taints"] = [UNHEALTHY]
            if draw(st.booleans()):
                extra["consumesCounters"] = []  # (no shared counter: allocated alone)
            devices.append(gpu(node, i, product=draw(st.sampled_from(PRODUCTS)), **extra))
        incomplete = draw(st.integers(0, 4)) == 0  # a pool missing one of its two slices
        objects.append(
            node_slice(node, len(devices), devices=devices, slices=2 if incomplete else 1)
        )
        for device in devices:
            if draw(st.integers(0, 2)) == 0:
                held = f"held-{n}-{device['name']}"
                objects.append(allocated_claim(held, (node, device["name"])))
    if draw(st.integers(0, 3)) == 0:  # devices reaching every node, and one reaching none
        shared = node_slice("shared", 2, name="shared-slice")
        del shared["spec"]["nodeName"]
        shared["spec"]["allNodes"] = True
        objects.append(shared)
    if draw(st.integers(0, 5)) == 0:
        nowhere = node_slice("nowhere", 1, name="nowhere-slice")
        del nowhere["spec"]["nodeName"]
        objects.append(nowhere)
    return objects


@st.composite
def alternatives(draw: st.DrawFn, name: str) -> Obj:
    selectors = [
        f'device.capacity["{DRIVER}"].memory.compareTo(quantity('
        f'"{draw(st.sampled_from(THRESHOLDS))}")) >= 0'
    ]
    if draw(st.integers(0, 2)) == 0:
        selectors.append(
            f'device.attributes["{DRIVER}"].productName == "{draw(st.sampled_from(PRODUCTS))}"'
        )
    if draw(st.integers(0, 14)) == 0:  # errs on every device: the scheduler aborts the pod
        selectors.append(f'device.attributes["{DRIVER}"].missing == "x"')
    fields: Obj = {}
    if draw(st.integers(0, 5)) == 0:
        count: int | None = None
        fields["allocationMode"] = "All"
    else:
        count = draw(st.sampled_from((1, 1, 2, 2, 3, 4, 6)))
    if draw(st.integers(0, 7)) == 0:
        fields["adminAccess"] = True
    return request(name, "gpu.nvidia.com", count, *selectors, **fields)


@st.composite
def claims(draw: st.DrawFn) -> list[Obj]:
    out = []
    for _ in range(draw(st.integers(1, 2))):
        requests = []
        for r in range(draw(st.integers(1, 2))):
            if draw(st.integers(0, 3)) == 0:
                subs = [draw(alternatives(f"s{k}"))["exactly"] for k in range(2)]
                subs = [{"name": f"s{k}", **body} for k, body in enumerate(subs)]
                requests.append({"name": f"r{r}", "firstAvailable": subs})
            else:
                requests.append(draw(alternatives(f"r{r}")))
        constraints = None
        if len(requests) > 1 and draw(st.integers(0, 3)) == 0:
            constraints = [{"matchAttribute": f"{DRIVER}/productName"}]
        out.append(spec(*requests, constraints=constraints))
    return out


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fleet=fleets(), wanted=claims())
def test_the_shortcuts_answer_what_searching_every_node_answers(
    fleet: list[Obj], wanted: list[Obj]
) -> None:
    Twins(fleet).both(*wanted)


# -- the case each shortcut is for ----------------------------------------------------------------


def _nodes(n: int, gpus: int = 2) -> list[Obj]:
    return [node_slice(f"node-{i}", gpus) for i in range(n)]


def _memory(at_least: str) -> str:
    return f'device.capacity["{DRIVER}"].memory.compareTo(quantity("{at_least}")) >= 0'


def test_a_request_short_in_the_whole_cluster_searches_no_node(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    twins = Twins(_nodes(8))
    searched = []
    run = search_module.Search.run

    def counted(self: search_module.Search) -> bool:
        searched.append(self)
        return run(self)

    monkeypatch.setattr(search_module.Search, "run", counted)
    verdict = twins.check(twins.fast, spec(request("gpu", "gpu.nvidia.com", 1, _memory("81Gi"))))
    assert verdict.outcome == NEVER
    assert searched == []
    assert verdict == twins.check(
        twins.full, spec(request("gpu", "gpu.nvidia.com", 1, _memory("81Gi")))
    )
    assert len(searched) >= 8  # the reference searched every node (and again to explain)


def test_a_request_larger_than_any_node_builds_no_search(monkeypatch: pytest.MonkeyPatch) -> None:
    twins = Twins(_nodes(8))
    built = []
    init = search_module.Search.__init__

    def counted(self: search_module.Search, *args: Any, **kwargs: Any) -> None:
        built.append(self)
        init(self, *args, **kwargs)

    monkeypatch.setattr(search_module.Search, "__init__", counted)
    verdict = twins.check(twins.fast, spec(request(count=3)))
    assert verdict.outcome == NEVER
    assert built == []
    assert [p.message for p in verdict.problems] == [
        "asks for 3 devices on one node; the most on any node is 2 "
        "(node-0, node-1, node-2, node-3, node-4, ...)"
    ]
    assert verdict == twins.check(twins.full, spec(request(count=3)))


@pytest.mark.parametrize("nodes", [1, 5, 6, 7])
def test_the_most_on_any_node_names_the_same_nodes_when_it_stops_early(nodes: int) -> None:
    fleet = _nodes(nodes)
    fleet[0] = node_slice("node-0", 1)  # the first node is smaller
    twins = Twins(fleet)
    twins.both(spec(request(count=3)))


def test_a_short_request_counts_only_devices_in_pools_the_scheduler_can_use() -> None:
    # node-0's pool misses one of its two slices (incomplete)
    twins = Twins([node_slice("node-0", 2, slices=2), node_slice("node-1", 1)])
    verdict = twins.both(spec(request(count=5)))
    assert verdict.outcome == NEVER
    assert verdict.problems[0].message == (
        "asks for 5 devices, the whole cluster has 3 devices of the class, only 1 of them "
        "usable (on a node, in a complete and valid pool)"
    )


def test_a_short_request_counts_only_devices_that_reach_a_node() -> None:
    nowhere = node_slice("nowhere", 1, name="nowhere-slice")
    del nowhere["spec"]["nodeName"]
    twins = Twins([node_slice("node-0", 2), nowhere])
    verdict = twins.both(spec(request(count=5)))
    assert verdict.outcome == NEVER
    assert verdict.problems[0].message == (
        "asks for 5 devices, the whole cluster has 3 devices of the class, only 2 of them "
        "usable (on a node, in a complete and valid pool)"
    )


def test_an_admin_request_counts_the_allocated_devices_as_its_own() -> None:
    held = [allocated_claim("held", ("node-0", "gpu-0"), ("node-0", "gpu-1"))]
    # (devices without counters: an admin request is charged the counters of what it takes)
    devices = [gpu("node-0", i, consumesCounters=[]) for i in range(2)]
    twins = Twins([node_slice("node-0", 2, devices=devices), *held])
    assert twins.both(spec(request(count=2))).outcome == NOT_NOW
    assert twins.both(spec(request(count=2, adminAccess=True))).outcome == OK


def test_a_short_request_with_an_erring_selector_still_aborts_like_the_scheduler() -> None:
    twins = Twins(_nodes(3))
    errs = f'device.attributes["{DRIVER}"].missing == "x"'
    verdict = twins.both(spec(request("gpu", "gpu.nvidia.com", 7, errs)))
    assert verdict.outcome == NEVER
    assert "SchedulerError" in verdict.problems[0].message


def test_not_now_when_every_node_has_one_device_too_few_free() -> None:
    held = [allocated_claim(f"held-{i}", (f"node-{i}", "gpu-0")) for i in range(4)]
    twins = Twins([*_nodes(4, gpus=3), *held])
    verdict = twins.both(spec(request(count=3)))
    assert verdict.outcome == NOT_NOW
    assert verdict.problems[0].message.startswith("not now: 4 of 12 matching devices")


def test_what_the_devices_offer_is_read_again_after_a_slice_change() -> None:
    twins = Twins(_nodes(2))
    asks = spec(request("gpu", "gpu.nvidia.com", 1, _memory("200Gi")))
    assert "largest gpu.nvidia.com/memory is 80Gi" in twins.both(asks).problems[0].message
    larger = gpu("node-9", 0, capacity={"memory": {"value": "96Gi"}})
    twins.view.apply(Kind.RESOURCE_SLICE, node_slice("node-9", 1, devices=[larger]))
    assert "largest gpu.nvidia.com/memory is 96Gi" in twins.both(asks).problems[0].message
    other = spec(request("gpu", "gpu.nvidia.com", 1, _memory("300Gi")))
    assert "largest gpu.nvidia.com/memory is 96Gi" in twins.both(other).problems[0].message
