"""The live source's PriorityClasses and Pods: watched like every kind, optional like Nodes,
and of Pods only those that hold claims kept (app.cluster.watch, app.cluster.api)."""

from __future__ import annotations

import pytest

from app.cluster.live import LiveSource
from app.cluster.view import ClusterView, Kind
from app.config import Settings
from tests.cluster.fake_apiserver import FakeApiServer
from tests.cluster.helpers import eventually
from tests.cluster.objects import pod_holding_claims as pod
from tests.cluster.objects import priority_class

pytestmark = pytest.mark.anyio


async def test_pods_are_asked_for_bound_and_unfinished_and_only_claim_holders_are_kept(
    apiserver: FakeApiServer, live: LiveSource
) -> None:
    (listed,) = apiserver.queries(Kind.POD, watch=False)
    assert listed["fieldSelector"] == (
        "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"
    )
    apiserver.put(pod("train-0", priority=100))
    apiserver.put(pod("web-0", claims=False, uid="u-2"))
    apiserver.put(priority_class("high", 1000))
    await eventually(lambda: live.view.get(Kind.PRIORITY_CLASS, "high") is not None, "the class")
    await eventually(lambda: live.view.get(Kind.POD, "train-0", "ml") is not None, "the pod")
    assert live.view.get(Kind.POD, "web-0", "ml") is None
    watches = apiserver.queries(Kind.POD, watch=True)
    assert all(q["fieldSelector"] == listed["fieldSelector"] for q in watches)


async def test_without_permission_on_pods_and_classes_the_view_stays_ready(
    apiserver: FakeApiServer, settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    apiserver.refuse[Kind.POD] = (403, "Forbidden")
    apiserver.refuse[Kind.PRIORITY_CLASS] = (403, "Forbidden")
    source = LiveSource(ClusterView(), settings)
    await source.start()
    try:
        await eventually(lambda: source.view.synced and not source.view.stale_kinds, "ready")
    finally:
        await source.stop()
    said = caplog.text
    assert "without it the holders of allocated claims are named by their claims" in said
    assert "grant list and watch on pods" in said
    assert "without it only the policy's preemption.priorityClasses are known" in said
