"""Garbage collection of translation's templates over the fake API server: unused managed
templates go after the grace period, anything in use, touched or not ours stays."""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from app.cluster.live import LiveSource
from app.cluster.view import ClusterView, Kind
from app.k8s.templates import LAST_USED_LABEL, TEMPLATE_LABEL
from app.metrics import Metrics
from tests.cluster import objects
from tests.cluster.fake_apiserver import FakeApiServer
from tests.cluster.helpers import eventually, live_settings

pytestmark = pytest.mark.anyio
GRACE = 0.4
NS = "ml-research"


def claim_from(template: str, name: str) -> dict[str, Any]:
    """A claim as the resource claim controller makes it: the template's spec.metadata labels."""
    made = objects.claim(name, NS)
    made["metadata"]["labels"] = {TEMPLATE_LABEL: template}
    return made


def user_template(name: str) -> dict[str, Any]:
    template = objects.claim_template(name, NS)
    template["metadata"]["labels"] = {"team": "ml"}
    return template


@pytest.fixture
async def collecting(apiserver: FakeApiServer, tmp_path: Path) -> AsyncIterator[LiveSource]:
    settings = live_settings(
        apiserver.write_kubeconfig(tmp_path / "kubeconfig"),
        template_gc_grace_seconds=GRACE,
        template_gc_interval_seconds=0.05,
    )
    source = LiveSource(ClusterView(), settings)
    await source.start()
    try:
        await eventually(lambda: not source.view.stale_kinds, "initial sync")
        yield source
    finally:
        await source.stop()


def stored(apiserver: FakeApiServer, name: str) -> bool:
    return (NS, name) in apiserver.store[Kind.RESOURCE_CLAIM_TEMPLATE]


async def test_an_unused_managed_template_is_deleted_after_the_grace_period_with_a_metric_and_log(
    apiserver: FakeApiServer, collecting: LiveSource, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="app.cluster.template_gc")
    assert stored(apiserver, "one-gpu")  # seeded, managed, no claim made from it
    await eventually(lambda: not stored(apiserver, "one-gpu"), "the unused template deleted")
    # the collector goes on once the API server has answered the DELETE, which the fake one
    # stores before it answers: the view, the count and the log line follow that answer
    await eventually(
        lambda: "removed unused ResourceClaimTemplate ml-research/one-gpu" in caplog.text,
        "the removal logged",
    )
    await eventually(
        lambda: collecting.view.get(Kind.RESOURCE_CLAIM_TEMPLATE, "one-gpu", NS) is None,
        "the view rid of the template",
    )
    assert collecting.stats.templates_deleted == 1
    metrics = Metrics()
    metrics.watch_source(collecting.stats)
    assert b'dra_webhook_template_deletes_total{result="deleted"} 1.0' in metrics.render()
    (delete,) = [q for m, p, q in apiserver.requests if m == "DELETE"]
    assert delete == {}  # the preconditions travel in the DeleteOptions body


async def test_a_template_that_claims_were_made_from_is_kept(
    apiserver: FakeApiServer, tmp_path: Path
) -> None:
    apiserver.put(claim_from("one-gpu", "pod-a-gpu-x7k2"))
    source = await _start(apiserver, tmp_path)
    try:
        await _wait(3 * GRACE)
        assert stored(apiserver, "one-gpu")
        assert not [m for m, _, _ in apiserver.requests if m == "DELETE"]
        # once its last claim is gone, it becomes unused and goes after the grace period
        apiserver.delete(Kind.RESOURCE_CLAIM, "pod-a-gpu-x7k2", NS)
        await eventually(lambda: not stored(apiserver, "one-gpu"), "deleted once unused")
    finally:
        await source.stop()


async def test_templates_not_labelled_as_managed_by_dra_webhook_are_never_deleted(
    apiserver: FakeApiServer, tmp_path: Path
) -> None:
    apiserver.put(user_template("users-own"))
    source = await _start(apiserver, tmp_path)
    try:
        await eventually(lambda: not stored(apiserver, "one-gpu"), "the managed one deleted")
        await _wait(2 * GRACE)
        assert stored(apiserver, "users-own")
    finally:
        await source.stop()


async def test_a_template_touched_while_its_delete_was_decided_is_not_deleted(
    apiserver: FakeApiServer, tmp_path: Path
) -> None:
    """The race between two replicas: one decides to delete, the other relies on it meanwhile.
    The delete is conditioned on the resourceVersion judged unused, so it fails (409)."""
    touched: list[bool] = []

    async def touch_first(_options: dict[str, Any]) -> None:
        if not touched:
            touched.append(True)
            template = copy.deepcopy(apiserver.store[Kind.RESOURCE_CLAIM_TEMPLATE][(NS, "one-gpu")])
            template["metadata"]["labels"][LAST_USED_LABEL] = "1.0"
            apiserver.put(template)

    apiserver.before_delete = touch_first
    source = await _start(apiserver, tmp_path)
    try:
        await eventually(lambda: source.stats.templates_kept == 1, "the delete refused")
        assert stored(apiserver, "one-gpu")
    finally:
        await source.stop()


async def test_a_touched_template_is_left_alone_for_the_grace_period(
    apiserver: FakeApiServer, tmp_path: Path
) -> None:
    source = await _start(apiserver, tmp_path)
    try:
        assert await source.touch_claim_template(NS, "one-gpu")
        labels = apiserver.store[Kind.RESOURCE_CLAIM_TEMPLATE][(NS, "one-gpu")]["metadata"][
            "labels"
        ]
        assert LAST_USED_LABEL in labels
        await _wait(GRACE * 0.6)
        assert stored(apiserver, "one-gpu")
    finally:
        await source.stop()


async def test_touching_a_template_that_is_gone_says_so(
    apiserver: FakeApiServer, tmp_path: Path
) -> None:
    source = await _start(apiserver, tmp_path)
    try:
        apiserver.delete(Kind.RESOURCE_CLAIM_TEMPLATE, "one-gpu", NS)
        assert await source.touch_claim_template(NS, "one-gpu") is False
        assert source.view.get(Kind.RESOURCE_CLAIM_TEMPLATE, "one-gpu", NS) is None
    finally:
        await source.stop()


async def test_not_found_on_delete_is_success(apiserver: FakeApiServer, tmp_path: Path) -> None:
    source = await _start(apiserver, tmp_path, gc=False)
    try:
        template = source.view.get(Kind.RESOURCE_CLAIM_TEMPLATE, "one-gpu", NS)
        assert template is not None
        apiserver.delete(Kind.RESOURCE_CLAIM_TEMPLATE, "one-gpu", NS)
        assert await source.delete_claim_template(template) == "gone"
    finally:
        await source.stop()


async def _start(apiserver: FakeApiServer, tmp: Path, *, gc: bool = True) -> LiveSource:
    settings = live_settings(
        apiserver.write_kubeconfig(tmp / "kubeconfig"),
        template_gc_grace_seconds=GRACE if gc else 0,
        template_gc_interval_seconds=0.05,
    )
    source = LiveSource(ClusterView(), settings)
    await source.start()
    await eventually(lambda: not source.view.stale_kinds, "initial sync")
    return source


async def _wait(seconds: float) -> None:
    await asyncio.sleep(seconds)
