"""Nodes and their labels: which nodes a slice's nodeSelector reaches, as the scheduler decides.

The selector semantics are k8s.io/component-helpers' nodeaffinity (``NodeSelector.Match``), as
upstream's ``NodeMatches`` uses it; the model follows Node events as the pipeline subscribes it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from app.allocation import NEVER, OK
from app.allocation.nodes import ANY_NODE, Selector, reach_of
from app.cel.engine import Engine
from app.cluster.view import Kind
from tests.allocation.helpers import Cluster, request, spec
from tests.allocation.nvidia import DRIVER, gpu, node_slice

Obj = dict[str, Any]
Make = Callable[..., Cluster]


@pytest.fixture
def cluster(engine: Engine) -> Make:
    """A cluster whose model follows the view's events (Nodes included), as the pipeline's."""

    def make(*objects: Obj) -> Cluster:
        made = Cluster(engine, list(objects))
        made.view.subscribe(made.model.on_change)
        return made

    return make


def node(name: str, version: int = 1, **labels: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels, "resourceVersion": str(version)},
    }


def selected(name: str, selector: Obj, gpus: int = 1, pool: str | None = None) -> Obj:
    """A slice of GPUs (no counters) for the nodes ``selector`` picks."""
    made = node_slice(name, gpus, devices=[gpu(name, i, consumesCounters=[]) for i in range(gpus)])
    made["metadata"]["name"] = name
    del made["spec"]["nodeName"], made["spec"]["sharedCounters"]
    made["spec"]["pool"]["name"] = pool or name
    made["spec"]["nodeSelector"] = selector
    return made


def on(key: str, operator: str, *values: str) -> Obj:
    requirement: Obj = {"key": key, "operator": operator}
    if values:
        requirement["values"] = list(values)
    return {"nodeSelectorTerms": [{"matchExpressions": [requirement]}]}


def matches(selector: Obj, name: str = "n", **labels: str) -> bool:
    return Selector.parse(selector).matches(name, labels)


# -- the selector, as nodeaffinity evaluates it ------------------------------------------------


@pytest.mark.parametrize(
    ("selector", "labels", "expected"),
    [
        (on("rack", "In", "r1", "r2"), {"rack": "r2"}, True),
        (on("rack", "In", "r1"), {"rack": "r3"}, False),
        (on("rack", "In", "r1"), {}, False),
        (on("rack", "NotIn", "r1"), {"rack": "r2"}, True),
        (on("rack", "NotIn", "r1"), {}, True),  # an unset label is in no set
        (on("rack", "NotIn", "r1"), {"rack": "r1"}, False),
        (on("fabric", "Exists"), {"fabric": ""}, True),
        (on("fabric", "Exists"), {}, False),
        (on("fabric", "DoesNotExist"), {}, True),
        (on("fabric", "DoesNotExist"), {"fabric": "x"}, False),
        (on("gpus", "Gt", "4"), {"gpus": "8"}, True),
        (on("gpus", "Gt", "8"), {"gpus": "8"}, False),
        (on("gpus", "Lt", "8"), {"gpus": "-3"}, True),
        (on("gpus", "Lt", "8"), {"gpus": "+7"}, True),  # strconv.ParseInt takes a sign
        (on("gpus", "Gt", "4"), {"gpus": "8x"}, False),  # not an integer: no match
        (on("gpus", "Gt", "4"), {"gpus": "1_000"}, False),  # Python would read it; Go does not
        (on("gpus", "Gt", "4"), {"gpus": str(1 << 63)}, False),  # over int64
        (on("gpus", "Gt", "4"), {}, False),
        (on("gpus", "Gt", "four"), {"gpus": "8"}, False),  # API validation refuses it
        (on("rack", "In"), {"rack": "r1"}, False),  # In without values: refused, no match
        (on("rack", "Bogus", "r1"), {"rack": "r1"}, False),
    ],
)
def test_a_label_requirement_holds_as_in_nodeaffinity(
    selector: Obj, labels: dict[str, str], expected: bool
) -> None:
    assert matches(selector, **labels) is expected


def test_terms_are_ored_and_the_requirements_of_one_term_anded() -> None:
    selector = {
        "nodeSelectorTerms": [
            {
                "matchExpressions": [
                    {"key": "rack", "operator": "In", "values": ["r1"]},
                    {"key": "fabric", "operator": "Exists"},
                ]
            },
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z9"]}]},
        ]
    }
    assert matches(selector, rack="r1", fabric="ib")
    assert not matches(selector, rack="r1")
    assert matches(selector, zone="z9")
    assert not matches(selector)


def test_match_fields_know_the_node_name_and_combine_with_labels() -> None:
    term = {
        "matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["n-2"]}],
        "matchExpressions": [{"key": "rack", "operator": "Exists"}],
    }
    selector = {"nodeSelectorTerms": [term]}
    assert Selector.parse(selector).matches("n-1", {"rack": "r"})
    assert not Selector.parse(selector).matches("n-2", {"rack": "r"})
    assert not Selector.parse(selector).matches("n-1", {})
    only = {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n-1"]}]}
        ]
    }
    assert Selector.parse(only).matches("n-1", {})
    assert not Selector.parse(only).matches("n-3", {"rack": "r"})


def test_an_empty_term_selects_no_node() -> None:
    assert not matches({"nodeSelectorTerms": [{}]})
    assert not matches({"nodeSelectorTerms": [{"matchExpressions": []}]})
    assert matches({"nodeSelectorTerms": [{}, {"matchExpressions": [on_key("x")]}]}, x="1")


def on_key(key: str) -> Obj:
    return {"key": key, "operator": "Exists"}


def test_without_labels_a_selector_on_labels_may_match_and_names_still_decide() -> None:
    by_label = reach_of({"nodeSelector": on("rack", "In", "r1")})
    by_host = reach_of({"nodeSelector": on("kubernetes.io/hostname", "In", "node-a")})
    assert by_label is not None and by_host is not None
    assert by_label.matches("node-a", None) and by_label.matches(ANY_NODE, None)
    assert by_host.matches("node-a", None)
    assert not by_host.matches("node-b", None) and not by_host.matches(ANY_NODE, None)
    # with the Node's labels, the hostname is a label like any other
    assert not by_host.matches("node-a", {"kubernetes.io/hostname": "elsewhere"})


# -- the model over labelled Nodes -------------------------------------------------------------

FABRIC = on("example.com/fabric", "In", "ib-0")
"""A fabric-level pool: its GPUs reach the nodes attached to fabric ib-0."""


def fabric_cluster(cluster: Make, *, attached: tuple[str, ...] = ("node-a",)) -> Cluster:
    """node-a and node-b: 2 local GPUs each; node-c: none of its own. The fabric pool reaches
    the nodes in ``attached``."""
    nodes = [
        node(n, **({"example.com/fabric": "ib-0"} if n in attached else {}))
        for n in ("node-a", "node-b", "node-c")
    ]
    return cluster(
        *nodes,
        node_slice("node-a"),
        node_slice("node-b", 2, devices=[gpu("node-b", i, product="NVIDIA L4") for i in range(2)]),
        selected("fabric-gpus", FABRIC, gpus=2),
    )


FABRIC_GPU = f'device.attributes["{DRIVER}"].uuid.startsWith("GPU-fabric")'
L4 = f'device.attributes["{DRIVER}"].productName == "NVIDIA L4"'


def test_a_fabric_gpu_with_a_gpu_only_another_node_type_has_is_never(cluster: Make) -> None:
    c = fabric_cluster(cluster, attached=("node-a",))
    pair = spec(
        request("fabric", "gpu.nvidia.com", 1, FABRIC_GPU), request("l4", "gpu.nvidia.com", 1, L4)
    )
    verdict = c.check(pair)
    assert verdict.outcome == NEVER
    assert c.check(spec(request("fabric", "gpu.nvidia.com", 1, FABRIC_GPU))).outcome == OK
    assert c.check(spec(request("l4", "gpu.nvidia.com", 1, L4))).outcome == OK


def test_the_same_pair_is_ok_where_one_node_has_both(cluster: Make) -> None:
    c = fabric_cluster(cluster, attached=("node-a", "node-b"))
    pair = spec(
        request("fabric", "gpu.nvidia.com", 1, FABRIC_GPU), request("l4", "gpu.nvidia.com", 1, L4)
    )
    assert c.check(pair).outcome == OK


def test_without_node_objects_a_label_selector_is_taken_to_match(cluster: Make) -> None:
    c = cluster(
        node_slice("node-a"),
        node_slice("node-b", 2, devices=[gpu("node-b", i, product="NVIDIA L4") for i in range(2)]),
        selected("fabric-gpus", FABRIC, gpus=2),
    )
    pair = spec(
        request("fabric", "gpu.nvidia.com", 1, FABRIC_GPU), request("l4", "gpu.nvidia.com", 1, L4)
    )
    assert c.check(pair).outcome == OK
    assert not c.model.node_labels_known


def test_the_nodes_are_the_clusters_nodes_not_the_names_slices_give(cluster: Make) -> None:
    c = cluster(node("node-a"), node("cpu-1"), node_slice("node-a"), node_slice("gone"))
    inventory = c.model.inventory()
    assert sorted(inventory.nodes) == ["cpu-1", "node-a"]
    assert inventory.nodes["cpu-1"] == ()
    # a slice for a node that does not exist reaches no node, as for the scheduler
    assert c.check(spec(request(count=2))).outcome == OK
    assert c.check(spec(request(count=3))).outcome == NEVER


def test_devices_selected_per_device_follow_each_devices_selector(cluster: Make) -> None:
    per_device = selected("pd", FABRIC, gpus=0)
    del per_device["spec"]["nodeSelector"]
    per_device["spec"]["perDeviceNodeSelection"] = True
    per_device["spec"]["devices"] = [
        gpu("pd", 0, consumesCounters=[], nodeSelector=on("rack", "In", "r1")),
        gpu("pd", 1, consumesCounters=[], nodeSelector=on("rack", "In", "r2")),
        gpu("pd", 2, consumesCounters=[], allNodes=True),
    ]
    c = cluster(node("n-1", rack="r1"), node("n-2", rack="r2"), node("n-3"), per_device)
    inventory = c.model.inventory()
    names = {n: sorted(x.device.name for x in found) for n, found in inventory.nodes.items()}
    assert names == {"n-1": ["gpu-0", "gpu-2"], "n-2": ["gpu-1", "gpu-2"], "n-3": ["gpu-2"]}
    assert c.check(spec(request(count=2))).outcome == OK
    assert c.check(spec(request(count=3))).outcome == NEVER


# -- following the Nodes -----------------------------------------------------------------------


def test_a_nodes_new_labels_regather_only_that_node_and_change_the_verdict(
    cluster: Make,
) -> None:
    c = fabric_cluster(cluster, attached=("node-a",))
    pair = spec(
        request("fabric", "gpu.nvidia.com", 1, FABRIC_GPU), request("l4", "gpu.nvidia.com", 1, L4)
    )
    assert c.check(pair).outcome == NEVER
    before = c.model.inventory()
    kept = {n: before.nodes[n] for n in ("node-a", "node-c")}
    c.view.apply(Kind.NODE, node("node-b", 2, **{"example.com/fabric": "ib-0"}))
    after = c.model.inventory()
    assert after is before  # updated in place, not rebuilt
    assert all(after.nodes[n] is kept[n] for n in kept)  # the others were not re-gathered
    assert {x.key[1] for x in after.nodes["node-b"]} == {"node-b", "fabric-gpus"}
    assert len(after.nodes["node-b"]) == 4
    assert c.check(pair).outcome == OK
    c.view.apply(Kind.NODE, node("node-b", 3))  # detached again
    assert c.check(pair).outcome == NEVER


def test_a_node_change_that_keeps_its_labels_touches_nothing(cluster: Make) -> None:
    c = fabric_cluster(cluster)
    c.check(spec(request(count=2)))
    before = c.model.inventory()
    nodes = dict(before.nodes)
    hits = c.model.memo_hits
    c.view.apply(Kind.NODE, node("node-b", 7))  # a status update: a new version, same labels
    assert c.model.inventory().nodes == nodes
    assert all(c.model.inventory().nodes[n] is nodes[n] for n in nodes)
    c.check(spec(request(count=2)))
    assert c.model.memo_hits == hits + 1


def test_an_ok_verdict_stays_memoized_while_other_nodes_change(cluster: Make) -> None:
    c = fabric_cluster(cluster, attached=("node-a",))
    one = spec(request("fabric", "gpu.nvidia.com", 1, FABRIC_GPU))
    assert c.check(one).outcome == OK  # node-a takes it
    hits = c.model.memo_hits
    c.view.apply(Kind.NODE, node("node-c", 2, **{"example.com/fabric": "ib-0"}))
    assert c.check(one).outcome == OK
    assert c.model.memo_hits == hits + 1
    c.view.apply(Kind.NODE, node("node-a", 2))  # the node that took it leaves the fabric
    assert c.check(one).outcome == OK  # node-c now
    assert c.model.memo_hits == hits + 1
    c.view.apply(Kind.NODE, node("node-c", 3))
    assert c.check(one).outcome == NEVER


def test_nodes_added_and_removed_are_gathered_and_dropped(cluster: Make) -> None:
    c = fabric_cluster(cluster)
    c.model.inventory()
    c.view.apply(Kind.NODE, node("node-d", **{"example.com/fabric": "ib-0"}))
    assert len(c.model.inventory().nodes["node-d"]) == 2
    c.view.remove(Kind.NODE, node("node-d"))
    assert "node-d" not in c.model.inventory().nodes
    assert "node-d" not in c.model.inventory().relevant


def test_nodes_appearing_or_all_going_away_switch_how_nodes_are_known(cluster: Make) -> None:
    c = cluster(node_slice("node-a"), selected("fabric-gpus", FABRIC, gpus=2))
    assert sorted(c.model.inventory().nodes) == [ANY_NODE, "node-a"]
    assert c.check(spec(request(count=4))).outcome == OK  # the fabric taken to reach node-a
    c.view.apply(Kind.NODE, node("node-a"))
    assert sorted(c.model.inventory().nodes) == ["node-a"]
    assert c.check(spec(request(count=4))).outcome == NEVER
    c.view.remove(Kind.NODE, node("node-a"))
    assert c.check(spec(request(count=4))).outcome == OK
    assert not c.model.node_labels_known


def test_nodes_seeing_the_same_shared_slices_share_what_was_gathered(cluster: Make) -> None:
    cpu_nodes = [node(f"cpu-{i}", **{"example.com/fabric": "ib-0"}) for i in range(50)]
    c = cluster(*cpu_nodes, node("node-a"), node_slice("node-a"), selected("fabric-gpus", FABRIC))
    inventory = c.model.inventory()
    shared = {id(inventory.nodes[f"cpu-{i}"]) for i in range(50)}
    assert len(shared) == 1
    assert len(inventory.nodes["cpu-0"]) == 1
    c.view.apply(Kind.NODE, node("cpu-7", 2))
    assert c.model.inventory().nodes["cpu-7"] == ()
    assert len(c.model.inventory().nodes["cpu-8"]) == 1


# -- many nodes: selectors against an index of labels ------------------------------------------

SELECTORS = [
    on("rack", "In", "r1", "r2"),
    on("rack", "NotIn", "r1"),
    on("rack", "Exists"),
    on("rack", "DoesNotExist"),
    on("gpus", "Gt", "3"),
    on("gpus", "Lt", "5"),
    {
        "nodeSelectorTerms": [
            {
                "matchExpressions": [{"key": "rack", "operator": "Exists"}],
                "matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["n-3"]}],
            },
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n-7"]}]},
        ]
    },
]


def _labels(i: int) -> dict[str, str]:
    labels = {}
    if i % 4:
        labels["rack"] = f"r{i % 4}"
    if i % 3:
        labels["gpus"] = str(i % 9) if i % 5 else "x"
    return labels


@pytest.mark.parametrize("selector", SELECTORS)
def test_a_selector_against_the_label_index_picks_the_nodes_it_matches(selector: Obj) -> None:
    from app.allocation.nodes import LabelIndex

    labels = {f"n-{i}": _labels(i) for i in range(40)}
    parsed = Selector.parse(selector)
    expected = {n for n, found in labels.items() if parsed.matches(n, found)}
    assert parsed.select(LabelIndex(labels, labels)) == expected
    assert 0 < len(expected) < 40


def test_a_build_over_many_nodes_gathers_what_asking_each_node_would(
    cluster: Make, monkeypatch: pytest.MonkeyPatch
) -> None:
    from app.allocation import inventory

    nodes = [node(f"n-{i}", **_labels(i)) for i in range(40)]
    slices = [selected(f"pool-{k}", s, gpus=2) for k, s in enumerate(SELECTORS)]
    per_device = selected("pd", FABRIC, gpus=0)
    del per_device["spec"]["nodeSelector"]
    per_device["spec"]["perDeviceNodeSelection"] = True
    per_device["spec"]["devices"] = [
        gpu("pd", k, consumesCounters=[], nodeSelector=s) for k, s in enumerate(SELECTORS)
    ]

    def gathered(bulk: int) -> dict[str, list[str]]:
        monkeypatch.setattr(inventory, "BULK", bulk)
        made = cluster(*nodes, node_slice("n-1"), *slices, per_device).model.inventory()
        return {n: [x.label for x in found] for n, found in made.nodes.items()}

    asked = gathered(1 << 30)
    assert gathered(0) == asked
    assert len({tuple(v) for v in asked.values()}) > 5


def test_nodes_with_slices_of_their_own_share_the_rack_pool_they_see_alike(cluster: Make) -> None:
    nodes = [node(f"n-{i}", **{"example.com/fabric": "ib-0"}) for i in range(3)]
    c = cluster(*nodes, *(node_slice(f"n-{i}") for i in range(3)), selected("fabric", FABRIC))
    inventory = c.model.inventory()
    pools = [next(p for p in inventory.pools[f"n-{i}"] if p.name == "fabric") for i in range(3)]
    assert pools[0] is pools[1] is pools[2]
    fabric = [[x for x in inventory.nodes[f"n-{i}"] if x.pool.name == "fabric"] for i in range(3)]
    assert fabric[0][0] is fabric[1][0] is fabric[2][0]
    assert len({id(inventory.nodes[f"n-{i}"]) for i in range(3)}) == 3  # own GPUs differ
