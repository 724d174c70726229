"""Numbers past Python's int-from-string limit (4,300 digits) are bad input, never a crash.

`int("9" * 4301)` raises a plain ValueError; anywhere user input reaches such a conversion, the
answer must be the parser's own error (a denial with the path), not an internal error that
`failure.internalError: open` would turn into an admission.
"""

from __future__ import annotations

import pytest

from app.cel.engine import BACKENDS, Engine, Environment
from app.cel.errors import CelCompileError, CelEvalError
from app.cel.factory import get_engine
from app.cel.semver import SemverError, parse_semver
from app.k8s.quantity import QuantityError, parse_quantity
from tests.helpers import AppHarness, review

HUGE = "9" * 4301
ANY = Environment("test-any", (), None)


@pytest.fixture(params=BACKENDS)
def engine(request: pytest.FixtureRequest) -> Engine:
    return get_engine(request.param)


@pytest.mark.parametrize(
    "text",
    [HUGE, f"{HUGE}Gi", f"0.{HUGE}", f"1e{HUGE}", f"1E-{HUGE}", f"-{HUGE}m", f"1{'0' * 1000}"],
)
def test_a_quantity_with_too_many_digits_is_a_quantity_error(text: str) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(text)


def test_a_long_but_reasonable_quantity_still_parses() -> None:
    assert parse_quantity("1" + "0" * 300).value == 10**300
    assert str(parse_quantity("0" * 5000 + "2")) == "2"
    assert parse_quantity("1." + "0" * 5000) == parse_quantity("1")
    assert parse_quantity("1e-" + "0" * 100 + "3") == parse_quantity("1m")


@pytest.mark.parametrize(
    "text",
    [f"{HUGE}.0.0", f"1.{HUGE}.0", f"1.0.{HUGE}", f"1.0.0-{HUGE}", "1.0.0-18446744073709551616"],
)
def test_a_semver_with_too_many_digits_is_a_semver_error(text: str) -> None:
    with pytest.raises(SemverError):
        parse_semver(text)
    with pytest.raises(SemverError):
        parse_semver("v" + text, normalize=True)


@pytest.mark.parametrize(
    "expression",
    [
        f'quantity("{HUGE}").isInteger()',
        f'semver("{HUGE}.0.0").major() == 1',
        f'quantity("1").isLessThan(quantity("{HUGE}"))',
    ],
)
def test_a_huge_literal_in_a_library_call_is_an_expression_error(
    engine: Engine, expression: str
) -> None:
    with pytest.raises((CelCompileError, CelEvalError)):
        engine.compile(expression, ANY).evaluate(engine.activation(ANY, {}))


def test_is_quantity_of_a_huge_literal_is_false(engine: Engine) -> None:
    program = engine.compile(f'isQuantity("{HUGE}") || isSemver("{HUGE}.0.0")', ANY)
    assert program.evaluate(engine.activation(ANY, {})) is False


@pytest.mark.parametrize("literal", [HUGE, f"{HUGE}u", f"-{HUGE}", f"0x{'f' * 4301}"])
def test_a_huge_cel_number_literal_does_not_compile(engine: Engine, literal: str) -> None:
    with pytest.raises(CelCompileError):
        engine.compile(f"{literal} > 0", ANY)


@pytest.mark.parametrize(
    ("namespace", "endpoint"), [("gpu-e2e", "validate"), ("ml-research", "mutate")]
)
def test_a_legacy_request_of_4301_digits_is_denied_with_its_path(
    app: AppHarness, namespace: str, endpoint: str
) -> None:
    body = review("pod-create-legacy-gpu", namespace=namespace)
    resources = body["request"]["object"]["spec"]["containers"][0]["resources"]
    resources["limits"]["nvidia.com/gpu"] = HUGE
    resources["requests"]["nvidia.com/gpu"] = HUGE
    answer = app.answer(endpoint, body)
    assert answer["allowed"] is False, answer
    assert "spec.containers[0].resources.limits[nvidia.com/gpu]" in answer["status"]["message"]
