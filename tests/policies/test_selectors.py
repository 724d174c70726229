"""CEL selectors of claims, templates and DeviceClasses, through the real ASGI app."""

from __future__ import annotations

from typing import Any

import pytest

from app.config import Policy
from tests.helpers import DEMO_NAMESPACES, AppHarness, policy_from, wrap

Obj = dict[str, Any]
MEMORY_OVER_200GI = 'device.capacity["gpu.nvidia.com"].memory.isGreaterThan(quantity("200Gi"))'
H100 = 'device.attributes["gpu.nvidia.com"].model == "H100"'


def device_class(name: str = "gpu.nvidia.com", expression: str | None = None) -> Obj:
    expression = expression or f'device.driver == "{name}"'
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": expression}}]},
    }


def resource_slice(node: str, *memories: str, model: str = "H100") -> Obj:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-gpu.nvidia.com", "resourceVersion": "1"},
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {
                    "name": f"gpu-{i}",
                    "attributes": {"model": {"string": model}},
                    "capacity": {"memory": {"value": memory}},
                }
                for i, memory in enumerate(memories)
            ],
        },
    }


def exactly(*selectors: str, count: int = 1, device_class_name: str = "gpu.nvidia.com") -> Obj:
    return {
        "deviceClassName": device_class_name,
        "count": count,
        "selectors": [{"cel": {"expression": s}} for s in selectors],
    }


def claim(*requests: Obj, namespace: str = "default", name: str = "big") -> Obj:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"devices": {"requests": list(requests)}},
    }


def request(name: str = "gpu", **body: Any) -> Obj:
    return {"name": name, **body}


EIGHTY_GI_CLUSTER = [*DEMO_NAMESPACES, device_class(), resource_slice("node-a", *["80Gi"] * 4)]
BIG_GPU_CLUSTER = [*DEMO_NAMESPACES, device_class(), resource_slice("node-b", "141Gi", "288Gi")]


def answer(harness: AppHarness, obj: Obj) -> Obj:
    return harness.answer("validate", wrap(obj))


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


def test_claim_asking_over_200gi_against_80gi_gpus_is_warned_with_the_largest_memory(
    make_app: Any,
) -> None:
    response = answer(
        make_app(EIGHTY_GI_CLUSTER), claim(request(exactly=exactly(MEMORY_OVER_200GI)))
    )
    assert response["allowed"] is True
    (warning,) = response["warnings"]
    assert warning.startswith("spec.devices.requests[0]: asks for 1 device, 0 can match")
    assert "largest gpu.nvidia.com/memory is 80Gi" in warning


def test_same_claim_against_141gi_and_288gi_gpus_passes(make_app: Any) -> None:
    response = answer(make_app(BIG_GPU_CLUSTER), claim(request(exactly=exactly(MEMORY_OVER_200GI))))
    assert response == {"uid": "test-uid", "allowed": True}


def test_unsatisfiable_claim_is_denied_where_the_mode_says_deny(make_app: Any) -> None:
    policy = policy_from("cel:\n  selectors:\n    unsatisfiableByMode: {dra-only: deny}\n")
    harness = make_app(EIGHTY_GI_CLUSTER, policy=policy)
    denied = answer(
        harness, claim(request(exactly=exactly(MEMORY_OVER_200GI)), namespace="gpu-e2e")
    )
    assert denied["allowed"] is False
    assert denied["status"]["code"] == 403
    assert "no device in the cluster can satisfy ResourceClaim big" in denied["status"]["message"]
    assert "largest gpu.nvidia.com/memory is 80Gi" in denied["status"]["message"]
    warned = answer(harness, claim(request(exactly=exactly(MEMORY_OVER_200GI))))
    assert warned["allowed"] is True and warned["warnings"]


def test_checks_can_be_switched_off(make_app: Any) -> None:
    policy = policy_from("cel:\n  selectors:\n    unsatisfiable: 'off'\n")
    response = answer(
        make_app(EIGHTY_GI_CLUSTER, policy=policy),
        claim(request(exactly=exactly(MEMORY_OVER_200GI))),
    )
    assert response == {"uid": "test-uid", "allowed": True}


def test_asking_more_devices_than_match_is_warned_with_the_count(make_app: Any) -> None:
    cluster = [*DEMO_NAMESPACES, device_class(), resource_slice("n", "80Gi", "141Gi")]
    big = 'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("100Gi")) > 0'
    response = answer(make_app(cluster), claim(request(exactly=exactly(big, count=2))))
    (warning,) = response["warnings"]
    assert "asks for 2 devices, 1 can match" in warning
    assert "1 of the 2 devices of class gpu.nvidia.com match" in warning


