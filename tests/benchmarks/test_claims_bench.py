"""Claim admission cost with quotas and DeviceClass defaults (run with --benchmark-only).

A claim is reviewed twice in a real cluster: /mutate (defaults) then /validate (quota) on the
mutated object. Measured in-process, from body bytes to answer bytes, over a small cluster and
over one with 20,000 claims in 1,000 namespaces, to show the cost does not grow with the cluster.
"""

from __future__ import annotations

import base64
from typing import Any

import jsonpatch
import orjson
import pytest
from pytest_benchmark.fixture import BenchmarkFixture

from app.cluster.view import ClusterView, Kind
from app.config import load_policy
from app.pipeline import Endpoint, Pipeline
from app.transport.response import encode, review_response
from app.transport.review import decode_review
from tests.claim_objects import POLICY_FILE, claim, cluster_objects, exact, workload
from tests.helpers import namespace, wrap

Obj = dict[str, Any]


def _big_cluster() -> list[Obj]:
    objects = cluster_objects()
    for n in range(1000):
        objects.append(namespace(f"team-{n}", "translate", team="research"))
        objects += [claim(f"c{i}", exact(count=1), namespace=f"team-{n}") for i in range(20)]
    return objects


CLUSTERS = {"small": cluster_objects, "20k-claims": _big_cluster}


@pytest.fixture(scope="module", params=sorted(CLUSTERS))
def pipeline(request: pytest.FixtureRequest) -> Pipeline:
    """The view is filled directly (a YAML round trip of 20,000 claims takes most of a minute)."""
    view = ClusterView()
    objects = CLUSTERS[request.param]()
    for kind in Kind:
        view.replace(kind, [o for o in objects if o["kind"] == kind.value])
    return Pipeline(load_policy(POLICY_FILE), view, own_namespace="dra-webhook")


def _admit(pipeline: Pipeline, mutate_body: bytes, validate_body: bytes) -> tuple[bytes, bytes]:
    request = decode_review(mutate_body)
    mutated = encode(review_response(request.uid, pipeline.review(Endpoint.MUTATE, request)))
    request = decode_review(validate_body)
    validated = encode(review_response(request.uid, pipeline.review(Endpoint.VALIDATE, request)))
    return mutated, validated


def test_claim_admission_with_defaults_and_quota(
    benchmark: BenchmarkFixture, pipeline: Pipeline
) -> None:
    obj = claim("fits", {"name": "gpu", "exactly": {"allocationMode": "ExactCount", "count": 2}})
    mutate_body = orjson.dumps(wrap(obj))
    first = orjson.loads(_admit(pipeline, mutate_body, mutate_body)[0])["response"]
    assert first["patchType"] == "JSONPatch"
    mutated = jsonpatch.apply_patch(obj, orjson.loads(base64.b64decode(first["patch"])))
    validate_body = orjson.dumps(wrap(mutated))

    _, validated = benchmark(_admit, pipeline, mutate_body, validate_body)
    assert orjson.loads(validated)["response"]["allowed"] is True


def test_claim_denied_by_the_namespace_quota(
    benchmark: BenchmarkFixture, pipeline: Pipeline
) -> None:
    body = orjson.dumps(wrap(claim("five", exact(count=5))))

    def validate() -> bytes:
        request = decode_review(body)
        return encode(review_response(request.uid, pipeline.review(Endpoint.VALIDATE, request)))

    assert b"12 in use" in benchmark(validate)


def test_deployment_checked_against_quota_and_resource_quota(
    benchmark: BenchmarkFixture, pipeline: Pipeline
) -> None:
    body = orjson.dumps(wrap(workload("Deployment", "trainer", 8, templates=("four-gpus",))))

    def validate() -> bytes:
        request = decode_review(body)
        return encode(review_response(request.uid, pipeline.review(Endpoint.VALIDATE, request)))

    assert b"= 32; namespace ml-research allows 16, 12 in use" in benchmark(validate)
