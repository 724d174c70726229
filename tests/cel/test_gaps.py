"""engine_gap: which compile errors are a gap of this webhook's engines, not the expression's,
read from each backend's own error (cel-expr-python names an unknown namespace, `math`;
cel-python the function under it, `greatest`)."""

from __future__ import annotations

import pytest

from app.cel.engine import SELECTOR, Engine
from app.cel.errors import CelCompileError
from app.cel.gaps import engine_gap


def _gap(engine: Engine, expression: str) -> str | None:
    try:
        engine.compile(expression, SELECTOR)
    except CelCompileError as error:
        return engine_gap(error)
    pytest.skip(f"{expression!r} compiles on this backend: nothing to tell apart")


@pytest.mark.parametrize(
    ("expression", "gaps"),
    [
        ('isIP(device.attributes["net.example.com"].addr)', {"isIP()"}),
        ('cidr("10.0.0.0/8").containsIP("10.1.2.3")', {"cidr()"}),
        ('format.dns1123Label().validate("x").hasValue()', {"format.*", "format.dns1123Label()"}),
        ("math.greatest(1, 2) == 2", {"math.*", "math.greatest()"}),
        ("[1, 2].sort() == [1, 2]", {".sort()"}),
        ('device.attributes["x.y"].?z.orValue(1) == 1', {"optional selection (.? and [?)"}),
    ],
)
def test_a_function_kubernetes_declares_and_the_engine_lacks_is_a_gap(
    engine: Engine, expression: str, gaps: set[str]
) -> None:
    assert _gap(engine, expression) in gaps


@pytest.mark.parametrize(
    "expression",
    [
        'device.driver == "gpu.nvidia.com" &&',
        "noSuchFunction(device.driver)",
        'device.capacity["gpu.nvidia.com"].memory >= "40Gi"',
    ],
    ids=["syntax", "unknown-to-kubernetes-too", "type-mismatch"],
)
def test_an_error_of_the_expression_itself_is_not_a_gap(engine: Engine, expression: str) -> None:
    assert _gap(engine, expression) is None
