"""CEL selectors of claims, templates and DeviceClasses compile, through the real ASGI app; a
gap of this webhook's engine is allowed unchecked."""

from __future__ import annotations

from typing import Any

import pytest

from app.config import Policy
from tests.helpers import policy_from
from tests.policies.selector_objects import (
    BACKENDS,
    EIGHTY_GI_CLUSTER,
    MEMORY_OVER_200GI,
    NET,
    answer,
    claim,
    device_class,
    exactly,
    on,
    request,
)


def test_selector_that_does_not_compile_is_denied_with_position_and_expression(
    make_app: Any,
) -> None:
    bad = 'device.capacity["gpu.nvidia.com"].memory >= "40Gi"'
    response = answer(make_app(EIGHTY_GI_CLUSTER), claim(request(exactly=exactly(bad))))
    assert response["allowed"] is False
    message = response["status"]["message"]
    assert "spec.devices.requests[0].exactly.selectors[0].cel.expression" in message
    assert "at 1:42" in message
    assert "found no matching overload for '_>=_'" in message
    assert bad in message


def test_template_selectors_are_checked_under_spec_spec(make_app: Any) -> None:
    template = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "t", "namespace": "default"},
        "spec": {"spec": {"devices": {"requests": [request(exactly=exactly("device.driver =="))]}}},
    }
    response = answer(make_app(EIGHTY_GI_CLUSTER), template)
    assert response["allowed"] is False
    assert (
        "spec.spec.devices.requests[0].exactly.selectors[0].cel.expression"
        in (response["status"]["message"])
    )


def test_device_class_with_a_bad_selector_is_denied(make_app: Any) -> None:
    response = answer(make_app(), device_class(expression="device.drver == 'x'"))
    assert response["allowed"] is False
    message = response["status"]["message"]
    assert (
        "spec.selectors[0].cel.expression: CEL does not compile at 1:8: undefined field" in message
    )


def test_malformed_selectors_are_an_invalid_object(make_app: Any) -> None:
    bad = claim(request(exactly={"deviceClassName": "gpu.nvidia.com", "selectors": "x"}))
    response = answer(make_app(EIGHTY_GI_CLUSTER), bad)
    assert response["allowed"] is False
    assert response["status"]["code"] == 422
    assert (
        "spec.devices.requests[0].exactly.selectors: must be a list"
        in response["status"]["message"]
    )


def test_both_backends_give_the_same_answers_through_the_app(make_app: Any) -> None:
    answers = {}
    for backend in ("cel-expr-python", "cel-python"):
        policy: Policy = policy_from(f"cel:\n  backend: {backend}\n")
        harness = make_app(EIGHTY_GI_CLUSTER, policy=policy)
        warned = answer(harness, claim(request(exactly=exactly(MEMORY_OVER_200GI))))
        assert "largest gpu.nvidia.com/memory is 80Gi" in warned["warnings"][0]
        denied = answer(harness, claim(request(exactly=exactly("device.driver =="))))
        assert denied["allowed"] is False
        answers[backend] = (warned, denied)
    (expr_warned, expr_denied), (py_warned, py_denied) = answers.values()
    assert expr_warned["allowed"] is py_warned["allowed"] is True
    assert expr_warned["warnings"] == py_warned["warnings"]
    assert expr_denied["status"]["code"] == py_denied["status"]["code"]
    # the compile error's wording is each backend's own; the field it names is the same
    path = "spec.devices.requests[0].exactly.selectors[0].cel.expression"
    assert path in expr_denied["status"]["message"]
    assert path in py_denied["status"]["message"]


# -- Kubernetes' DRA CEL has libraries this webhook's engine lacks: warn, do not deny ----------

