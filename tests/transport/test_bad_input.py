"""What malformed requests and objects get: a 400 with the reason, or a denial with the path."""

from __future__ import annotations

import time
from typing import Any

import orjson
import pytest

from app.config import Settings
from tests.helpers import AppHarness, load_fixture, review, wrap


def _with(body: dict[str, Any], path: tuple[str, ...], value: Any) -> dict[str, Any]:
    node = body
    for key in path[:-1]:
        node = node[key]
    if value is ...:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return body


LEGACY = "pod-create-legacy-gpu"

BAD_REQUESTS: list[tuple[str, bytes, dict[str, str], str]] = [
    ("not JSON", b"{nope", {}, "not valid JSON"),
    ("empty body", b"", {}, "empty body"),
    ("a JSON array", b"[1, 2]", {}, "JSON list"),
    ("a JSON string", b'"review"', {}, "JSON str"),
    (
        "wrong content type",
        orjson.dumps(load_fixture(LEGACY)),
        {"content-type": "text/plain"},
        "content type must be application/json",
    ),
    (
        "not an AdmissionReview",
        orjson.dumps({"apiVersion": "v1", "kind": "Pod"}),
        {},
        "not an admission.k8s.io/v1 AdmissionReview",
    ),
    (
        "v1beta1 review",
        orjson.dumps(_with(load_fixture(LEGACY), ("apiVersion",), "admission.k8s.io/v1beta1")),
        {},
        "apiVersion",
    ),
    (
        "no request",
        orjson.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}),
        {},
        "request",
    ),
    (
        "no uid",
        orjson.dumps(_with(load_fixture(LEGACY), ("request", "uid"), ...)),
        {},
        "request.uid",
    ),
    (
        "empty uid",
        orjson.dumps(_with(load_fixture(LEGACY), ("request", "uid"), "")),
        {},
        "request.uid",
    ),
    (
        "unknown operation",
        orjson.dumps(_with(load_fixture(LEGACY), ("request", "operation"), "EXPLODE")),
        {},
        "request.operation",
    ),
    (
        "object is a list",
        orjson.dumps(_with(load_fixture(LEGACY), ("request", "object"), [1])),
        {},
        "request.object",
    ),
]


@pytest.mark.parametrize("endpoint", ["validate", "mutate"])
@pytest.mark.parametrize(
    ("case", "body", "headers", "reason"), BAD_REQUESTS, ids=[c[0] for c in BAD_REQUESTS]
)
def test_a_malformed_request_is_a_400_with_the_reason(
    app: AppHarness, endpoint: str, case: str, body: bytes, headers: dict[str, str], reason: str
) -> None:
    http = app.post(endpoint, body, **headers)
    assert http.status_code == 400, (case, http.text)
    assert reason in http.json()["message"]


def test_a_body_over_the_limit_is_a_400(make_app: Any) -> None:
    harness: AppHarness = make_app(settings=Settings(max_body_bytes=2048))
    http = harness.post("validate", load_fixture(LEGACY))
    assert http.status_code == 400
    assert "over the limit of 2048" in http.json()["message"]


def test_bad_requests_are_counted(app: AppHarness) -> None:
    app.post("validate", b"{")
    assert "dra_webhook_bad_requests_total 1.0" in app.client.get("/metrics").text


@pytest.mark.parametrize(
    ("group", "kind", "operation"),
    [
        ("", "ConfigMap", "CREATE"),
        ("", "Pod", "DELETE"),
        ("", "Pod", "CONNECT"),
        ("example.com", "Deployment", "CREATE"),
    ],
)
def test_a_kind_or_operation_the_webhook_does_not_handle_is_allowed_unchanged(
    app: AppHarness, group: str, kind: str, operation: str
) -> None:
    body = load_fixture(LEGACY)
    body["request"]["kind"] = {"group": group, "version": "v1", "kind": kind}
    body["request"]["operation"] = operation
    for endpoint in ("validate", "mutate"):
        assert app.answer(endpoint, body) == {"uid": body["request"]["uid"], "allowed": True}


