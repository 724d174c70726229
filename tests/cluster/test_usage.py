"""Per-namespace claim usage, kept current from view events rather than recounted."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from app.cluster.usage import ClaimUsage, SliceNodes, TemplateCounts
from app.cluster.view import ClusterView, Kind
from app.k8s.claim_count import EMPTY, count_claim_spec
from tests.claim_objects import GPU, claim, cluster_objects, exact, template
from tests.helpers import make_view

NS = "ml-research"


def test_cluster_file_holds_12_devices_in_ml_research_and_the_deleting_claim_is_not_counted() -> (
    None
):
    usage = make_view(cluster_objects()).derived(ClaimUsage)
    assert usage.devices_of(NS, GPU) == 12
    assert usage.claims(NS) == 3
    assert dict(usage.devices("ml-quota")) == {GPU: 2}
    assert usage.devices_of("open-lab", GPU) == 0


def test_deleting_a_claim_frees_its_devices() -> None:
    view = make_view(cluster_objects())
    usage = view.derived(ClaimUsage)
    view.remove(Kind.RESOURCE_CLAIM, {"metadata": {"name": "train-b", "namespace": NS}})
    assert usage.devices_of(NS, GPU) == 8
    assert usage.claims(NS) == 2


def test_a_claim_that_gets_a_deletion_timestamp_stops_counting() -> None:
    view = make_view(cluster_objects())
    usage = view.derived(ClaimUsage)
    deleting = copy.deepcopy(view.get(Kind.RESOURCE_CLAIM, "train-a", NS))
    assert deleting is not None
    deleting["metadata"]["deletionTimestamp"] = "2026-11-21T06:00:00Z"
    view.apply(Kind.RESOURCE_CLAIM, deleting)
    assert usage.devices_of(NS, GPU) == 8


def test_pending_and_allocated_claims_both_count_and_changes_replace_the_old_share() -> None:
    view = make_view(cluster_objects())
    usage = view.derived(ClaimUsage)
    view.apply(Kind.RESOURCE_CLAIM, claim("train-b", exact(count=1)))  # was 4, pending
    assert usage.devices_of(NS, GPU) == 9
    view.apply(Kind.RESOURCE_CLAIM, claim("new", exact(count=2), namespace="open-lab"))
    assert usage.devices_of("open-lab", GPU) == 2


def test_all_claims_are_tracked_apart_from_device_totals() -> None:
    view = make_view([*cluster_objects(), claim("everything", exact(mode="All"))])
    usage = view.derived(ClaimUsage)
    assert usage.devices_of(NS, GPU) == 12
    assert usage.unbounded_of(NS, GPU) == 1
    assert usage.claims(NS) == 4


def test_a_relist_without_a_claim_frees_it_and_a_malformed_claim_counts_as_a_claim_only() -> None:
    view = make_view(cluster_objects())
    usage = view.derived(ClaimUsage)
    kept = [
        o for o in view.objects(Kind.RESOURCE_CLAIM).values() if o["metadata"]["name"] != "eval"
    ]
    broken = claim("broken", exact())
    broken["spec"]["devices"]["requests"] = "not a list"
    view.replace(Kind.RESOURCE_CLAIM, [*kept, broken])
    assert usage.devices_of(NS, GPU) == 8
    assert usage.claims(NS) == 3


def test_the_pipeline_index_is_one_per_view_and_reads_do_not_scan() -> None:
    view = make_view(cluster_objects())
    assert view.derived(ClaimUsage) is view.index(ClaimUsage)
    calls: list[Any] = []
    view.subscribe(lambda *args: calls.append(args))
    calls.clear()
    for _ in range(100):
        view.derived(ClaimUsage).devices_of(NS, GPU)
    assert calls == []


def test_slice_nodes_counts_nodes_publishing_devices() -> None:
    view = make_view(cluster_objects())
    nodes = view.derived(SliceNodes)
    assert nodes.count == 2
    view.remove(Kind.RESOURCE_SLICE, {"metadata": {"name": "node-b-gpu.nvidia.com-0"}})
    assert nodes.count == 1


_names = st.sampled_from(["a", "b", "c", "d"])
_namespaces = st.sampled_from(["n1", "n2"])
_events = st.lists(
    st.tuples(
        st.sampled_from(["apply", "remove", "delete-mark"]),
        _namespaces,
        _names,
        st.integers(min_value=1, max_value=5),
        st.booleans(),
    ),
    max_size=40,
)


@given(_events)
def test_incremental_totals_always_equal_a_full_recount(events: list[Any]) -> None:
    view = ClusterView()
    usage = view.derived(ClaimUsage)
    for action, namespace, name, count, all_mode in events:
        obj = claim(name, exact(count=count, mode="All" if all_mode else "ExactCount"))
        obj["metadata"]["namespace"] = namespace
        if action == "remove":
            view.remove(Kind.RESOURCE_CLAIM, obj)
            continue
        if action == "delete-mark":
            obj["metadata"]["deletionTimestamp"] = "2026-11-21T06:00:00Z"
        view.apply(Kind.RESOURCE_CLAIM, obj)
    for namespace in ("n1", "n2"):
        live = [
            o
            for o in view.in_namespace(Kind.RESOURCE_CLAIM, namespace).values()
            if not o["metadata"].get("deletionTimestamp")
        ]
        devices: dict[str, int] = {}
        unbounded = 0
        for obj in live:
            counted = count_claim_spec(obj["spec"])
            for device_class, amount in counted.devices.items():
                devices[device_class] = devices.get(device_class, 0) + amount
            unbounded += len(counted.unbounded)
        assert dict(usage.devices(namespace)) == devices
        assert usage.unbounded_of(namespace, GPU) == unbounded
        assert usage.claims(namespace) == len(live)


def test_template_counts_are_computed_once_and_follow_template_changes() -> None:
    view = make_view(cluster_objects())
    counts = view.derived(TemplateCounts)
    first = counts.get(view, "four-gpus", NS)
    assert first is not None
    assert dict(first.devices) == {GPU: 4}
    assert counts.get(view, "four-gpus", NS) is first
    view.apply(Kind.RESOURCE_CLAIM_TEMPLATE, template("four-gpus", exact(count=6)))
    changed = counts.get(view, "four-gpus", NS)
    assert changed is not None
    assert dict(changed.devices) == {GPU: 6}
    view.remove(Kind.RESOURCE_CLAIM_TEMPLATE, template("four-gpus"))
    assert counts.get(view, "four-gpus", NS) is None
    broken = template("broken")
    broken["spec"]["spec"] = "oops"
    view.apply(Kind.RESOURCE_CLAIM_TEMPLATE, broken)
    assert counts.get(view, "broken", NS) == EMPTY
