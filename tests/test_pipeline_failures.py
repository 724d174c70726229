"""A check that crashes answers for itself only: every other check's denial still stands."""

from __future__ import annotations

import logging
from typing import Any

import orjson
import pytest

from app.config import load_policy
from app.pipeline import REGISTRATIONS, Endpoint, Pipeline, Registration
from app.policies import rules
from app.policies.base import Context, Request, Result
from app.transport.review import decode_review
from tests.helpers import make_view, policy_from, wrap

TAG_LIKE = "\x01k8s.q\x02oops"
"""An annotation that starts like the cel-expr-python backend's internal quantity encoding."""

NEED_OWNER = """
cel:
  backend: {backend}
  rules:
    - name: need-owner
      match: {{kinds: [Pod]}}
      expression: 'has(object.metadata.labels) && "team" in object.metadata.labels'
      messageExpression: 'object.metadata.annotations["contact"] + " must add a team label"'
      message: add a team label
failure: {{internalError: {internal_error}}}
"""

DRA_ONLY_TEXT = "namespace gpu-e2e is dra-only"


def legacy_pod(namespace: str = "gpu-e2e", **annotations: str) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": "4"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": namespace, "annotations": annotations},
        "spec": {
            "containers": [
                {"name": "c", "image": "x", "resources": {"limits": limits, "requests": limits}}
            ]
        },
    }


def need_owner(backend: str = "cel-expr-python", internal_error: str = "open") -> Any:
    return policy_from(NEED_OWNER.format(backend=backend, internal_error=internal_error))


def denials(harness: Any, reason: str) -> float:
    value = harness.metrics.registry.get_sample_value(
        "dra_webhook_denials_total", {"webhook": "validate", "reason": reason}
    )
    return value or 0.0


@pytest.mark.parametrize("backend", ["cel-expr-python", "cel-python"])
def test_a_rule_message_built_from_a_tag_like_annotation_keeps_the_dra_only_denial(
    make_app: Any, backend: str
) -> None:
    harness = make_app(policy=need_owner(backend))
    response = harness.answer("validate", wrap(legacy_pod(contact=TAG_LIKE)))
    assert response["allowed"] is False
    message = response["status"]["message"]
    assert DRA_ONLY_TEXT in message
    assert f"need-owner: {TAG_LIKE} must add a team label" in message
    assert "internal error" not in str(response)


def raising_check(request: Request, ctx: Context) -> Result:
    raise RuntimeError("a bug in the rules check")


@pytest.mark.parametrize(
    ("internal_error", "allowed_by_the_failed_check"), [("open", True), ("closed", False)]
)
def test_a_crashing_check_does_not_cancel_another_checks_denial(
    make_app: Any,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    internal_error: str,
    allowed_by_the_failed_check: bool,
) -> None:
    monkeypatch.setattr(rules, "check", raising_check)
    harness = make_app(policy=need_owner(internal_error=internal_error))
    with caplog.at_level(logging.ERROR, logger="app.pipeline"):
        response = harness.answer("validate", wrap(legacy_pod(), uid="uid-42"))

    assert response["allowed"] is False
    message = response["status"]["message"]
    assert DRA_ONLY_TEXT in message
    assert response["status"]["code"] == 403  # the first denial's, dra-only's
    failure = "cel-rules: dra-webhook failed to run this check (internal error, see its logs)"
    if allowed_by_the_failed_check:
        assert response["warnings"] == [f"{failure}; not checked, allowed (fail open)"]
        assert failure not in message
    else:
        assert f"- {failure}; denied (fail closed)" in message
        assert "warnings" not in response
    assert denials(harness, "dra-only") == 1
    assert denials(harness, "internal-error:cel-rules") == (0 if allowed_by_the_failed_check else 1)
    assert denials(harness, "internal-error") == 0  # the review as a whole did not fail
    errors = harness.metrics.check_errors.labels("validate", "cel-rules")._value.get()
    assert errors == 1  # counted whether the failure allowed or denied

    (record,) = [r for r in caplog.records if r.name == "app.pipeline"]
    assert record.uid == "uid-42"  # type: ignore[attr-defined]
    assert record.check == "cel-rules"  # type: ignore[attr-defined]
    assert record.exc_info is not None


def test_a_crashing_check_alone_is_answered_per_the_failure_policy() -> None:
    request = decode_review(orjson.dumps(wrap(legacy_pod("default"))))  # no mode: nothing denies
    boom = Registration(
        "boom", Endpoint.VALIDATE, frozenset({("", "Pod")}), frozenset({"CREATE"}), raising_check
    )
    for mode, allowed in (("open", True), ("closed", False)):
        policy = policy_from(f"failure: {{internalError: {mode}}}")
        pipeline = Pipeline(policy, make_view(), "dra-webhook", (*REGISTRATIONS, boom))
        decision = pipeline.review(Endpoint.VALIDATE, request)
        assert decision.allowed is allowed
        assert decision.failed_checks == ("boom",)
        assert decision.denied_by == (() if allowed else ("internal-error:boom",))
        assert "dra-only" in decision.policies


def test_a_check_that_runs_cleanly_reports_no_failed_checks() -> None:
    request = decode_review(orjson.dumps(wrap(legacy_pod())))
    decision = Pipeline(load_policy(), make_view(), "dra-webhook").review(
        Endpoint.VALIDATE, request
    )
    assert decision.denied_by == ("dra-only",)
    assert decision.failed_checks == ()
