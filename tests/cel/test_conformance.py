"""One table of DRA selector expressions, run on both backends with the same expectations.

``TYPE_ERROR`` marks an expression Kubernetes rejects when it type-checks: the default backend
rejects it at compile time too; the pure-Python backend, which has no checker, at evaluation.
"""

from __future__ import annotations

from typing import Any

import pytest

from app.cel.device import Device
from app.cel.engine import SELECTOR, Engine
from app.cel.errors import CelCompileError, CelError, CelEvalError

TYPE_ERROR = object()

CASES: list[tuple[str, Any]] = [
    ('device.capacity["gpu.nvidia.com"].memory.isGreaterThan(quantity("40Gi"))', True),
    ('device.capacity["gpu.nvidia.com"].memory.isGreaterThan(quantity("200Gi"))', False),
    ('device.attributes["gpu.nvidia.com"].profile == "1g.10gb"', True),
    (
        'device.driver == "gpu.nvidia.com" && device.attributes["gpu.nvidia.com"].model == "H100"',
        True,
    ),
    ('device.capacity["gpu.example.com"].memory.compareTo(quantity("40Gi")) >= 0', True),
    ('device.capacity["gpu.example.com"].memory.isLessThan(quantity("48Gi"))', False),
    ('device.capacity["gpu.nvidia.com"].memory == quantity("80Gi")', True),
    ('device.capacity["gpu.nvidia.com"].memory == quantity("85899345920")', True),
    ('device.attributes["gpu.nvidia.com"].driverVersion.isGreaterThan(semver("535.104.5"))', True),
    ('device.attributes["gpu.nvidia.com"].driverVersion.compareTo(semver("550.54.15")) == 0', True),
    (
        'device.attributes["gpu.nvidia.com"].driverVersion.isLessThan(semver("v550.54", true))',
        False,
    ),
    ('device.attributes["gpu.nvidia.com"].driverVersion == semver("550.54.15")', True),
    ('device.attributes["gpu.nvidia.com"].driverVersion.major() == 550', True),
    ('device.attributes["gpu.example.com"].healthy', True),
    ('device.attributes["gpu.nvidia.com"].index < 2.5', True),
    ("device.allowMultipleAllocations == false", True),
    ('"x" in device.attributes["nope.example"]', False),
    ('device.attributes["nope.example"].size() == 0', True),
    ('device.capacity["nope.example"].size() == 0', True),
    ('has(device.attributes["gpu.nvidia.com"].model)', True),
    ('device.attributes["gpu.nvidia.com"].exists(name, name == "model")', True),
    (
        'cel.bind(gpu, device.attributes["gpu.nvidia.com"], gpu.model == "H100" && gpu.index == 0)',
        True,
    ),
    ('device.attributes["gpu.nvidia.com"].model.lowerAscii() == "h100"', True),
    ('device.attributes["gpu.nvidia.com"].profile.split(".")[0] == "1g"', True),
    ('device.attributes["gpu.nvidia.com"].model.matches("^H[0-9]+$")', True),
    ('"gpu-17".find("[0-9]+") == "17"', True),
    ('"ab-cd".indexOf("-") == 2 && "a b".replace(" ", "_") == "a_b"', True),
    ('["a", "b"].join("/") == "a/b" && "  x ".trim() == "x" && "Ab".upperAscii() == "AB"', True),
    (
        "[1, 2, 3].isSorted() && [3, 1, 2].min() == 1 && [1, 2].max() == 2 && [1, 2].sum() == 3",
        True,
    ),
    ('semver("v01.01", true) == semver("1.1.0")', True),
    ('quantity("1.5Gi") == quantity("1536Mi") && quantity("200M") == quantity("0.2G")', True),
    ('device.attributes["gpu.nvidia.com"].nope == "x"', CelEvalError),
    ('quantity("200K").sign() == 1', CelEvalError),
    ('semver("v1.0.0").major() == 1', CelEvalError),
    ("1 / 0 == 1", CelEvalError),
    ('device.capacity["gpu.nvidia.com"].memory >= "40Gi"', TYPE_ERROR),
    ('device.capacity["gpu.nvidia.com"].memory > quantity("40Gi")', TYPE_ERROR),
    ('quantity("40Gi")', TYPE_ERROR),
    ("device.driver", TYPE_ERROR),
    ("device.foo == 1", CelCompileError),
    ("device.driver ==", CelCompileError),
    ("undefinedFunction(device.driver)", CelCompileError),
]


@pytest.mark.parametrize(("expression", "expected"), CASES, ids=[c[0] for c in CASES])
def test_selector_gives_the_kubernetes_result_on_every_backend(
    engine: Engine, gpu: Device, expression: str, expected: Any
) -> None:
    if expected is TYPE_ERROR:
        expected = CelCompileError if engine.checks_types else CelEvalError
    if isinstance(expected, type) and issubclass(expected, CelError):
        with pytest.raises(expected):
            engine.compile(expression, SELECTOR).evaluate(engine.device_activation(gpu))
        return
    program = engine.compile(expression, SELECTOR)
    assert program.evaluate(engine.device_activation(gpu)) is expected


def test_compile_error_reports_line_column_and_offset(engine: Engine) -> None:
    expression = 'device.driver == "a" &&\n  device.foo'
    with pytest.raises(CelCompileError) as caught:
        engine.compile(expression, SELECTOR)
    error = caught.value
    assert (error.line, error.column, error.offset) == (2, 10, 33)
    assert "foo" in error.message
    assert error.snippet().endswith(".........^")


def test_syntax_error_position_points_into_the_expression(engine: Engine) -> None:
    with pytest.raises(CelCompileError) as caught:
        engine.compile('device.driver == "a" &&', SELECTOR)
    assert caught.value.line == 1
    assert caught.value.column is not None and caught.value.column >= 22


@pytest.mark.parametrize("macro", ["exists", "all", "exists_one"])
def test_a_macro_over_a_string_attribute_is_an_evaluation_error(
    engine: Engine, gpu: Device, macro: str
) -> None:
    program = engine.compile(
        f'device.attributes["gpu.nvidia.com"].model.{macro}(c, c == "H")', SELECTOR
    )
    with pytest.raises(CelEvalError):
        program.evaluate(engine.device_activation(gpu))
