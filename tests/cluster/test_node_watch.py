"""The Nodes' labels in the live view: listed and watched as metadata only, relisted on 410,
and optional: without permission the view holds none, stays ready and says so once.

Faults (403, 410) are played by the fake API server; the real kube-apiserver answering the
metadata Accept headers is tests/e2e/test_satisfiability.py's."""

from __future__ import annotations

import logging
from pathlib import Path

import httpx
import pytest

from app.cluster.live import LiveSource
from app.cluster.view import ClusterView, Kind
from app.config import Settings
from app.metrics import Metrics
from app.transport.app import create_app
from tests.cluster import objects
from tests.cluster.fake_apiserver import FakeApiServer
from tests.cluster.helpers import eventually, live_settings
from tests.helpers import policy_from

pytestmark = pytest.mark.anyio

LIST_ACCEPT = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
WATCH_ACCEPT = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"


def nodes(view: ClusterView) -> dict[str, dict[str, str]]:
    return {
        name: dict(obj["metadata"].get("labels") or {})
        for (_, name), obj in view.objects(Kind.NODE).items()
    }


@pytest.fixture
async def labelled(apiserver: FakeApiServer) -> FakeApiServer:
    for i in range(3):
        apiserver.put(objects.node(i, rack=i % 2))
    return apiserver


async def test_nodes_are_listed_and_watched_as_metadata_and_keep_only_name_and_labels(
    labelled: FakeApiServer, settings: Settings
) -> None:
    source = LiveSource(ClusterView(), settings)
    await source.start()
    try:
        await eventually(lambda: source.view.synced and labelled.watching(Kind.NODE) == 1, "sync")
        accepts = [a for p, a in labelled.accepts if p == "/api/v1/nodes"]
        lists = [q for q in labelled.queries(Kind.NODE, watch=False)]
        assert accepts[: len(lists)] == [LIST_ACCEPT] * len(lists)  # pages of 2: two lists
        assert accepts[len(lists) :] == [WATCH_ACCEPT]
        assert len(lists) == 2
        held = source.view.get(Kind.NODE, "gpu-node-00001")
        assert held is not None
        assert set(held) == {"kind", "metadata"}
        assert set(held["metadata"]) == {"name", "labels", "uid", "resourceVersion"}
        assert held["metadata"]["labels"]["example.com/rack"] == "rack-001"

        labelled.put(objects.node(1, rack=7))  # relabelled: a watch event
        await eventually(
            lambda: nodes(source.view)["gpu-node-00001"].get("example.com/rack") == "rack-007"
        )
        labelled.put(objects.node(3))
        labelled.delete(Kind.NODE, "gpu-node-00000")
        await eventually(
            lambda: set(nodes(source.view)) == {f"gpu-node-0000{i}" for i in (1, 2, 3)}
        )
        assert source.stats.kinds[Kind.NODE].events["MODIFIED"] == 1
    finally:
        await source.stop()


@pytest.mark.parametrize("as_http", [False, True], ids=["error-event", "http-status"])
async def test_410_gone_relists_the_nodes_and_drops_those_deleted_in_the_gap(
    labelled: FakeApiServer, settings: Settings, as_http: bool
) -> None:
    source = LiveSource(ClusterView(), settings)
    await source.start()
    try:
        await eventually(lambda: source.view.synced and labelled.watching(Kind.NODE) == 1, "sync")
        labelled.hold(Kind.NODE)
        labelled.delete(Kind.NODE, "gpu-node-00002")
        labelled.put(objects.node(0, rack=5))
        labelled.compact()
        labelled.release(Kind.NODE)
        if as_http:
            labelled.gone_as_http = True
            labelled.drop_watches()
        else:
            labelled.expire_watches()
        await eventually(
            lambda: set(nodes(source.view)) == {"gpu-node-00000", "gpu-node-00001"}, "relist"
        )
        assert nodes(source.view)["gpu-node-00000"]["example.com/rack"] == "rack-005"
        stats = source.stats.kinds[Kind.NODE]
        assert stats.relists >= 1
        assert labelled.queries(Kind.NODE, watch=False)[-1]  # listed again...
        relisted = [a for p, a in labelled.accepts if p == "/api/v1/nodes"]
        assert set(relisted) == {LIST_ACCEPT, WATCH_ACCEPT}  # ...as metadata again
        await eventually(lambda: not source.view.stale_kinds, "fresh")
    finally:
        await source.stop()


@pytest.mark.parametrize(("code", "reason"), [(403, "Forbidden"), (404, "NotFound")])
async def test_without_permission_on_nodes_the_view_is_ready_without_them_and_says_so_once(
    labelled: FakeApiServer,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    code: int,
    reason: str,
) -> None:
    """403: not granted; 404: not served (an API server, or a stand-in, without nodes)."""
    labelled.refuse[Kind.NODE] = (code, reason)
    settings = live_settings(
        labelled.write_kubeconfig(tmp_path / "kubeconfig"), backoff_max_seconds=0.05
    )
    source = LiveSource(ClusterView(), settings)
    metrics = Metrics()
    metrics.watch_source(source.stats)
    caplog.set_level(logging.INFO, logger="app.cluster.watch")
    await source.start()
    try:
        await eventually(lambda: source.view.synced and not source.view.stale_kinds, "ready")
        await eventually(lambda: len(labelled.queries(Kind.NODE, watch=False)) >= 4, "retries")
        assert nodes(source.view) == {}
        assert not source.view.stale_kinds  # stays ready, whatever the stale bound
        stats = source.stats.kinds[Kind.NODE]
        assert stats.forbidden and not stats.in_sync
        assert "dra_webhook_node_labels_available 0.0" in metrics.render().decode()
        said = [r.getMessage() for r in caplog.records if "cluster Node" in r.getMessage()]
        assert len(said) == 1, said
        assert f"{code} {reason}" in said[0] and "taken to match" in said[0]

        del labelled.refuse[Kind.NODE]  # granted later: picked up without a restart
        await eventually(lambda: len(nodes(source.view)) == 3, "the nodes once granted")
        assert not stats.forbidden
        assert "dra_webhook_node_labels_available 1.0" in metrics.render().decode()
    finally:
        await source.stop()


async def test_a_permission_revoked_while_watching_drops_the_nodes_and_stays_ready(
    labelled: FakeApiServer, tmp_path: Path
) -> None:
    settings = live_settings(
        labelled.write_kubeconfig(tmp_path / "kubeconfig"), backoff_max_seconds=0.05
    )
    source = LiveSource(ClusterView(), settings)
    await source.start()
    try:
        await eventually(lambda: len(nodes(source.view)) == 3, "the nodes")
        labelled.refuse[Kind.NODE] = (403, "Forbidden")
        labelled.drop_watches()  # the re-watch is refused
        await eventually(lambda: nodes(source.view) == {}, "forgotten: they may change unseen")
        assert not source.view.stale_kinds
        assert source.view.synced
    finally:
        await source.stop()


async def test_readyz_is_green_without_permission_on_nodes(
    labelled: FakeApiServer, settings: Settings
) -> None:
    labelled.refuse[Kind.NODE] = (403, "Forbidden")
    source = LiveSource(ClusterView(), settings)
    app = create_app(settings, policy=policy_from(""), source=source, metrics=Metrics())
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://webhook") as client:

            async def ready() -> bool:
                return (await client.get("/readyz")).status_code == 200

            await eventually(ready, "/readyz 200 without nodes")
            text = (await client.get("/metrics")).text
            assert "dra_webhook_node_labels_available 0.0" in text
            assert 'dra_webhook_cluster_synced{kind="Node"} 1.0' in text
