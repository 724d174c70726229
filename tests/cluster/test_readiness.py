"""/readyz, /metrics and stale-view answers of the real ASGI app over the live source."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.cluster.live import LiveSource
from app.cluster.view import ClusterView, Kind
from app.config import Settings
from app.metrics import Metrics
from app.transport.app import create_app
from tests.cluster.fake_apiserver import FakeApiServer
from tests.cluster.helpers import ROOMY, eventually, live_settings
from tests.helpers import policy_from, review

pytestmark = pytest.mark.anyio

ALL_KINDS = sorted(kind.value for kind in Kind)
DRA_ONLY_CLOSED = "failure:\n  staleView:\n    checks:\n      dra-only: closed\n"


@pytest.fixture
async def client(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    """The app with its lifespan running (which starts the live source); dra-only fails closed
    on a stale view."""
    source = LiveSource(ClusterView(), settings)
    app = create_app(
        settings, policy=policy_from(DRA_ONLY_CLOSED), source=source, metrics=Metrics()
    )
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://webhook") as http:
            yield http


async def readyz(client: httpx.AsyncClient) -> tuple[int, Any]:
    response = await client.get("/readyz")
    return response.status_code, response.json()


async def wait_ready(client: httpx.AsyncClient, ready: bool) -> None:
    async def check() -> bool:
        return ((await client.get("/readyz")).status_code == 200) == ready

    await eventually(check, f"/readyz to say ready={ready}")


async def validate_legacy_pod(client: httpx.AsyncClient) -> Any:
    """The answer to a pod asking for nvidia.com/gpu in gpu-e2e (dra-only on the API server)."""
    response = await client.post("/validate", json=review("pod-create-legacy-gpu"))
    assert response.status_code == 200
    return response.json()["response"]


async def test_readyz_flips_false_true_false_true_with_the_first_list_and_the_stale_bound(
    apiserver: FakeApiServer, tmp_path: Path
) -> None:
    apiserver.list_gate.clear()  # lists hang until the test opens the gate
    settings = live_settings(apiserver.write_kubeconfig(tmp_path / "kubeconfig"), **ROOMY)
    source = LiveSource(ClusterView(), settings)
    app = create_app(
        settings, policy=policy_from(DRA_ONLY_CLOSED), source=source, metrics=Metrics()
    )
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://x") as client,
    ):
        # before the first list of any kind
        assert await readyz(client) == (
            503,
            {"ready": False, "unsynced": ALL_KINDS, "stale": ALL_KINDS},
        )

        apiserver.list_gate.set()
        await wait_ready(client, True)
        assert (await validate_legacy_pod(client))["status"]["code"] == 403  # dra-only

        # the API server goes away: still ready within the bound (last good state), then not
        await apiserver.stop()
        assert await readyz(client) == (200, {"ready": True})
        await wait_ready(client, False)

        async def all_stale() -> bool:
            return await readyz(client) == (
                503,
                {"ready": False, "unsynced": [], "stale": ALL_KINDS},
            )

        await eventually(all_stale, "every kind stale")  # each kind's bound runs on its own
        answer = await validate_legacy_pod(client)
        assert not answer["allowed"]
        assert answer["status"]["code"] == 503  # dra-only is configured to fail closed
        assert (
            "cluster view of DeviceClass, Namespace is out of date" in answer["status"]["message"]
        )

        # it comes back: the watches resume and the replica is ready again
        await apiserver.start()
        await wait_ready(client, True)
        assert (await validate_legacy_pod(client))["status"]["code"] == 403


async def test_metrics_show_sync_state_events_relists_and_errors_per_kind(
    apiserver: FakeApiServer, client: httpx.AsyncClient
) -> None:
    await wait_ready(client, True)
    apiserver.hold(Kind.RESOURCE_CLAIM)
    apiserver.delete(Kind.RESOURCE_CLAIM, "probe", "gpu-e2e")
    apiserver.compact()
    apiserver.release(Kind.RESOURCE_CLAIM)
    apiserver.expire_watches()  # every kind's watch: 410, and relist (history compacted)

    async def relisted() -> bool:
        text = (await client.get("/metrics")).text
        return all(f'dra_webhook_cluster_lists_total{{kind="{k}"}} 2.0' in text for k in ALL_KINDS)

    await eventually(relisted, "the relists in /metrics")
    text = (await client.get("/metrics")).text
    for line in (
        'dra_webhook_cluster_synced{kind="ResourceClaim"} 1.0',
        'dra_webhook_cluster_stale{kind="ResourceSlice"} 0.0',
        'dra_webhook_cluster_objects{kind="ResourceSlice"} 2.0',
        'dra_webhook_cluster_objects{kind="ResourceClaim"} 2.0',
        'dra_webhook_cluster_watch_in_sync{kind="Namespace"} 1.0',
        'dra_webhook_cluster_relists_total{kind="ResourceClaim"} 1.0',
        'dra_webhook_cluster_watch_events_total{kind="ResourceClaim",type="ERROR"} 1.0',
        'dra_webhook_template_creates_total{result="created"} 0.0',
    ):
        assert line in text, line
    assert 'dra_webhook_cluster_watch_errors_total{kind="ResourceClaim"} ' in text


async def test_a_translated_pod_gets_its_template_created_on_the_api_server_before_the_answer(
    apiserver: FakeApiServer, client: httpx.AsyncClient
) -> None:
    await wait_ready(client, True)
    apiserver.hold(Kind.RESOURCE_CLAIM_TEMPLATE)  # its watch event comes only after the answer
    body = review("pod-create-legacy-gpu", namespace="ml-research")  # translate namespace
    # one GPU: the namespace's ResourceQuota (4, 3 in use) leaves room for one, and the mutating
    # call now judges quota too (one call per translated pod)
    (container,) = body["request"]["object"]["spec"]["containers"]
    container["resources"] = {
        "limits": {"nvidia.com/gpu": "1"},
        "requests": {"nvidia.com/gpu": "1"},
    }
    answer = (await client.post("/mutate", json=body)).json()["response"]
    assert answer["allowed"] is True, answer
    assert answer["patchType"] == "JSONPatch"

    posts = [path for method, path, _ in apiserver.requests if method == "POST"]
    assert posts == ["/apis/resource.k8s.io/v1/namespaces/ml-research/resourceclaimtemplates"]
    (created,) = [
        obj
        for (namespace, name), obj in apiserver.store[Kind.RESOURCE_CLAIM_TEMPLATE].items()
        if namespace == "ml-research" and name != "one-gpu"
    ]
    # the same pod again: the template is in the view already, no second create
    again = (await client.post("/mutate", json=body)).json()["response"]
    assert again["patch"] == answer["patch"]
    assert [m for m, _, _ in apiserver.requests].count("POST") == 1
    assert created["metadata"]["labels"]
    apiserver.release(Kind.RESOURCE_CLAIM_TEMPLATE)


async def test_a_dry_run_creates_nothing_on_the_api_server(
    apiserver: FakeApiServer, client: httpx.AsyncClient
) -> None:
    await wait_ready(client, True)
    body = review("pod-create-legacy-gpu-dryrun", namespace="ml-research")
    answer = (await client.post("/mutate", json=body)).json()["response"]
    assert answer["allowed"] is True
    assert "POST" not in [method for method, _, _ in apiserver.requests]
