"""The tally: app.offline's verdict per object, owners first, never a crash on odd objects."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from app.cluster.view import ClusterView, Kind
from app.config import load_policy
from app.report.tally import Tally
from tests.helpers import policy_from
from tests.report.fake_cluster import pod, workload


def _view() -> ClusterView:
    view = ClusterView()
    view.replace(
        Kind.NAMESPACE,
        [
            {
                "kind": "Namespace",
                "apiVersion": "v1",
                "metadata": {"name": "ns", "labels": {"gpu-mode": "dra-only"}},
            }
        ],
    )
    return view


def _typed(obj: dict[str, Any], kind: str, api_version: str) -> dict[str, Any]:
    return {**obj, "kind": kind, "apiVersion": api_version}


def test_an_object_owned_by_a_listed_workload_is_counted_under_it_whatever_its_kind() -> None:
    tally = Tally(load_policy(), _view())
    tally.add(
        _typed(workload("StatefulSet", "ns", "db", "nvidia.com/gpu"), "StatefulSet", "apps/v1")
    )
    tally.add(_typed(pod("ns", "db-0", "nvidia.com/gpu", owner=("StatefulSet", "db")), "Pod", "v1"))
    tally.add(
        _typed(pod("ns", "other", "nvidia.com/gpu", owner=("StatefulSet", "gone")), "Pod", "v1")
    )
    (entry,) = tally.reports()
    assert entry.report.legacy_objects == ["StatefulSet/db", "Pod/other"]
    assert [f.name for f in entry.findings] == ["db", "other"]
    assert tally.owned == 1


def test_a_spec_that_does_not_parse_is_a_finding_with_its_field_path() -> None:
    tally = Tally(load_policy(), _view())
    bad = {"kind": "Pod", "apiVersion": "v1", "metadata": {"name": "bad", "namespace": "ns"},
           "spec": {"containers": "nope"}}  # fmt: skip
    tally.add(bad)
    (entry,) = tally.reports()
    (finding,) = entry.findings
    assert finding.invalid.startswith("Pod/bad: spec.containers")
    assert entry.passed == 0


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=12,
)


@settings(max_examples=200, deadline=None)
@given(
    kind=st.sampled_from(["Pod", "Deployment", "CronJob", "PodTemplate", "Job", "Other"]),
    spec=json_values,
    meta=st.fixed_dictionaries(
        {"name": st.text(max_size=8), "namespace": st.just("ns")},
        optional={"ownerReferences": json_values},
    ),
)
def test_any_object_is_tallied_without_raising(kind: str, spec: Any, meta: dict[str, Any]) -> None:
    tally = Tally(load_policy(), _view())
    tally.add({"kind": kind, "apiVersion": "v1", "metadata": meta, "spec": spec, "template": spec})
    for entry in tally.reports():
        assert entry.passed + len(entry.findings) <= 1


def test_an_object_a_policy_exception_allows_is_a_finding_that_names_the_exception() -> None:
    policy = policy_from(
        "exceptions:\n"
        "- name: vendor-x\n"
        "  namespaceSelector: {matchLabels: {gpu-mode: dra-only}}\n"
        "  objectSelector: {matchLabels: {app: vendor}}\n"
        "  until: '2999-01-31'\n"
        "  reason: reads NVIDIA_VISIBLE_DEVICES\n"
    )
    tally = Tally(policy, _view())
    vendor = pod("ns", "vendor", "nvidia.com/gpu")
    vendor["metadata"]["labels"] = {"app": "vendor"}
    tally.add(_typed(vendor, "Pod", "v1"))
    tally.add(_typed(pod("ns", "other", "nvidia.com/gpu"), "Pod", "v1"))
    (entry,) = tally.reports()
    assert [(f.name, f.excepted) for f in entry.findings] == [
        ("vendor", "vendor-x until 2999-01-31 (end of day UTC)"),
        ("other", ""),
    ]