DEEP = "(" * 40 + 'device.driver == "gpu.nvidia.com"' + ")" * 40


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    ("expression", "gap"),
    [
        (f'cidr("10.0.0.0/8").containsIP({NET}.ip)', "cidr()"),
        (f"isIP({NET}.ip)", "isIP()"),
        (f"isCIDR({NET}.net)", "isCIDR()"),
        (f"ip({NET}.ip).family() == 4", "ip()"),
        (f"{NET}.ip.family() == 4", ".family()"),
        (f'url({NET}.endpoint).getHost() == "x"', "url()"),
        (f"isURL({NET}.endpoint)", "isURL()"),
        (f"ip.isCanonical({NET}.ip)", "ip."),
        (f"format.dns1123Label().validate({NET}.name).hasValue()", "format."),
        ('math.greatest(1, 2) == 2 && device.driver == "dra.net"', "math."),
    ],
)
def test_a_selector_using_a_kubernetes_library_this_engine_lacks_is_allowed_unchecked(
    make_app: Any, backend: str, expression: str, gap: str
) -> None:
    harness = make_app(policy=on(backend))
    response = answer(harness, device_class("net.example.com", expression))
    assert response["allowed"] is True, response
    (warning,) = response["warnings"]
    assert warning.startswith("spec.selectors[0].cel.expression: not checked: ")
    assert gap in warning
    assert "is not supported by this webhook's CEL engine" in warning

    in_dra_only = claim(request(exactly=exactly(expression)), namespace="gpu-e2e")
    response = answer(harness, in_dra_only)
    assert response["allowed"] is True, response
    assert any(
        w.startswith("spec.devices.requests[0].exactly.selectors[0].cel.expression: not checked")
        for w in response["warnings"]
    )


def test_nesting_deeper_than_cel_cpp_parses_is_allowed_unchecked(make_app: Any) -> None:
    response = answer(make_app(policy=on("cel-expr-python")), device_class(expression=DEEP))
    assert response["allowed"] is True
    (warning,) = response["warnings"]
    assert "not checked: nesting this deep is not supported by this webhook's CEL engine" in warning
    assert answer(make_app(policy=on("cel-python")), device_class(expression=DEEP)) == {
        "uid": "test-uid",
        "allowed": True,
    }


def test_optional_selection_cel_python_cannot_parse_is_allowed_unchecked(make_app: Any) -> None:
    expression = f'{NET}.?ip.orValue("") != ""'
    response = answer(make_app(policy=on("cel-python")), device_class(expression=expression))
    assert response["allowed"] is True
    (warning,) = response["warnings"]
    assert "not checked: optional selection (.? and [?) is not supported" in warning
    assert answer(make_app(policy=on("cel-expr-python")), device_class(expression=expression)) == {
        "uid": "test-uid",
        "allowed": True,
    }


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    ("expression", "error"),
    [
        ("device.driver ==", "Syntax error"),
        (f'cidr("10.0.0.0/8").containsIP({NET}.ip) && (', "Syntax error"),
        ("device.drver == 'x'", "undefined field 'drver'"),
        ('cidr("10.0.0.0/8").containsIP(device.nosuch)', "undefined field 'nosuch'"),
        ("nosuch(1)", "undeclared reference to 'nosuch'"),
        (f"family({NET}.ip) == 4", "undeclared reference to 'family'"),
        (f"{NET}.ip.nosuch()", "undeclared reference to 'nosuch'"),
        (f"device.notANamespace.greatest({NET}.x)", "undefined field 'notANamespace'"),
    ],
)
def test_an_expression_with_its_own_error_is_still_denied(
    make_app: Any, backend: str, expression: str, error: str
) -> None:
    response = answer(make_app(policy=on(backend)), device_class(expression=expression))
    assert response["allowed"] is False, response
    assert error in response["status"]["message"]
    assert "not checked" not in str(response)


@pytest.mark.parametrize(
    "expression",
    [
        'device.capacity["gpu.nvidia.com"].memory >= quantity("40Gi")',
        'quantity(1) == quantity("1")',
        f"{NET}.version.isGreaterThan(1)",
    ],
)
def test_a_type_mismatch_on_a_function_both_have_is_still_denied(
    make_app: Any, expression: str
) -> None:
    response = answer(make_app(policy=on("cel-expr-python")), device_class(expression=expression))
    assert response["allowed"] is False
    assert "found no matching overload" in response["status"]["message"]
