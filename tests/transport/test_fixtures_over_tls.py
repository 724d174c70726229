"""Every captured kube-apiserver review, sent to a real `dra-webhook serve` over verified TLS."""

from __future__ import annotations

import time

import orjson
import pytest

from tests.helpers import FIXTURE_NAMES, TlsServer, load_fixture, review

pytestmark = pytest.mark.slow

# fixture -> (allowed on /validate, text the answer must contain)
VALIDATE_EXPECTED = {
    "pod-create-legacy-gpu": (False, "spec.containers[0].resources.limits[nvidia.com/gpu]"),
    "pod-create-legacy-gpu-dryrun": (False, "nvidia.com/gpu"),
    "deployment-create-legacy-gpu": (
        False,
        "spec.template.spec.containers[0].resources.limits[nvidia.com/gpu]",
    ),
    "pod-create-with-resourceclaims": (True, ""),
    "pod-update-legacy-gpu": (True, "predates"),
    "resourceclaim-create": (True, ""),
    "resourceclaim-create-via-v1beta2": (True, ""),
    "resourceclaim-update": (True, ""),
    "resourceclaimtemplate-create": (True, ""),
    # the admin-access guard is off in the default policy (tests/policies/test_tenancy_*)
    "namespace-create-admin-access": (True, ""),
    "namespace-update-admin-access": (True, ""),
    "deviceclass-create-extended-resource": (True, ""),
    "deviceclass-update-label": (True, ""),
    # the demo cluster has no gpu.example.com devices: the rule reaches nothing, and says so
    "devicetaintrule-create-v1beta2": (True, "DeviceTaintRule drain-node-a would evict 0 pods"),
    "devicetaintrule-update-label": (True, "DeviceTaintRule drain-node-a would evict 0 pods"),
}


def test_every_fixture_has_an_expectation() -> None:
    assert set(FIXTURE_NAMES) == set(VALIDATE_EXPECTED)


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_validate_answers_each_captured_review_with_its_uid(
    tls_server: TlsServer, name: str
) -> None:
    body = load_fixture(name)
    allowed, text = VALIDATE_EXPECTED[name]
    with tls_server.client() as client:
        http = client.post("/validate?timeout=10s", json=body)
    assert http.status_code == 200
    answer = http.json()
    assert answer["apiVersion"] == "admission.k8s.io/v1"
    assert answer["kind"] == "AdmissionReview"
    response = answer["response"]
    assert response["uid"] == body["request"]["uid"]
    assert response["allowed"] is allowed
    if not allowed:
        assert response["status"]["code"] == 403
        assert response["status"]["reason"] == "Forbidden"
        assert text in response["status"]["message"]
    elif text:
        assert any(text in w for w in response["warnings"])


def test_legacy_pod_in_dra_only_namespace_is_denied_naming_container_and_resource(
    tls_server: TlsServer,
) -> None:
    with tls_server.client() as client:
        response = client.post("/validate", json=load_fixture("pod-create-legacy-gpu")).json()
    message = response["response"]["status"]["message"]
    assert "container cuda" in message
    assert "nvidia.com/gpu: 2" in message
    assert "resourceClaims:" in message
    assert "deviceClassName: gpu.nvidia.com" in message


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_mutate_leaves_dra_only_reviews_unpatched(tls_server: TlsServer, name: str) -> None:
    body = load_fixture(name)
    with tls_server.client() as client:
        response = client.post("/mutate", json=body).json()["response"]
    assert response["uid"] == body["request"]["uid"]
    assert response["allowed"] is True
    assert "patch" not in response


@pytest.mark.parametrize("name", ["pod-create-legacy-gpu", "deployment-create-legacy-gpu"])
def test_the_same_legacy_object_in_an_unlabelled_namespace_is_allowed(
    tls_server: TlsServer, name: str
) -> None:
    with tls_server.client() as client:
        response = client.post("/validate", json=review(name, namespace="default")).json()
    assert response["response"] == {"uid": load_fixture(name)["request"]["uid"], "allowed": True}


def test_health_readiness_and_metrics_are_served(tls_server: TlsServer) -> None:
    with tls_server.client() as client:
        assert client.get("/healthz").json() == {"status": "ok"}
        assert client.get("/readyz").json() == {"ready": True}
        client.post("/validate", json=load_fixture("pod-create-legacy-gpu"))
        metrics = client.get("/metrics").text
    assert (
        'dra_webhook_admission_duration_seconds_count{decision="denied",kind="Pod",webhook="validate"}'
        in metrics
    )
    assert 'dra_webhook_denials_total{reason="dra-only",webhook="validate"}' in metrics
    assert 'dra_webhook_cluster_synced{kind="ResourceSlice"} 1.0' in metrics


def test_plain_http_is_refused(tls_server: TlsServer) -> None:
    import httpx

    with pytest.raises(httpx.TransportError):
        httpx.post(tls_server.base_url.replace("https", "http") + "/validate", json={}, timeout=5)


def test_a_denial_is_logged_as_one_json_line_carrying_the_request_uid(
    tls_server: TlsServer,
) -> None:
    body = review("pod-create-legacy-gpu", uid="log-uid-1")
    with tls_server.client() as client:
        client.post("/validate", json=body)
    # lines are written at the end of the event loop's iteration (app.logs.JsonLinesHandler),
    # which may come just after the answer reached the client
    deadline = time.monotonic() + 5
    while True:
        lines = [
            orjson.loads(line)
            for line in tls_server.log.read_text().splitlines()
            if line.startswith("{")
        ]
        found = [line for line in lines if line.get("uid") == "log-uid-1"]
        if found or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    (denial,) = found
    assert denial["level"] == "INFO"
    assert denial["message"] == "review denied"
    assert (denial["kind"], denial["namespace"], denial["object_name"]) == (
        "Pod",
        "gpu-e2e",
        "gpu-pod",
    )
    assert denial["operation"] == "CREATE"
    assert denial["user"] == "admin"
    assert denial["denied_by"] == ["dra-only"]
    assert "object" not in denial  # never whole objects in logs


def test_cel_cache_counters_are_exported(tls_server: TlsServer) -> None:
    with tls_server.client() as client:
        client.post("/validate", json=load_fixture("resourceclaim-create"))
        client.post("/validate", json=load_fixture("resourceclaim-create"))
        metrics = client.get("/metrics").text
    hits = next(
        float(line.split()[-1])
        for line in metrics.splitlines()
        if line.startswith('dra_webhook_cel_cache_lookups_total{result="hit"}')
    )
    assert hits >= 1
    assert "dra_webhook_cel_cache_entries " in metrics
    assert 'dra_webhook_cel_device_match_memo_total{result="hit"}' in metrics
