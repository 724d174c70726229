"""Pool validity and generations, per node, as upstream's GatherPools and buildPool decide them.

k8s.io/dynamic-resource-allocation/structured/internal/incubating/pools_incubating.go at v1.36:
an invalid pool fails allocation on the node that gathered it ("invalid resource pools were
encountered", ErrFailedAllocationOnNode: not fatal to the pod), an incomplete one is skipped;
either way its devices are not allocated, and a claim no other pool can take is never. A request
for allocationMode All on a node that gathered either (of any driver) fails the whole pod
instead (``validateDeviceRequest``: SchedulerError), whatever other nodes offer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from app.allocation import NEVER, NOT_NOW, OK
from app.cel.engine import Engine
from app.cluster.view import Kind
from tests.allocation.helpers import Cluster, request, spec
from tests.allocation.nvidia import DRIVER, allocated_claim, gpu

Obj = dict[str, Any]
Make = Callable[..., Cluster]
UNUSABLE = "pools the scheduler can use now (the others are incomplete or invalid)"


@pytest.fixture
def cluster(engine: Engine) -> Make:
    def make(*objects: Obj) -> Cluster:
        made = Cluster(engine, list(objects))
        made.view.subscribe(made.model.on_change)
        return made

    return make


def node(name: str) -> Obj:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {}}}


def rslice(name: str, pool: str, count: int, generation: int = 1, **spec_fields: Any) -> Obj:
    """A ResourceSlice of ``pool``; ``spec_fields`` adds nodeName, devices, sharedCounters..."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name, "resourceVersion": str(generation)},
        "spec": {
            "driver": DRIVER,
            "pool": {"name": pool, "generation": generation, "resourceSliceCount": count},
            **spec_fields,
        },
    }


def counter_set(name: str, **counters: str) -> Obj:
    return {"name": name, "counters": {k: {"value": v} for k, v in counters.items()}}


def consuming(node: str, index: int, counter_set: str, **counters: str) -> Obj:
    uses = [{"counterSet": counter_set, "counters": {k: {"value": v} for k, v in counters.items()}}]
    return gpu(node, index, consumesCounters=uses)


def plain(node: str, index: int) -> Obj:
    return gpu(node, index, consumesCounters=[])


def messages(verdict: Any) -> str:
    return " ".join(p.message for p in verdict.problems)


# -- invalid pools -----------------------------------------------------------------------------


def _invalid_pools() -> dict[str, list[Obj]]:
    a = "node-a"
    return {
        "a counter set defined twice": [
            rslice("p-0", "p", 3, nodeName=a, devices=[consuming(a, 0, "cs", memory="1")]),
            rslice("p-1", "p", 3, nodeName=a, sharedCounters=[counter_set("cs", memory="1")]),
            rslice("p-2", "p", 3, nodeName=a, sharedCounters=[counter_set("cs", memory="1")]),
        ],
        "a counter set the pool does not define": [
            rslice("p-0", "p", 2, nodeName=a, devices=[consuming(a, 0, "other", memory="1")]),
            rslice("p-1", "p", 2, nodeName=a, sharedCounters=[counter_set("cs", memory="1")]),
        ],
        "a counter its set does not have": [
            rslice("p-0", "p", 2, nodeName=a, devices=[consuming(a, 0, "cs", memory="1")]),
            rslice("p-1", "p", 2, nodeName=a, sharedCounters=[counter_set("cs", cores="1")]),
        ],
        "a counter set only another pool defines": [
            rslice("p-0", "p", 1, nodeName=a, devices=[consuming(a, 0, "cs", memory="1")]),
            rslice("q-0", "q", 1, nodeName=a, sharedCounters=[counter_set("cs", memory="1")]),
        ],
        "a device name twice": [
            rslice("p-0", "p", 2, nodeName=a, devices=[plain(a, 0)]),
            rslice("p-1", "p", 2, nodeName=a, devices=[plain(a, 0)]),
        ],
    }


@pytest.mark.parametrize("case", list(_invalid_pools()))
def test_an_invalid_pools_devices_are_never_allocated(cluster: Make, case: str) -> None:
    c = cluster(node("node-a"), *_invalid_pools()[case])
    verdict = c.check(spec(request(count=1)))
    assert verdict.outcome == NEVER
    assert UNUSABLE in messages(verdict)
    (pool,) = [p for p in c.model.inventory().pools["node-a"] if p.name == "p"]
    assert pool.invalid is not None
    assert not pool.incomplete


