"""The load test's reviews: built from the captured fixtures, in the demo cluster's namespaces."""

from __future__ import annotations

import orjson
import pytest

from loadtest.scenarios import (
    AUDIT,
    DRA_ONLY,
    PLACEHOLDER_UID,
    SCENARIOS,
    TRANSLATE,
    UNLABELLED,
    Scenario,
    problem,
)
from tests.helpers import make_view

UID = "2b1d3c4e-0000-4000-8000-000000000001"


def _request(scenario: Scenario) -> dict[str, object]:
    body = scenario.body.replace(PLACEHOLDER_UID, UID.encode())
    review = orjson.loads(body)
    assert review["apiVersion"] == "admission.k8s.io/v1"
    request: dict[str, object] = review["request"]
    return request


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_each_review_carries_a_fresh_uid_slot_and_one_namespace_throughout(
    scenario: Scenario,
) -> None:
    request = _request(scenario)
    assert request["uid"] == UID
    namespace = request["namespace"]
    for key in ("object", "oldObject"):
        obj = request.get(key)
        if isinstance(obj, dict):
            assert obj["metadata"]["namespace"] == namespace


def test_the_mix_covers_every_namespace_mode_and_every_kind() -> None:
    view = make_view()
    modes = {
        (view.namespace_labels(str(_request(s)["namespace"])) or {}).get("gpu-mode")
        for s in SCENARIOS
    }
    assert modes == {"dra-only", "translate", "audit", None}
    assert {DRA_ONLY, TRANSLATE, AUDIT, UNLABELLED} == {
        str(_request(s)["namespace"]) for s in SCENARIOS
    }
    kinds = {_request(s)["kind"]["kind"] for s in SCENARIOS}  # type: ignore[index]
    assert kinds == {"Pod", "Deployment", "ResourceClaim", "ResourceClaimTemplate"}
    assert {s.endpoint for s in SCENARIOS} == {"mutate", "validate"}
    plain = [s for s in SCENARIOS if s.name.startswith("plain pod")]
    assert plain and all(s.unchanged and s.allowed for s in plain)


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        (200, {"response": {"uid": UID, "allowed": False}}, None),
        (500, {}, "HTTP 500"),
        (200, {"response": {"uid": "other", "allowed": False}}, "does not echo"),
        (200, {"response": {"uid": UID, "allowed": True}}, "allowed=True, expected False"),
        (200, {"response": {"uid": UID}}, "no boolean `allowed`"),
        (200, {"nothing": 1}, "not an AdmissionReview"),
    ],
)
def test_an_answer_is_judged_on_envelope_uid_and_known_decision(
    status: int, body: dict[str, object], expected: str | None
) -> None:
    (denied,) = [s for s in SCENARIOS if s.name == "legacy pod dra-only / validate"]
    if "response" in body:
        body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", **body}
    found = problem(status, orjson.dumps(body), UID, denied)
    if expected is None:
        assert found is None
    else:
        assert found is not None and expected in found