MALFORMED_OBJECTS = [
    (("spec",), "a string", "spec: must be an object"),
    (("spec", "containers"), {"name": "cuda"}, "spec.containers: must be a list"),
    (("spec", "containers", 0), "cuda", "spec.containers[0]: must be an object"),
    (("spec", "containers", 0, "resources"), ["x"], "spec.containers[0].resources: must be"),
    (
        ("spec", "containers", 0, "resources", "limits"),
        "2",
        "spec.containers[0].resources.limits: must be an object",
    ),
    (
        ("spec", "containers", 0, "resources", "limits", "nvidia.com/gpu"),
        {"n": 2},
        "spec.containers[0].resources.limits[nvidia.com/gpu]: must be a quantity",
    ),
    (("spec", "initContainers"), 7, "spec.initContainers: must be a list"),
    (("spec", "containers", 0, "name"), 12, "spec.containers[0].name: must be a string"),
]


@pytest.mark.parametrize(("path", "value", "message"), MALFORMED_OBJECTS)
def test_an_object_that_does_not_parse_is_denied_with_the_field_path_when_validating(
    app: AppHarness, path: tuple[Any, ...], value: Any, message: str
) -> None:
    body = load_fixture(LEGACY)
    node = body["request"]["object"]
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    response = app.answer("validate", body)
    assert response["allowed"] is False
    assert response["status"]["code"] == 422
    assert response["status"]["reason"] == "Invalid"
    assert message in response["status"]["message"]
    assert app.answer("mutate", body) == {"uid": body["request"]["uid"], "allowed": True}


def test_a_huge_pod_is_answered_in_bounded_time_listing_a_bounded_number_of_violations(
    app: AppHarness,
) -> None:
    body = load_fixture(LEGACY)
    template = body["request"]["object"]["spec"]["containers"][0]
    body["request"]["object"]["spec"]["containers"] = [
        {**template, "name": f"c{i}"} for i in range(500)
    ]
    started = time.perf_counter()
    response = app.answer("validate", body)
    elapsed = time.perf_counter() - started
    assert response["allowed"] is False
    message = response["status"]["message"]
    assert "... and 450 more" in message
    assert elapsed < 2.0  # generous: a correctness bound (no quadratic blow-up), not a benchmark


def test_a_claim_with_more_requests_than_the_api_server_takes_is_refused_with_the_path(
    app: AppHarness,
) -> None:
    body = load_fixture("resourceclaim-create")
    claim = body["request"]["object"]
    (request,) = claim["spec"]["devices"]["requests"]
    claim["spec"]["devices"]["requests"] = [{**request, "name": f"r{i}"} for i in range(10_000)]
    started = time.perf_counter()
    response = app.answer("validate", body)
    elapsed = time.perf_counter() - started
    assert response["allowed"] is False
    assert response["status"]["code"] == 422
    assert (
        "spec.devices.requests: must have at most 32 items, not 10,000"
        in (response["status"]["message"])
    )
    assert app.answer("mutate", body)["allowed"] is True
    assert elapsed < 2.0  # generous: a correctness bound (the list is not read), not a benchmark


def test_deeply_nested_unrelated_fields_are_carried_without_harm(app: AppHarness) -> None:
    deep: Any = "leaf"
    for _ in range(200):
        deep = {"x": deep}
    body = review(LEGACY, namespace="default")
    body["request"]["object"]["metadata"]["annotations"] = {"deep": orjson.dumps(deep).decode()}
    body["request"]["object"]["spec"]["nested"] = deep
    assert app.answer("validate", body)["allowed"] is True


def test_a_cluster_scoped_object_with_no_namespace_is_handled(app: AppHarness) -> None:
    device_class = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "gpu.example.com"},
        "spec": {},
    }
    assert app.answer("validate", wrap(device_class))["allowed"] is True
