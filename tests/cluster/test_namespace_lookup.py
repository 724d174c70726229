"""The on-miss namespace lookup: names from the review are never trusted as API paths.

A review's `request.namespace` reaches the one GET the webhook makes on behalf of a review. A
namespace like `../../../apis/resource.k8s.io/v1/namespaces/x/resourceclaims/gpu-e2e` used to
fetch that claim and store it as Namespace `gpu-e2e`, labels and all.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.cluster.live import LiveSource
from app.cluster.view import ClusterView, Kind
from app.config import Settings, load_policy
from app.metrics import Metrics
from app.transport.app import create_app
from tests.cluster.fake_apiserver import FakeApiServer
from tests.cluster.helpers import eventually, live_settings
from tests.helpers import review

pytestmark = pytest.mark.anyio

TRAVERSAL = "../../../apis/resource.k8s.io/v1/namespaces/x/resourceclaims/gpu-e2e"


def _namespace(name: str, mode: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": {"gpu-mode": mode}},
    }


def _decoy_claim() -> dict[str, Any]:
    """A ResourceClaim named like the dra-only namespace, labelled like an audit one."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "gpu-e2e", "namespace": "x", "labels": {"gpu-mode": "audit"}},
        "spec": {"devices": {"requests": []}},
    }


@pytest.fixture
async def apiserver() -> AsyncIterator[FakeApiServer]:
    server = FakeApiServer()
    server.put(_namespace("gpu-e2e", "dra-only"))
    server.put(_namespace("x", "audit"))
    server.put(_decoy_claim())
    await server.start()
    yield server
    await server.stop()


async def _client(
    apiserver: FakeApiServer, tmp_path: Path, **overrides: Any
) -> AsyncIterator[httpx.AsyncClient]:
    settings: Settings = live_settings(
        apiserver.write_kubeconfig(tmp_path / "kubeconfig"), **overrides
    )
    app = create_app(
        settings,
        policy=load_policy(),
        source=LiveSource(ClusterView(), settings),
        metrics=Metrics(),
    )
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://webhook") as http:
            await eventually(lambda: _ready(http), "the live view to sync", timeout=10)
            yield http


async def _ready(http: httpx.AsyncClient) -> bool:
    return (await http.get("/readyz")).status_code == 200


@pytest.fixture
async def client(apiserver: FakeApiServer, tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    async for http in _client(apiserver, tmp_path):
        yield http


def _gets(apiserver: FakeApiServer) -> list[str]:
    return [
        path
        for method, path, query in apiserver.requests
        if method == "GET" and path.startswith("/api/v1/namespaces/")
    ]


async def test_a_namespace_that_is_a_path_is_a_bad_request_and_fetches_nothing(
    apiserver: FakeApiServer, client: httpx.AsyncClient
) -> None:
    body = review("pod-create-legacy-gpu", namespace=TRAVERSAL)
    http = await client.post("/validate", json=body)
    assert http.status_code == 400
    assert "request.namespace" in http.json()["message"]
    assert "DNS-1123 label" in http.json()["message"]
    assert _gets(apiserver) == []
    # the dra-only namespace keeps its mode
    legacy = await client.post("/validate", json=review("pod-create-legacy-gpu"))
    assert legacy.json()["response"]["allowed"] is False
    assert "namespace gpu-e2e is dra-only" in legacy.json()["response"]["status"]["message"]


async def test_a_review_naming_a_path_cannot_relabel_a_dra_only_namespace(
    client: httpx.AsyncClient,
) -> None:
    await client.post("/validate", json=review("pod-create-legacy-gpu", namespace=TRAVERSAL))
    legacy = await client.post("/validate", json=review("pod-create-legacy-gpu"))
    assert legacy.json()["response"]["allowed"] is False


@pytest.mark.parametrize(
    "name", ["UPPER", "a/b", "a%2Fb", "..", "a.b", "-a", "a" * 64, "a b", "ns\n"]
)
async def test_an_invalid_namespace_in_a_review_is_a_400_with_the_reason(
    client: httpx.AsyncClient, name: str
) -> None:
    for endpoint in ("validate", "mutate"):
        http = await client.post(
            f"/{endpoint}", json=review("pod-create-legacy-gpu", namespace=name)
        )
        assert http.status_code == 400, http.text
        assert "request.namespace" in http.json()["message"]


@pytest.mark.parametrize("name", ["UPPER", "a/b", "..", "x" * 254, "a_b"])
async def test_an_invalid_object_name_in_a_review_is_a_400_with_the_reason(
    client: httpx.AsyncClient, name: str
) -> None:
    body = review("pod-create-legacy-gpu")
    body["request"]["name"] = name
    http = await client.post("/validate", json=body)
    assert http.status_code == 400, http.text
    assert "request.name" in http.json()["message"]


class _Answers:
    """A stand-in for the API the live source talks to: a fixed answer per path."""

    def __init__(self, answers: dict[str, tuple[int, bytes]]) -> None:
        self.answers = answers
        self.paths: list[str] = []

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        timeout: float,
        content_type: str = "application/json",
    ) -> tuple[int, bytes]:
        self.paths.append(path)
        return self.answers.get(path, (404, b"{}"))

    async def close(self) -> None:
        return None