def test_selectors_that_each_match_but_not_together_are_explained(make_app: Any) -> None:
    cluster = [
        *DEMO_NAMESPACES,
        device_class(),
        resource_slice("a", "80Gi", model="H100"),
        resource_slice("b", "288Gi", model="B300"),
    ]
    response = answer(make_app(cluster), claim(request(exactly=exactly(MEMORY_OVER_200GI, H100))))
    (warning,) = response["warnings"]
    assert "but only 0 match all of them" in warning


def test_first_available_is_fine_when_any_alternative_can_be_satisfied(make_app: Any) -> None:
    harness = make_app(EIGHTY_GI_CLUSTER)
    alternatives = [
        {"name": "big", **exactly(MEMORY_OVER_200GI)},
        {"name": "any", **exactly(H100)},
    ]
    response = answer(harness, claim(request(firstAvailable=alternatives)))
    assert response == {"uid": "test-uid", "allowed": True}
    response = answer(harness, claim(request(firstAvailable=alternatives[:1] * 2)))
    (warning,) = response["warnings"]
    assert "none of its 2 firstAvailable alternatives can be satisfied" in warning


def test_missing_device_class_and_unknown_attribute_are_reported(make_app: Any) -> None:
    harness = make_app(EIGHTY_GI_CLUSTER)
    response = answer(harness, claim(request(exactly=exactly(device_class_name="nope.example"))))
    assert response["warnings"] == [
        "spec.devices.requests[0]: DeviceClass nope.example does not exist"
    ]
    unknown = 'device.attributes["gpu.nvidia.com"].profile == "1g.10gb"'
    response = answer(harness, claim(request(exactly=exactly(unknown))))
    (warning,) = response["warnings"]
    assert "no device has attribute gpu.nvidia.com/profile" in warning


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

NET = 'device.attributes["dra.net"]'
DEEP = "(" * 40 + 'device.driver == "gpu.nvidia.com"' + ")" * 40
BACKENDS = ["cel-expr-python", "cel-python"]


def on(backend: str, extra: str = "") -> Policy:
    return policy_from(f"cel:\n  backend: {backend}\n{extra}")


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


NET_CLASS = device_class(
    "net.example.com",
    f'device.driver == "gpu.nvidia.com" && cidr("10.0.0.0/8").containsIP({NET}.ip)',
)
DENY_IN_DRA_ONLY = "  selectors:\n    unsatisfiableByMode: {dra-only: deny}\n"


@pytest.mark.parametrize("backend", BACKENDS)
def test_satisfiability_is_skipped_with_a_warning_for_a_class_this_engine_cannot_check(
    make_app: Any, backend: str
) -> None:
    cluster = [*EIGHTY_GI_CLUSTER, NET_CLASS]
    harness = make_app(cluster, policy=on(backend, DENY_IN_DRA_ONLY))
    wanted = claim(
        request(exactly=exactly(H100, count=64, device_class_name="net.example.com")),
        namespace="gpu-e2e",
    )
    response = answer(harness, wanted)
    assert response["allowed"] is True, response
    (warning,) = response["warnings"]
    assert warning.startswith("spec.devices.requests[0].exactly: satisfiability not checked: ")
    assert "cidr() is not supported by this webhook's CEL engine" in warning
    assert "in a selector of DeviceClass net.example.com" in warning


@pytest.mark.parametrize("backend", BACKENDS)
def test_satisfiability_is_skipped_for_a_request_selector_this_engine_cannot_check(
    make_app: Any, backend: str
) -> None:
    harness = make_app(EIGHTY_GI_CLUSTER, policy=on(backend, DENY_IN_DRA_ONLY))
    unchecked = f"isIP({NET}.ip)"
    response = answer(
        harness, claim(request(exactly=exactly(unchecked, count=64)), namespace="gpu-e2e")
    )
    assert response["allowed"] is True, response
    (warning,) = response["warnings"]
    assert "not checked: isIP() is not supported" in warning
    # The same count without the unchecked selector is still found unsatisfiable.
    denied = answer(harness, claim(request(exactly=exactly(H100, count=64)), namespace="gpu-e2e"))
    assert denied["allowed"] is False
    assert "asks for 64 devices, 4 can match" in denied["status"]["message"]
