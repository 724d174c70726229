"""The admission front (app.transport.asgi): the same answer with or without FastAPI's layers,
bodies read and bounded however they are sent, and everything else left to the router."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from tests.helpers import AppHarness, load_fixture

REVIEW = orjson.dumps(load_fixture("pod-create-legacy-gpu"))


def _routed(app: FastAPI) -> Any:
    """The app without the admission front: every request through FastAPI's router."""

    async def routed(scope: Any, receive: Any, send: Any) -> None:
        await FastAPI.__call__(app, scope, receive, send)

    return routed


@pytest.mark.parametrize(
    ("path", "body", "content_type"),
    [
        ("/validate", REVIEW, "application/json"),
        ("/mutate", REVIEW, "application/json"),
        ("/validate", b"{nope", "application/json"),
        ("/validate", REVIEW, "text/plain"),
        ("/validate", b"x" * (2 << 20), "application/json"),
    ],
)
def test_the_front_answers_as_the_router_does(
    app: AppHarness, path: str, body: bytes, content_type: str
) -> None:
    headers = {"content-type": content_type}
    front = app.client.post(path, content=body, headers=headers)
    routed = TestClient(_routed(app.client.app)).post(path, content=body, headers=headers)  # type: ignore[arg-type]
    assert (front.status_code, front.content) == (routed.status_code, routed.content)
    for name in ("content-type", "content-length", "retry-after"):
        assert front.headers.get(name) == routed.headers.get(name)


def test_a_body_sent_in_chunks_without_a_length_is_read_and_bounded(make_app: Any) -> None:
    from app.config import Settings

    harness: AppHarness = make_app(settings=Settings(max_body_bytes=len(REVIEW) + 10))
    headers = {"content-type": "application/json"}

    def chunks(data: bytes) -> Iterator[bytes]:
        for start in range(0, len(data), 1000):
            yield data[start : start + 1000]

    answer = harness.client.post("/validate", content=chunks(REVIEW), headers=headers)
    assert answer.status_code == 200
    assert answer.json()["response"]["allowed"] is False
    over = harness.client.post("/validate", content=chunks(REVIEW + b" " * 20), headers=headers)
    assert over.status_code == 400
    assert "over the limit" in over.json()["message"]


def test_other_methods_and_paths_still_reach_the_router(app: AppHarness) -> None:
    assert app.client.get("/validate").status_code == 405
    assert app.client.get("/healthz").json() == {"status": "ok"}