def _source(answers: dict[str, tuple[int, bytes]], **overrides: Any) -> tuple[LiveSource, _Answers]:
    settings = live_settings(Path("/nonexistent/kubeconfig"), **overrides)
    source = LiveSource(ClusterView(), settings)
    api = _Answers(answers)
    source._api = api  # type: ignore[assignment]
    return source, api


@pytest.mark.parametrize(
    "found",
    [
        b'{"kind": "ResourceClaim", "apiVersion": "resource.k8s.io/v1", "metadata": {"name": "fresh"}}',
        b'{"kind": "Namespace", "apiVersion": "v1", "metadata": {"name": "gpu-e2e", "labels": {"gpu-mode": "audit"}}}',
        b'{"apiVersion": "v1", "metadata": {"name": "fresh"}}',
        b'["Namespace"]',
    ],
)
async def test_a_fetched_object_is_a_namespace_only_if_its_kind_and_name_match(
    found: bytes,
) -> None:
    source, _ = _source({"/api/v1/namespaces/fresh": (200, found)})
    assert await source.lookup_namespace("fresh") is None
    assert source.view.objects(Kind.NAMESPACE) == {}


async def test_a_matching_namespace_is_stored() -> None:
    found = b'{"kind": "Namespace", "apiVersion": "v1", "metadata": {"name": "fresh", "labels": {"gpu-mode": "translate"}}}'
    source, _ = _source({"/api/v1/namespaces/fresh": (200, found)})
    assert await source.lookup_namespace("fresh") is not None
    assert source.view.namespace_labels("fresh") == {"gpu-mode": "translate"}


async def test_lookup_never_sends_a_name_that_is_not_a_namespace_name() -> None:
    source, api = _source({})
    for name in (TRAVERSAL, "a/b", "A", "a?watch=true", "%2e%2e"):
        assert await source.lookup_namespace(name) is None
    assert api.paths == []


async def test_a_flood_of_unknown_namespaces_costs_a_bounded_number_of_api_calls() -> None:
    source, api = _source({}, namespace_lookups_per_second=1.0, namespace_lookup_burst=5)
    for i in range(200):
        assert await source.lookup_namespace(f"ghost-{i}") is None
    assert len(api.paths) <= 6
    # a namespace the API server said does not exist is not asked for again at once
    before = len(api.paths)
    source2, api2 = _source({}, namespace_lookup_burst=50)
    for _ in range(20):
        assert await source2.lookup_namespace("ghost") is None
    assert api2.paths == ["/api/v1/namespaces/ghost"]
    assert before <= 6
