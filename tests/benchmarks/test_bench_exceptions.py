"""What policy exceptions cost a dra-only review: none configured, 50 that do not select the
pod (each checks its namespace selector), and an excepted pod (allowed with the warning, not
memoized: its answer depends on the date).

Run: .venv/bin/pytest tests/benchmarks/test_bench_exceptions.py --benchmark-only
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import orjson
import pytest
import yaml

from app.config.policy import load_policy, parse_policy
from app.pipeline import Endpoint, Pipeline
from app.transport.response import encode, review_response
from app.transport.review import decode_review
from tests.helpers import load_fixture, make_view, namespace

NOW = dt.datetime(2026, 11, 24, tzinfo=dt.UTC)


def _exceptions(count: int, selecting: bool) -> list[dict[str, Any]]:
    return [
        {
            "name": f"e{i}",
            "namespaceSelector": {"matchLabels": {"team": "a" if selecting else f"t{i}"}},
            "objectSelector": {"matchLabels": {"app": "vendor"}},
            "until": "2027-03-31",
            "reason": "vendor image",
        }
        for i in range(count)
    ]


CASES = {
    "denied, no exceptions": (0, False),
    "denied, 50 exceptions selecting other namespaces": (50, False),
    "excepted (allowed with the warning), 50 exceptions": (50, True),
}


@pytest.mark.parametrize("case", list(CASES))
def test_dra_only_review_with_exceptions(benchmark: Any, case: str) -> None:
    count, selecting = CASES[case]
    text = yaml.safe_dump({"exceptions": _exceptions(count, selecting)}) if count else ""
    policy = parse_policy(text, "bench") if count else load_policy()
    view = make_view([namespace("gpu-e2e", "dra-only", team="a")])
    pipeline = Pipeline(policy, view, "dra-webhook", clock=lambda: NOW)
    body = load_fixture("pod-create-legacy-gpu")
    body["request"]["object"]["metadata"]["labels"] = {"app": "vendor"}
    raw = orjson.dumps(body)

    def run() -> bytes:
        request = decode_review(raw)
        return encode(review_response(request.uid, pipeline.review(Endpoint.VALIDATE, request)))

    allowed = orjson.loads(run())["response"]["allowed"]
    assert allowed is selecting
    benchmark(run)
