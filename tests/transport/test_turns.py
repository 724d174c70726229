"""Heavy reviews let the worker's other reviews in, in process: a review compiling many new
selectors between its compiles (`Pipeline.prepare`), a large review between its decoding and its
checks, and large reviews are decided one at a time (the handler's heavy lane).

Over TLS with a real uvicorn, four hostile claims at once, and the figures:
tests/loadtest/test_hostile_cel.py, loadtest/hostile_cel.py and docs/benchmarks.md."""

from __future__ import annotations

import asyncio
import itertools
import time
from typing import Any

import orjson
import pytest

from app.cluster.static import StaticSource
from app.cluster.view import ClusterView
from app.config import Settings
from app.metrics import Metrics
from app.pipeline import Endpoint
from app.server.limits import RECEIVED_AT
from app.transport import app as transport
from app.transport.app import LARGE_BODY_BYTES, create_app
from tests.claim_objects import claim, exact
from tests.helpers import DEMO_NAMESPACES, load_fixture, policy_from, wrap

WHOLE = "cel: {compileBudget: {expressions: 100000, milliseconds: 600000}}"
"""Every selector of a claim is compiled: a claim of many new ones takes long to review."""
POD = orjson.dumps(load_fixture("pod-create-legacy-gpu"))


def _many_new_selectors(requests: int, start: int = 1000) -> bytes:
    """A claim of `requests` requests of 25 new selectors each (under 64 KiB for 8)."""
    numbers = itertools.count(start)
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


def _many_requests() -> bytes:
    """10,000 requests: past the API server's limit, refused at once, but 1 MB to decode."""
    request = {"name": "r", "exactly": {"deviceClassName": "gpu.nvidia.com"}}
    many = claim("many", *({**request, "name": f"r{i}"} for i in range(10_000)))
    return orjson.dumps(wrap({**many, "metadata": {"name": "many", "namespace": "gpu-e2e"}}))


def _webhook(policy: str = "") -> Any:
    view = ClusterView()
    source = StaticSource(view, objects=DEMO_NAMESPACES)
    app = create_app(Settings(), policy=policy_from(policy), source=source, metrics=Metrics())
    source.load()
    return app.state.webhook


async def _post(webhook: Any, body: bytes) -> None:
    scope = {
        "type": "http",
        "method": "POST",
        "path": "/validate",
        "headers": [(b"content-type", b"application/json")],
        "query_string": b"",
    }

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    answer = await webhook.handle(scope, receive, Endpoint.VALIDATE)
    assert answer.status == 200, answer.body


def _answered(webhook: Any, heavy: list[bytes]) -> list[str]:
    """The order in which `heavy` reviews, started first, and then a pod create are answered."""
    answered: list[str] = []

    async def review(name: str, body: bytes) -> None:
        await _post(webhook, body)
        answered.append(name)

    async def all_of_them() -> None:
        started = [asyncio.create_task(review(f"heavy {i}", b)) for i, b in enumerate(heavy)]
        await asyncio.sleep(0)  # they start first
        await review("pod", POD)
        await asyncio.gather(*started)

    asyncio.run(all_of_them())
    return answered


def test_an_ordinary_review_is_answered_while_another_is_still_compiling() -> None:
    assert _answered(_webhook(WHOLE), [_many_new_selectors(8)]) == ["pod", "heavy 0"]


def test_an_ordinary_review_is_answered_between_a_large_reviews_decoding_and_its_checks() -> None:
    body = _many_requests()
    assert len(body) > LARGE_BODY_BYTES
    assert _answered(_webhook(), [body])[0] == "pod"


def test_large_reviews_are_decoded_and_decided_one_at_a_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    webhook = _webhook()
    events: list[str] = []
    decode, review = transport.decode_review, webhook.pipeline.review

    def decoding(body: bytes) -> Any:
        events.append("decoded large" if len(body) > LARGE_BODY_BYTES else "decoded")
        return decode(body)

    def deciding(endpoint: Endpoint, request: Any) -> Any:
        events.append(f"decided {request.kind}")
        return review(endpoint, request)

    monkeypatch.setattr(transport, "decode_review", decoding)
    monkeypatch.setattr(webhook.pipeline, "review", deciding)
    answered = _answered(webhook, [_many_requests(), _many_requests(), _many_requests()])
    assert answered[0] == "pod"
    large = [e for e in events if e not in ("decoded", "decided Pod")]
    assert large == ["decoded large", "decided ResourceClaim"] * 3, events


def test_a_large_review_that_waited_for_the_lane_past_its_time_is_refused_undecoded() -> None:
    view = ClusterView()
    source = StaticSource(view, objects=DEMO_NAMESPACES)
    settings = Settings(max_queue_seconds=0.05)
    webhook = create_app(settings, policy=policy_from(""), source=source).state.webhook
    source.load()
    scope = {
        "type": "http",
        "method": "POST",
        "path": "/validate",
        "headers": [(b"content-type", b"application/json")],
        "query_string": b"",
        "state": {RECEIVED_AT: time.monotonic()},
    }
    body = _many_requests()

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def behind_another() -> Any:
        async with webhook._heavy:  # another large review is being decided
            waiting = asyncio.create_task(webhook.handle(scope, receive, Endpoint.VALIDATE))
            await asyncio.sleep(0.1)
        return await waiting

    answer = asyncio.run(behind_another())
    assert answer.status == 429
    assert b"waited" in answer.body
