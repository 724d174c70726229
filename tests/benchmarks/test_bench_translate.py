"""Translation benchmarks: decode -> policies -> encode for pods in a translate namespace.

Run: .venv/bin/pytest tests/benchmarks/test_bench_translate.py --benchmark-only
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
import pytest

from app.pipeline import Endpoint, Pipeline
from app.transport.response import encode, review_response
from app.transport.review import decode_review
from tests.benchmarks.policies import THREE_RULES
from tests.helpers import make_pipeline, policy_from, review, wrap
from tests.policies.translate_support import apply

NS = "ml-research"


def _round_trip(pipeline: Pipeline, endpoint: Endpoint, body: bytes) -> Callable[[], bytes]:
    def run() -> bytes:
        request = decode_review(body)
        return encode(review_response(request.uid, pipeline.review(endpoint, request)))

    return run


def _busy_pod() -> dict[str, Any]:
    """Three GPU containers, a GPU sidecar, a GPU init container, unrelated resources."""

    def c(name: str, gpus: str, **extra: Any) -> dict[str, Any]:
        limits = {"nvidia.com/gpu": gpus, "cpu": "2", "memory": "8Gi"}
        return {
            "name": name,
            "image": "cuda:12",
            "resources": {"limits": limits, "requests": dict(limits)},
            **extra,
        }

    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "busy", "namespace": NS},
        "spec": {
            "initContainers": [c("warm", "1"), c("proxy", "1", restartPolicy="Always")],
            "containers": [c("train", "4"), c("eval", "1"), c("mig", "0")],
        },
    }


def _translated_fixture() -> dict[str, Any]:
    body = review("pod-create-legacy-gpu", namespace=NS)
    decision = make_pipeline().review(Endpoint.MUTATE, decode_review(orjson.dumps(body)))
    body["request"]["object"] = apply(body["request"]["object"], decision.patch)
    return body


def _hami(namespace: str = NS) -> dict[str, Any]:
    """The captured legacy pod, asking for a HAMi share instead: one GPU, 4000 MiB (as the API
    server canonicalizes it: 4k), 30% of its cores."""
    body = review("pod-create-legacy-gpu", namespace=namespace)
    container = body["request"]["object"]["spec"]["containers"][0]
    resources = container["resources"]
    for which in ("limits", "requests"):
        values = resources.setdefault(which, {})
        values.pop("nvidia.com/gpu", None)
        values.update(
            {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4k", "nvidia.com/gpucores": "30"}
        )
    return body


CASES: dict[str, tuple[Endpoint, Callable[[], dict[str, Any]]]] = {
    "mutate HAMi-style pod (gpu + gpumem + gpucores), translate to a share (patched)": (
        Endpoint.MUTATE,
        _hami,
    ),
    "validate HAMi-style pod in a dra-only namespace (denied with the share as the fix)": (
        Endpoint.VALIDATE,
        lambda: _hami("gpu-e2e"),
    ),
    "mutate legacy pod fixture, translate (patched)": (
        Endpoint.MUTATE,
        lambda: review("pod-create-legacy-gpu", namespace=NS),
    ),
    "mutate 5-container pod with init + sidecar, translate (patched)": (
        Endpoint.MUTATE,
        lambda: wrap(_busy_pod()),
    ),
    "mutate translated pod again (reinvocation, unchanged)": (
        Endpoint.MUTATE,
        _translated_fixture,
    ),
    "validate legacy Deployment, translate (warned)": (
        Endpoint.VALIDATE,
        lambda: review("deployment-create-legacy-gpu", namespace=NS),
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_translate_round_trip(benchmark: Any, case: str) -> None:
    endpoint, body = CASES[case]
    run = _round_trip(make_pipeline(), endpoint, orjson.dumps(body()))
    assert run()
    benchmark(run)


def test_translate_then_validate_with_3_cel_rules(benchmark: Any) -> None:
    """Both reviews the API server sends for a legacy pod: /mutate, then /validate of the result."""
    policy = policy_from(THREE_RULES.format(backend="cel-expr-python"))
    pipeline = make_pipeline(None, policy)
    body = review("pod-create-legacy-gpu", namespace=NS)
    body["request"]["object"]["metadata"]["labels"] = {"owner": "me"}
    mutate = _round_trip(pipeline, Endpoint.MUTATE, orjson.dumps(body))
    decision = pipeline.review(Endpoint.MUTATE, decode_review(orjson.dumps(body)))
    body["request"]["object"] = apply(body["request"]["object"], decision.patch)
    validate = _round_trip(pipeline, Endpoint.VALIDATE, orjson.dumps(body))
    assert b'"patch"' in mutate()
    assert b'"allowed":true' in validate()

    def both() -> bytes:
        mutate()
        return validate()

    benchmark(both)
