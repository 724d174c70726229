"""Admission over the live source: what the API server's objects and events change in answers."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from app.cluster.live import LiveSource
from app.cluster.view import ClusterView, Kind
from app.config import Settings, load_policy
from app.k8s.templates import LAST_USED_LABEL, TEMPLATE_LABEL
from app.metrics import Metrics
from app.pipeline import Endpoint
from app.transport.app import create_app
from app.transport.review import decode_review
from tests.claim_objects import POLICY_FILE, claim, cluster_objects, exact
from tests.cluster.fake_apiserver import FakeApiServer
from tests.cluster.helpers import eventually, live_settings
from tests.helpers import make_pipeline, review, wrap

pytestmark = pytest.mark.anyio


@pytest.fixture
async def quota_apiserver() -> AsyncIterator[FakeApiServer]:
    """The quota scenario's cluster (ml-research: 12 of 16 devices in use) on the API server."""
    server = FakeApiServer()
    for obj in cluster_objects():
        server.put(obj)
    await server.start()
    yield server
    await server.stop()


@asynccontextmanager
async def _live_client(
    apiserver: FakeApiServer, tmp_path: Path, **overrides: Any
) -> AsyncIterator[httpx.AsyncClient]:
    """The ASGI app on a live view of `apiserver`, once that view has synced."""
    settings: Settings = live_settings(
        apiserver.write_kubeconfig(tmp_path / "kubeconfig"), **overrides
    )
    app = create_app(
        settings,
        policy=load_policy(POLICY_FILE),
        source=LiveSource(ClusterView(), settings),
        metrics=Metrics(),
    )
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://webhook") as http:
            await eventually(lambda: _ready(http), "the live view to sync", timeout=10)
            yield http


@pytest.fixture
async def client(
    quota_apiserver: FakeApiServer, tmp_path: Path
) -> AsyncIterator[httpx.AsyncClient]:
    async with _live_client(quota_apiserver, tmp_path) as http:
        yield http


async def _ready(http: httpx.AsyncClient) -> bool:
    return (await http.get("/readyz")).status_code == 200


async def _answer(http: httpx.AsyncClient, endpoint: str, body: dict[str, Any]) -> Any:
    response = await http.post(f"/{endpoint}", json=body)
    assert response.status_code == 200
    return response.json()["response"]


async def test_deleting_a_claim_on_the_api_server_frees_its_devices_for_the_next_claim(
    quota_apiserver: FakeApiServer, client: httpx.AsyncClient
) -> None:
    five = wrap(claim("five", exact(count=5)))
    denied = await _answer(client, "validate", five)
    assert denied["allowed"] is False
    assert "allows 16, 12 in use" in denied["status"]["message"]

    quota_apiserver.delete(Kind.RESOURCE_CLAIM, "train-a", "ml-research")  # 4 devices

    async def admitted() -> bool:
        return bool((await _answer(client, "validate", five))["allowed"])

    await eventually(admitted, "the watch DELETED event to free 4 devices")


async def test_a_hundred_concurrent_admissions_of_one_pod_shape_create_one_template(
    quota_apiserver: FakeApiServer, client: httpx.AsyncClient
) -> None:
    # Hold the template watch: the view learns of the template only through our own create.
    quota_apiserver.hold(Kind.RESOURCE_CLAIM_TEMPLATE)
    one_gpu = review("pod-create-legacy-gpu", namespace="ml-research")
    two_gpus = review("pod-create-legacy-gpu", namespace="ml-research", uid="other-shape")
    for side in ("limits", "requests"):
        two_gpus["request"]["object"]["spec"]["containers"][0]["resources"][side] = {
            "nvidia.com/gpu": "3"
        }
    bodies = [one_gpu] * 100 + [two_gpus] * 20
    answers = await asyncio.gather(*(_answer(client, "mutate", body) for body in bodies))
    assert all(a["allowed"] and a["patchType"] == "JSONPatch" for a in answers)
    assert len({a["patch"] for a in answers[:100]}) == 1
    posts = [path for method, path, _ in quota_apiserver.requests if method == "POST"]
    assert posts == ["/apis/resource.k8s.io/v1/namespaces/ml-research/resourceclaimtemplates"] * 2
    # and sequentially afterwards: the view knows both, no further create
    for body in (one_gpu, two_gpus):
        await _answer(client, "mutate", body)
    assert [m for m, _, _ in quota_apiserver.requests].count("POST") == 2
    quota_apiserver.release(Kind.RESOURCE_CLAIM_TEMPLATE)


