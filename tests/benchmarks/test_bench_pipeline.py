"""In-process pipeline benchmarks: decode -> policies -> encode, per request type.

Run: make bench   (or .venv/bin/pytest tests/benchmarks --benchmark-only)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
import pytest

from app.pipeline import Endpoint, Pipeline
from app.transport.response import encode, review_response
from app.transport.review import decode_review
from tests.helpers import load_fixture, make_pipeline, review


def _round_trip(pipeline: Pipeline, endpoint: Endpoint, body: bytes) -> Callable[[], bytes]:
    def run() -> bytes:
        request = decode_review(body)
        return encode(review_response(request.uid, pipeline.review(endpoint, request)))

    return run


CASES: dict[str, tuple[Endpoint, Any]] = {
    "validate legacy pod, dra-only (denied)": (
        Endpoint.VALIDATE,
        load_fixture("pod-create-legacy-gpu"),
    ),
    "validate legacy pod, audit (warned)": (
        Endpoint.VALIDATE,
        review("pod-create-legacy-gpu", namespace="ml-audit"),
    ),
    "validate legacy pod, unlabelled (allowed)": (
        Endpoint.VALIDATE,
        review("pod-create-legacy-gpu", namespace="default"),
    ),
    "validate pod with claims (allowed)": (
        Endpoint.VALIDATE,
        load_fixture("pod-create-with-resourceclaims"),
    ),
    "validate legacy Deployment, dra-only (denied)": (
        Endpoint.VALIDATE,
        load_fixture("deployment-create-legacy-gpu"),
    ),
    "mutate legacy pod, dra-only (unchanged)": (
        Endpoint.MUTATE,
        load_fixture("pod-create-legacy-gpu"),
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_pipeline_round_trip(benchmark: Any, case: str) -> None:
    endpoint, body = CASES[case]
    run = _round_trip(make_pipeline(), endpoint, orjson.dumps(body))
    assert run()
    benchmark(run)


def test_decode_only(benchmark: Any) -> None:
    body = orjson.dumps(load_fixture("pod-create-legacy-gpu"))
    benchmark(decode_review, body)
