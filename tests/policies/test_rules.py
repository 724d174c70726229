"""Admin CEL rules from the policy file, through the real ASGI app."""

from __future__ import annotations

from typing import Any

import pytest

from app.errors import PolicyError
from app.pipeline import Pipeline
from app.policies import rules
from tests.helpers import make_view, policy_from, wrap

RULES = """
cel:
  rules:
    - name: claims-name-their-requests
      match: {kinds: [ResourceClaim], operations: [CREATE]}
      expression: object.spec.devices.requests.all(r, r.name.startsWith("gpu"))
      message: every request name starts with gpu
    - name: pods-have-an-owner-label
      match:
        kinds: [Pod, Deployment]
        namespaceSelector: {matchLabels: {gpu-mode: dra-only}}
      expression: has(object.metadata.labels) && "owner" in object.metadata.labels
      messageExpression: '"no owner label on " + object.metadata.name + " in " + namespaceObject.metadata.name'
      action: warn
    - name: creates-only-by-ci
      match: {kinds: [DeviceClass]}
      expression: request.userInfo.username == "ci" || request.operation == "UPDATE"
      message: only ci creates device classes
"""


def claim(*names: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "c", "namespace": "default"},
        "spec": {"devices": {"requests": [{"name": n} for n in names]}},
    }


def pod(namespace: str, **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": namespace, "labels": labels},
        "spec": {"containers": [{"name": "app", "image": "busybox"}]},
    }


def test_failing_deny_rule_denies_with_its_name_and_message(make_app: Any) -> None:
    harness = make_app(policy=policy_from(RULES))
    response = harness.answer("validate", wrap(claim("gpu-0", "cpu")))
    assert response["allowed"] is False
    assert (
        "claims-name-their-requests: every request name starts with gpu"
        in (response["status"]["message"])
    )
    assert harness.answer("validate", wrap(claim("gpu-0")))["allowed"] is True


def test_rule_runs_only_for_its_operations(make_app: Any) -> None:
    harness = make_app(policy=policy_from(RULES))
    assert harness.answer("validate", wrap(claim("cpu")))["allowed"] is False  # CREATE: runs
    response = harness.answer("validate", wrap(claim("cpu"), operation="UPDATE", old=claim("cpu")))
    assert response["allowed"] is True


def test_warn_rule_uses_its_message_expression_and_namespace_selector(make_app: Any) -> None:
    harness = make_app(policy=policy_from(RULES))
    response = harness.answer("validate", wrap(pod("gpu-e2e")))
    assert response["allowed"] is True
    assert response["warnings"] == ["pods-have-an-owner-label: no owner label on p in gpu-e2e"]
    assert "warnings" not in harness.answer("validate", wrap(pod("gpu-e2e", owner="me")))
    assert "warnings" not in harness.answer("validate", wrap(pod("default")))


def test_rules_see_the_request_variable(make_app: Any) -> None:
    harness = make_app(policy=policy_from(RULES))
    device_class = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "x"},
        "spec": {},
    }
    denied = harness.answer("validate", wrap(device_class))
    assert "only ci creates device classes" in denied["status"]["message"]
    allowed = harness.answer("validate", wrap(device_class, operation="UPDATE", old=device_class))
    assert allowed["allowed"] is True


def test_rule_that_cannot_be_evaluated_counts_as_failed(make_app: Any) -> None:
    policy = policy_from(
        "cel:\n  rules:\n    - name: needs-field\n      match: {kinds: [ResourceClaim]}\n"
        "      expression: object.spec.nope == 1\n"
    )
    response = make_app(policy=policy).answer("validate", wrap(claim("gpu")))
    assert response["allowed"] is False
    assert "needs-field: rule needs-field could not be evaluated" in response["status"]["message"]


@pytest.mark.parametrize(
    ("field", "value"),
    [("expression", "object.spec.devices.requests.all(r,"), ("messageExpression", "1 + ")],
)
def test_rule_that_does_not_compile_stops_startup_with_its_name(field: str, value: str) -> None:
    text = (
        "cel:\n  rules:\n    - name: broken-rule\n      match: {kinds: [Pod]}\n"
        f"      expression: 'true'\n      {field}: '{value}'\n"
    )
    with pytest.raises(PolicyError, match=rf"cel\.rules\[0\] \(broken-rule\)\.{field} does not"):
        Pipeline(policy_from(text), make_view(), own_namespace="dra-webhook")


def test_message_expression_must_be_a_string_at_compile_time() -> None:
    text = (
        "cel:\n  rules:\n    - name: r\n      match: {kinds: [Pod]}\n"
        "      expression: 'true'\n      messageExpression: '1 + 1'\n"
    )
    with pytest.raises(PolicyError, match="must evaluate to string"):
        Pipeline(policy_from(text), make_view(), own_namespace="dra-webhook")


def test_duplicate_rule_names_are_refused() -> None:
    text = (
        "cel:\n  rules:\n"
        "    - {name: r, match: {kinds: [Pod]}, expression: 'true'}\n"
        "    - {name: r, match: {kinds: [Pod]}, expression: 'true'}\n"
    )
    with pytest.raises(PolicyError, match="used twice"):
        policy_from(text)


class _BrokenMessage:
    """A message program whose backend fails with something other than CelEvalError."""

    def evaluate(self, activation: Any) -> Any:
        raise ValueError("invalid literal for int() with base 10: 'oops'")


def test_a_message_expression_that_fails_in_any_way_falls_back_to_the_static_message() -> None:
    policy = policy_from(
        "cel:\n  rules:\n    - name: r\n      match: {kinds: [Pod]}\n"
        "      expression: 'false'\n      messageExpression: '\"dynamic\"'\n"
        "      message: static text\n"
    )
    pipeline = Pipeline(policy, make_view(), own_namespace="dra-webhook")
    (compiled,) = pipeline.parts[rules.admin_rules]
    broken = rules.CompiledRule(
        compiled.rule,
        compiled.kinds,
        compiled.operations,
        compiled.program,
        _BrokenMessage(),  # type: ignore[arg-type]
    )
    assert rules._message(compiled, None) == "dynamic"
    assert rules._message(broken, None) == "static text"
