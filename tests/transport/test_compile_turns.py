"""A review that compiles many new selectors lets the worker's other reviews in between its
compiles (`Pipeline.prepare`, run by the handler between turns of the event loop), and a large
review lets them in between its decoding and its checks, in process.

Over TLS with a real uvicorn, four such reviews at once and the figures: tests/server/
test_compile_budget.py and docs/benchmarks.md."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import orjson

from app.cluster.static import StaticSource
from app.cluster.view import ClusterView
from app.config import Settings
from app.metrics import Metrics
from app.pipeline import Endpoint
from app.transport.app import LARGE_BODY_BYTES, create_app
from tests.claim_objects import claim, exact
from tests.helpers import DEMO_NAMESPACES, load_fixture, policy_from, wrap

WHOLE = "cel: {compileBudget: {expressions: 100000, milliseconds: 600000}}"
"""Every selector of the claim below is compiled: its review takes long, and must not hold the
others."""


def _many_new_selectors(requests: int) -> bytes:
    """A claim of `requests` requests of 25 new selectors each."""
    numbers = iter(range(1000, 10**6))
    asks = [
        exact(
            f"r{r}",
            selectors=[
                {"cel": {"expression": f'device.attributes["gpu.nvidia.com"].index == {n}'}}
                for n in itertools.islice(numbers, 25)
            ],
        )
        for r in range(requests)
    ]
    return orjson.dumps(wrap(claim("many", *asks, namespace="gpu-e2e")))


async def _post(webhook: Any, endpoint: Endpoint, body: bytes) -> int:
    scope = {
        "type": "http",
        "method": "POST",
        "path": f"/{endpoint.value}",
        "headers": [(b"content-type", b"application/json")],
        "query_string": b"",
    }

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    answer = await webhook.handle(scope, receive, endpoint)
    status: int = answer.status
    return status


def _answered_first(policy: str, heavy: bytes) -> list[str]:
    """Which of two reviews is answered first: `heavy`, started first, or a pod create."""
    view = ClusterView()
    source = StaticSource(view, objects=DEMO_NAMESPACES)
    app = create_app(Settings(), policy=policy_from(policy), source=source, metrics=Metrics())
    source.load()
    webhook = app.state.webhook
    pod = orjson.dumps(load_fixture("pod-create-legacy-gpu"))
    answered: list[str] = []

    async def both() -> None:
        async def review(name: str, body: bytes) -> None:
            assert await _post(webhook, Endpoint.VALIDATE, body) == 200
            answered.append(name)

        first = asyncio.create_task(review("heavy", heavy))
        await asyncio.sleep(0)  # the heavy review starts first
        await review("pod", pod)
        await first

    asyncio.run(both())
    return answered


def test_an_ordinary_review_is_answered_while_another_is_still_compiling() -> None:
    assert _answered_first(WHOLE, _many_new_selectors(8)) == ["pod", "heavy"]


def test_an_ordinary_review_is_answered_between_a_large_reviews_decoding_and_its_checks() -> None:
    request = {"name": "r", "exactly": {"deviceClassName": "gpu.nvidia.com"}}
    many = claim("many", *({**request, "name": f"r{i}"} for i in range(10_000)))
    body = orjson.dumps(wrap({**many, "metadata": {"name": "many", "namespace": "gpu-e2e"}}))
    assert len(body) > LARGE_BODY_BYTES
    assert _answered_first("", body) == ["pod", "heavy"]