def test_the_reason_a_pool_is_invalid_is_upstreams() -> None:
    from app.cel.factory import get_engine

    reasons = {}
    for case, slices in _invalid_pools().items():
        made = Cluster(get_engine("cel-expr-python"), slices)
        (pool,) = [p for p in made.model.inventory().pools["node-a"] if p.name == "p"]
        reasons[case] = pool.invalid
    assert reasons == {
        "a counter set defined twice": "duplicate counter set name cs",
        "a counter set the pool does not define": "counter set other not found",
        "a counter its set does not have": "counter memory not found in counter set cs",
        "a counter set only another pool defines": "counter set cs not found",
        "a device name twice": "duplicate device name gpu-0",
    }


def test_an_invalid_pool_on_one_node_does_not_stop_another_node(cluster: Make) -> None:
    broken = _invalid_pools()["a counter set the pool does not define"]
    fine = rslice("b-0", "b", 1, nodeName="node-b", devices=[plain("node-b", 0)])
    c = cluster(node("node-a"), node("node-b"), *broken, fine)
    assert c.check(spec(request(count=1))).outcome == OK


def test_a_device_of_another_nodes_slice_with_an_unknown_counter_set_invalidates_the_pool(
    cluster: Make,
) -> None:
    # upstream's partitionable-devices-validation-error-on-non-targeting-slice
    c = cluster(
        node("node-a"),
        node("node-b"),
        rslice("p-0", "p", 3, nodeName="node-a", sharedCounters=[counter_set("cs", memory="8")]),
        rslice(
            "p-1", "p", 3, nodeName="node-a", devices=[consuming("node-a", 0, "cs", memory="6")]
        ),
        rslice(
            "p-2", "p", 3, nodeName="node-b", devices=[consuming("node-b", 3, "cs2", memory="6")]
        ),
    )
    assert c.check(spec(request(count=1))).outcome == NEVER
    assert [p.invalid for p in c.model.inventory().pools["node-a"]] == ["counter set cs2 not found"]


# -- incomplete pools --------------------------------------------------------------------------


@pytest.mark.parametrize("declared", [1, 3])
def test_slices_disagreeing_with_their_count_make_the_pool_incomplete(
    cluster: Make, declared: int
) -> None:
    c = cluster(
        node("node-a"),
        rslice("p-0", "p", declared, nodeName="node-a", devices=[plain("node-a", 0)]),
        rslice("p-1", "p", declared, nodeName="node-a", devices=[plain("node-a", 1)]),
    )
    verdict = c.check(spec(request(count=1)))
    assert verdict.outcome == NEVER
    assert UNUSABLE in messages(verdict)
    assert [p.incomplete for p in c.model.inventory().pools["node-a"]] == [True]


def test_a_pool_whose_slices_span_nodes_is_complete_counted_across_the_cluster(
    cluster: Make,
) -> None:
    c = cluster(
        node("node-a"),
        node("node-b"),
        rslice("p-0", "p", 2, nodeName="node-a", devices=[plain("node-a", 0)]),
        rslice("p-1", "p", 2, nodeName="node-b", devices=[plain("node-b", 1)]),
    )
    assert c.check(spec(request(count=1))).outcome == OK
    assert c.check(spec(request(count=2))).outcome == NEVER  # one device per node


# -- allocationMode All on a node with an unusable pool --------------------------------------


def _all() -> Obj:
    return spec(request(count=None, allocationMode="All"))


def _fine(name: str) -> Obj:
    return rslice(f"{name}-0", name, 1, nodeName=name, devices=[plain(name, 0)])


def test_all_devices_of_the_incomplete_pool(cluster: Make) -> None:
    # upstream's all-devices-of-the-incomplete-pool, on a cluster where node-a could take it
    incomplete = rslice("b-0", "b", 2, nodeName="node-b", devices=[plain("node-b", 0)])
    c = cluster(node("node-a"), node("node-b"), _fine("node-a"), incomplete)
    verdict = c.check(_all())
    assert verdict.outcome == NEVER
    assert [(p.path, p.message) for p in verdict.problems] == [
        (
            "spec.devices.requests[0]",
            "asks for all matching devices (allocationMode All), but resource pool "
            f"{DRIVER}/b on node-b is incomplete (its driver is updating it): the scheduler "
            "fails the pod (SchedulerError), whatever other nodes offer",
        )
    ]
    assert c.check(spec(request(count=1))).outcome == OK  # only All asks for every pool