# -- a template of translation's name that someone else wrote --------------------------------

TEMPLATES = "/apis/resource.k8s.io/v1/namespaces/ml-research/resourceclaimtemplates"


def _legacy_pod() -> dict[str, Any]:
    return review("pod-create-legacy-gpu", namespace="ml-research")


def _our_template() -> dict[str, Any]:
    """The template translation builds for `_legacy_pod()` under the same policy."""
    pipeline = make_pipeline(cluster_objects(), load_policy(POLICY_FILE))
    decision = pipeline.review(Endpoint.MUTATE, decode_review(orjson.dumps(_legacy_pod())))
    (template,) = decision.templates
    return copy.deepcopy(template)


def _calls(apiserver: FakeApiServer, method: str) -> list[str]:
    return [p for m, p, _ in apiserver.requests if m == method and p.startswith(TEMPLATES)]


async def test_a_template_someone_else_created_under_translations_name_denies_the_pod(
    quota_apiserver: FakeApiServer, client: httpx.AsyncClient
) -> None:
    quota_apiserver.hold(Kind.RESOURCE_CLAIM_TEMPLATE)  # the view has not seen it
    forged = _our_template()
    del forged["metadata"]["labels"]
    exactly = forged["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    exactly["allocationMode"] = "All"
    del exactly["count"]
    quota_apiserver.put(forged)
    name = forged["metadata"]["name"]

    answer = await _answer(client, "mutate", _legacy_pod())
    assert answer["allowed"] is False
    assert "patch" not in answer
    assert answer["status"]["code"] == 403
    message = answer["status"]["message"]
    assert f"ResourceClaimTemplate ml-research/{name} already exists, but it is not labelled" in (
        message
    )
    assert (len(_calls(quota_apiserver, "POST")), len(_calls(quota_apiserver, "GET"))) == (1, 1)

    # the view now holds what is stored: the next pod is denied without another API call
    again = await _answer(client, "mutate", _legacy_pod())
    assert again["allowed"] is False
    assert f"ResourceClaimTemplate ml-research/{name} exists, but" in again["status"]["message"]
    assert len(_calls(quota_apiserver, "POST")) == 1
    quota_apiserver.release(Kind.RESOURCE_CLAIM_TEMPLATE)


async def test_our_template_stored_by_another_replica_is_reused_after_already_exists(
    quota_apiserver: FakeApiServer, client: httpx.AsyncClient
) -> None:
    quota_apiserver.hold(Kind.RESOURCE_CLAIM_TEMPLATE)
    stored = _our_template()
    stored["spec"] = {"metadata": {}, **stored["spec"]}  # as kube-apiserver returns it
    quota_apiserver.put(stored)
    answer = await _answer(client, "mutate", _legacy_pod())
    assert answer["allowed"] is True
    assert answer["patchType"] == "JSONPatch"
    assert (len(_calls(quota_apiserver, "POST")), len(_calls(quota_apiserver, "GET"))) == (1, 1)
    quota_apiserver.release(Kind.RESOURCE_CLAIM_TEMPLATE)


async def test_a_template_that_exists_but_cannot_be_read_back_fails_closed_to_be_retried(
    quota_apiserver: FakeApiServer, client: httpx.AsyncClient
) -> None:
    quota_apiserver.create_error = (409, "AlreadyExists", "already exists")  # and then 404
    answer = await _answer(client, "mutate", _legacy_pod())
    assert answer["allowed"] is False
    assert answer["status"]["code"] == 500
    assert "could not be read back to check that it is ours" in answer["status"]["message"]
    assert "retry later" in answer["status"]["message"]


async def test_a_namespace_the_watch_has_not_delivered_yet_is_read_once_from_the_api_server(
    quota_apiserver: FakeApiServer, client: httpx.AsyncClient
) -> None:
    # The namespace and its pod arrive together: the namespace watch is held back.
    quota_apiserver.hold(Kind.NAMESPACE)
    quota_apiserver.put(
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": "fresh", "labels": {"gpu-mode": "dra-only"}},
        }
    )
    body = review("pod-create-legacy-gpu", namespace="fresh")
    answers = await asyncio.gather(*(_answer(client, "validate", body) for _ in range(10)))
    assert all(a["allowed"] is False for a in answers)
    assert "namespace fresh is dra-only" in answers[0]["status"]["message"]
    gets = [
        p for m, p, _ in quota_apiserver.requests if m == "GET" and p == "/api/v1/namespaces/fresh"
    ]
    assert gets == ["/api/v1/namespaces/fresh"]
    quota_apiserver.release(Kind.NAMESPACE)


