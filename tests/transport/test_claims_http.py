"""Claim quotas and defaults through the real app: ASGI in-process, and a TLS server."""

from __future__ import annotations

import base64
import copy
from collections.abc import Callable, Iterator
from typing import Any

import jsonpatch
import orjson
import pytest

from app.cluster.view import Kind
from app.config import load_policy
from tests.claim_objects import CLUSTER_FILE, POLICY_FILE, claim, cluster_objects, exact, workload
from tests.helpers import (
    DEMO_NAMESPACES,
    AppHarness,
    TlsServer,
    load_fixture,
    review,
    start_server,
    stop_server,
    wrap,
)

Obj = dict[str, Any]


@pytest.fixture
def claims_app(make_app: Callable[..., AppHarness]) -> AppHarness:
    return make_app(cluster_objects(), load_policy(POLICY_FILE))


def test_claim_for_4_is_allowed_and_claim_for_5_denied_with_the_arithmetic(
    claims_app: AppHarness,
) -> None:
    assert claims_app.answer("validate", wrap(claim("four", exact(count=4))))["allowed"] is True
    response = claims_app.answer("validate", wrap(claim("five", exact(count=5)), uid="u5"))
    assert response["uid"] == "u5"
    assert response["allowed"] is False
    assert response["status"]["code"] == 403
    assert response["status"]["reason"] == "Forbidden"
    assert (
        "ResourceClaim five needs 5 devices of gpu.nvidia.com; namespace ml-research allows 16, "
        "12 in use (quota research)" in response["status"]["message"]
    )


def test_deployment_of_8_x_4_is_denied_and_counted_in_metrics(claims_app: AppHarness) -> None:
    body = wrap(workload("Deployment", "trainer", 8, templates=("four-gpus",)))
    response = claims_app.answer("validate", body)
    assert response["allowed"] is False
    assert (
        "Deployment trainer needs 8 replicas x 4 devices of gpu.nvidia.com = 32; namespace "
        "ml-research allows 16, 12 in use" in response["status"]["message"]
    )
    metrics = claims_app.client.get("/metrics").text
    assert 'reason="claim-quota"' in metrics


def test_a_warn_entry_answers_allowed_with_the_warning(claims_app: AppHarness) -> None:
    body = wrap(workload("Deployment", "lab", 2, templates=("four-gpus",), namespace="open-lab"))
    # the template lives in ml-research; put one in open-lab through the view, as a watch would
    four = copy.deepcopy(
        claims_app.source.view.get(Kind.RESOURCE_CLAIM_TEMPLATE, "four-gpus", "ml-research")
    )
    assert four is not None
    four["metadata"]["namespace"] = "open-lab"
    claims_app.source.view.apply(Kind.RESOURCE_CLAIM_TEMPLATE, four)
    response = claims_app.answer("validate", body)
    assert response["allowed"] is True
    assert response["warnings"] == [
        "spec.template.spec: Deployment lab needs 2 replicas x 4 devices of gpu.nvidia.com = 8; "
        "namespace open-lab allows 4, 0 in use (quota lab-soft-limit); allowed (warn only)"
    ]


def test_a_watch_delete_frees_devices_for_the_next_claim(claims_app: AppHarness) -> None:
    five = wrap(claim("five", exact(count=5)))
    assert claims_app.answer("validate", five)["allowed"] is False
    claims_app.source.view.remove(
        Kind.RESOURCE_CLAIM, {"metadata": {"name": "train-b", "namespace": "ml-research"}}
    )
    assert claims_app.answer("validate", five)["allowed"] is True


def test_mutate_adds_defaults_to_the_captured_template_as_a_valid_jsonpatch(
    make_app: Callable[..., AppHarness],
) -> None:
    harness = make_app(DEMO_NAMESPACES, load_policy(POLICY_FILE))
    body = load_fixture("resourceclaimtemplate-create")
    original = copy.deepcopy(body["request"]["object"])
    response = harness.answer("mutate", body)
    assert response["allowed"] is True
    assert response["patchType"] == "JSONPatch"
    ops = orjson.loads(base64.b64decode(response["patch"]))
    result = jsonpatch.apply_patch(original, ops)
    exactly = result["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    assert exactly["tolerations"][0]["key"] == "example.com/maintenance"
    assert len(exactly["selectors"]) == 1  # the default selector was already written
    assert result["spec"]["spec"]["devices"]["config"][0]["opaque"]["driver"] == "gpu.example.com"
    assert response["warnings"][0].startswith(
        "ResourceClaimTemplate gpu-template: dra-webhook added"
    )


def test_mutate_fills_the_namespace_default_class_and_validate_then_counts_it(
    claims_app: AppHarness,
) -> None:
    obj = claim("unnamed", {"name": "gpu", "exactly": {"count": 5}})
    response = claims_app.answer("mutate", wrap(obj))
    mutated = jsonpatch.apply_patch(obj, orjson.loads(base64.b64decode(response["patch"])))
    assert (
        mutated["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] == "gpu.nvidia.com"
    )
    denied = claims_app.answer("validate", wrap(mutated))
    assert "needs 5 devices of gpu.nvidia.com" in denied["status"]["message"]


def test_a_malformed_claim_is_denied_with_the_path_on_validate_and_left_alone_on_mutate(
    claims_app: AppHarness,
) -> None:
    obj = claim(
        "bad", {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": "x"}}
    )
    validate = claims_app.answer("validate", wrap(obj))
    assert validate["allowed"] is False
    assert validate["status"]["code"] == 422
    assert (
        "spec.devices.requests[0].exactly.count: must be an integer"
        in validate["status"]["message"]
    )
    assert "patch" not in claims_app.answer("mutate", wrap(obj))


@pytest.fixture(scope="module")
def claims_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsServer]:
    server = start_server(
        tmp_path_factory.mktemp("claims"),
        "--config",
        str(POLICY_FILE),
        "--cluster-file",
        str(CLUSTER_FILE),
    )
    yield server
    stop_server(server)


@pytest.mark.slow
def test_over_tls_the_quota_denies_the_deployment_and_defaults_patch_the_template(
    claims_server: TlsServer,
) -> None:
    with claims_server.client() as client:
        denied = client.post(
            "/validate?timeout=10s",
            json=wrap(workload("Deployment", "trainer", 8, templates=("four-gpus",))),
        ).json()["response"]
        fits = client.post("/validate", json=wrap(claim("four", exact(count=4)))).json()["response"]
        captured = review("resourceclaimtemplate-create", namespace="ml-research")
        mutated = client.post("/mutate", json=captured).json()["response"]
    assert denied["allowed"] is False
    assert "= 32; namespace ml-research allows 16, 12 in use" in denied["status"]["message"]
    assert fits["allowed"] is True
    assert mutated["patchType"] == "JSONPatch"