def test_all_devices_on_a_node_with_an_invalid_pool_fail_the_pod(cluster: Make) -> None:
    broken = _invalid_pools()["a device name twice"]
    c = cluster(node("node-a"), node("node-b"), *broken, _fine("node-b"))
    verdict = c.check(_all())
    assert verdict.outcome == NEVER
    assert (
        f"resource pool {DRIVER}/p on node-a is invalid (duplicate device name gpu-0)"
        in messages(verdict)
    )


def test_an_incomplete_pool_of_another_driver_fails_an_all_request_too(cluster: Make) -> None:
    # upstream looks at every pool the node gathered, before it matches any device
    other = rslice("x-0", "x", 2, nodeName="node-b", devices=[plain("node-b", 0)])
    other["spec"]["driver"] = "other.example.com"
    c = cluster(node("node-a"), node("node-b"), _fine("node-a"), _fine("node-b"), other)
    verdict = c.check(_all())
    assert verdict.outcome == NEVER
    assert "resource pool other.example.com/x on node-b is incomplete" in messages(verdict)


def test_a_pool_a_node_sees_only_through_its_counter_sets_counts_too(cluster: Make) -> None:
    # node-c gathers the rack pool for its counter set alone (the rack's devices are node-a's
    # and node-b's, which are no Nodes here): no device of it, and still it fails All there
    objects = _rack(held=False)[2:]
    for rack_slice in objects:
        rack_slice["spec"]["pool"]["resourceSliceCount"] = 4
    c = cluster(node("node-c"), _fine("node-c"), *objects)
    assert [p.name for p in c.model.inventory().pools["node-c"]] == ["node-c", "rack"]
    assert {x.pool.name for x in c.model.inventory().nodes["node-c"]} == {"node-c"}
    verdict = c.check(_all())
    assert verdict.outcome == NEVER
    assert f"resource pool {DRIVER}/rack on node-c is incomplete" in messages(verdict)


ERRS = f'device.attributes["{DRIVER}"].nvlinkDomain == 0'
"""Errs on every device here (none has the attribute)."""


@pytest.mark.parametrize(
    ("incomplete", "error"),
    [
        ("z", "selector #0 errs on device"),
        ("a", f"resource pool {DRIVER}/a on node-a is incomplete"),
    ],
)
def test_an_all_request_meets_pools_and_their_devices_in_pool_order(
    cluster: Make, incomplete: str, error: str
) -> None:
    # validateDeviceRequest: pool by pool, the pool's state, then its devices' selectors
    slices = [
        rslice(f"{name}-0", name, 2 if name == incomplete else 1, nodeName="node-a", devices=[d])
        for name, d in (("a", plain("node-a", 0)), ("z", plain("node-a", 1)))
    ]
    c = cluster(node("node-a"), *slices)
    every = spec(request("gpu", "gpu.nvidia.com", None, ERRS, allocationMode="All"))
    verdict = c.check(every)
    assert verdict.outcome == NEVER
    assert error in messages(verdict)


# -- generations -------------------------------------------------------------------------------


def test_a_node_whose_own_slices_are_a_complete_generation_uses_them(cluster: Make) -> None:
    # upstream's multi-host-resource-pool-incomplete-update-from-node-1-to-node-2: the driver
    # publishes generation 2 on node-b; node-a still holds a complete generation 1
    c = cluster(
        node("node-a"),
        node("node-b"),
        rslice("p-a", "p", 1, 1, nodeName="node-a", devices=[plain("node-a", 0)]),
        rslice("p-b", "p", 2, 2, nodeName="node-b", devices=[plain("node-b", 0)]),
    )
    verdict = c.check(spec(request(count=1)))
    assert verdict.outcome == OK
    assert [p.generation for p in c.model.inventory().pools["node-a"]] == [1]
    assert [p.incomplete for p in c.model.inventory().pools["node-b"]] == [True]