async def test_a_namespace_the_api_server_does_not_know_fails_closed(
    quota_apiserver: FakeApiServer, client: httpx.AsyncClient
) -> None:
    answer = await _answer(client, "validate", review("pod-create-legacy-gpu", namespace="ghost"))
    assert answer["allowed"] is False
    assert answer["status"]["code"] == 503


# -- template garbage collection: an admission relies on an idle template ---------------------


@pytest.fixture
async def collecting_client(
    quota_apiserver: FakeApiServer, tmp_path: Path
) -> AsyncIterator[httpx.AsyncClient]:
    """Like `client`, with template garbage collection on (a grace no test waits out)."""
    async with _live_client(quota_apiserver, tmp_path, template_gc_grace_seconds=3600) as http:
        yield http


async def test_a_pod_relying_on_a_template_no_claim_uses_touches_it_once_before_the_answer(
    quota_apiserver: FakeApiServer, collecting_client: httpx.AsyncClient
) -> None:
    stored = quota_apiserver.put(_our_template())  # made by another replica, no claim yet
    name = stored["metadata"]["name"]
    await asyncio.sleep(0.2)  # the watch brings it into the view
    answers = await asyncio.gather(
        *(_answer(collecting_client, "mutate", _legacy_pod()) for _ in range(5))
    )
    assert all(a["allowed"] for a in answers)
    assert _calls(quota_apiserver, "PATCH") == [f"{TEMPLATES}/{name}"]  # one touch, not five
    assert _calls(quota_apiserver, "POST") == []
    labels = quota_apiserver.store[Kind.RESOURCE_CLAIM_TEMPLATE][("ml-research", name)]["metadata"][
        "labels"
    ]
    assert LAST_USED_LABEL in labels


async def test_a_template_deleted_by_another_replicas_collector_is_created_again_before_the_answer(
    quota_apiserver: FakeApiServer, collecting_client: httpx.AsyncClient
) -> None:
    stored = quota_apiserver.put(_our_template())
    name = stored["metadata"]["name"]
    await asyncio.sleep(0.2)
    quota_apiserver.hold(Kind.RESOURCE_CLAIM_TEMPLATE)  # this replica has not seen the delete
    quota_apiserver.delete(Kind.RESOURCE_CLAIM_TEMPLATE, name, "ml-research")
    answer = await _answer(collecting_client, "mutate", _legacy_pod())
    assert answer["allowed"] is True
    assert _calls(quota_apiserver, "PATCH") == [f"{TEMPLATES}/{name}"]
    assert _calls(quota_apiserver, "POST") == [TEMPLATES]
    assert ("ml-research", name) in quota_apiserver.store[Kind.RESOURCE_CLAIM_TEMPLATE]
    quota_apiserver.release(Kind.RESOURCE_CLAIM_TEMPLATE)


async def test_a_template_whose_claims_exist_is_used_without_any_api_call(
    quota_apiserver: FakeApiServer, collecting_client: httpx.AsyncClient
) -> None:
    stored = quota_apiserver.put(_our_template())
    name = stored["metadata"]["name"]
    made = claim("pod-a-gpu-cuda-x7", exact(count=2))
    made["metadata"]["labels"] = {TEMPLATE_LABEL: name}
    quota_apiserver.put(made)
    await asyncio.sleep(0.2)
    answer = await _answer(collecting_client, "mutate", _legacy_pod())
    assert answer["allowed"] is True
    assert _calls(quota_apiserver, "PATCH") == [] and _calls(quota_apiserver, "POST") == []