def test_an_incomplete_generation_is_obsolete_once_a_newer_one_exists_anywhere(
    cluster: Make,
) -> None:
    c = cluster(
        node("node-a"),
        node("node-b"),
        rslice("p-a", "p", 2, 1, nodeName="node-a", devices=[plain("node-a", 0)]),
        rslice("p-b1", "p", 2, 1, nodeName="node-b", devices=[plain("node-b", 1)]),
        rslice("p-b2", "p", 2, 2, nodeName="node-b", devices=[plain("node-b", 2)]),
    )
    inventory = c.model.inventory()
    assert inventory.pools["node-a"] == []  # generation 1 is being replaced: ignored here
    assert [(p.generation, p.incomplete) for p in inventory.pools["node-b"]] == [(2, True)]
    assert c.check(spec(request(count=1))).outcome == NEVER


def test_a_newer_generation_on_the_same_node_replaces_the_older(cluster: Make) -> None:
    c = cluster(
        node("node-a"),
        rslice("old", "p", 1, 1, nodeName="node-a", devices=[plain("node-a", i) for i in range(4)]),
        rslice("new", "p", 1, 2, nodeName="node-a", devices=[plain("node-a", 0)]),
    )
    assert c.check(spec(request(count=1))).outcome == OK
    assert c.check(spec(request(count=2))).outcome == NEVER


# -- counters across nodes ---------------------------------------------------------------------


def _rack(held: bool) -> list[Obj]:
    """One pool over two nodes: a counter set of 1 for both (a counter slice naming no node is
    gathered for every node), one device per node consuming it all."""
    objects = [
        node("node-a"),
        node("node-b"),
        rslice("rack-0", "rack", 3, allNodes=True, sharedCounters=[counter_set("cs", links="1")]),
        rslice(
            "rack-a",
            "rack",
            3,
            nodeName="node-a",
            devices=[consuming("node-a", 0, "cs", links="1")],
        ),
        rslice(
            "rack-b",
            "rack",
            3,
            nodeName="node-b",
            devices=[consuming("node-b", 1, "cs", links="1")],
        ),
    ]
    if held:
        objects.append(allocated_claim("held", ("rack", "gpu-1")))
    return objects


def test_a_device_allocated_on_another_node_draws_on_the_shared_counters(cluster: Make) -> None:
    assert cluster(*_rack(held=False)).check(spec(request(count=1))).outcome == OK
    verdict = cluster(*_rack(held=True)).check(spec(request(count=1)))
    assert verdict.outcome == NOT_NOW
    pools = cluster(*_rack(held=True)).model.inventory().pools
    assert [k for k, _ in pools["node-a"][0].consumers] == [
        (DRIVER, "rack", "gpu-0"),
        (DRIVER, "rack", "gpu-1"),
    ]


def test_a_counter_slice_is_gathered_for_every_node_whatever_its_node_selection(
    cluster: Make,
) -> None:
    objects = _rack(held=False)
    objects[2] = rslice(
        "rack-0",
        "rack",
        3,
        nodeSelector={
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "nowhere", "operator": "Exists"}]}]
        },
        sharedCounters=[counter_set("cs", links="1")],
    )
    c = cluster(*objects)
    assert c.check(spec(request(count=1))).outcome == OK
    assert next(p.counter_sets for p in c.model.inventory().pools["node-b"])["cs"]


# -- following slice changes -------------------------------------------------------------------


def test_a_slice_change_regathers_the_nodes_that_gathered_its_pool_and_no_other(
    cluster: Make,
) -> None:
    c = cluster(
        node("node-a"),
        node("node-b"),
        node("node-c"),
        rslice("p-0", "p", 2, nodeName="node-a", devices=[plain("node-a", 0)]),
        rslice("p-1", "p", 2, nodeName="node-b", devices=[plain("node-b", 1)]),
        rslice("c-0", "c", 1, nodeName="node-c", devices=[plain("node-c", 0)]),
    )
    before = c.model.inventory()
    kept = before.nodes["node-c"]
    c.view.apply(Kind.RESOURCE_SLICE, rslice("p-1", "p", 2, 2, nodeName="node-b", devices=[]))
    after = c.model.inventory()
    assert after is before
    assert after.nodes["node-c"] is kept
    assert after.pools["node-a"] == []  # generation 2 exists: node-a's generation 1 is obsolete
    assert c.check(spec(request(count=1))).outcome == OK  # node-c's own pool


def test_a_counter_slice_naming_no_node_makes_every_node_gather_its_pool(cluster: Make) -> None:
    c = cluster(*_rack(held=False), node("node-c"))
    assert [p.name for p in c.model.inventory().pools["node-c"]] == ["rack"]
    assert c.model.inventory().nodes["node-c"] == ()
