"""Strings from outside (objects, device attributes) stay strings, whatever bytes they hold.

cel-expr-python carries quantities and semvers through evaluation as tagged strings; a string
that merely looks like one must never be read as one, nor fail to decode outside of CEL.
"""

from __future__ import annotations

from typing import Any

import pytest

from app.cel.device import devices_of_slice
from app.cel.engine import ADMISSION, ADMISSION_MESSAGE, SELECTOR, Engine, Environment
from app.cel.errors import CelEvalError
from tests.cel.objects import GPU_SLICE

ANY = Environment("test-user-strings", ("object",), None)

LOOK_ALIKES = [
    "\x01k8s.q\x02oops",
    "\x01k8s.q\x021/1",
    "\x01k8s.v\x021.2.3",
    "\x01k8s.q.0123456789abcdef\x021/1",
    "\x01",
]


def run(engine: Engine, environment: Environment, expression: str, obj: Any) -> Any:
    variables = {"object": obj}
    if environment is not ANY:
        variables |= {"oldObject": None, "request": {}, "namespaceObject": None, "params": None}
    program = engine.compile(expression, environment)
    return program.evaluate(engine.activation(environment, variables))


@pytest.mark.parametrize("text", LOOK_ALIKES)
def test_a_look_alike_string_is_returned_as_the_same_string(engine: Engine, text: str) -> None:
    assert run(engine, ANY, "object.s", {"s": text}) == text
    message = run(engine, ADMISSION_MESSAGE, 'object.s + " must add a team label"', {"s": text})
    assert message == f"{text} must add a team label"


@pytest.mark.parametrize("text", LOOK_ALIKES)
def test_a_look_alike_string_is_not_a_quantity(engine: Engine, text: str) -> None:
    with pytest.raises(CelEvalError):
        run(engine, ADMISSION, 'quantity("1").compareTo(object.s) == 0', {"s": text})
    assert run(engine, ADMISSION, "isQuantity(object.s)", {"s": text}) is False


@pytest.mark.parametrize("text", LOOK_ALIKES)
def test_a_look_alike_device_attribute_is_compared_as_text(engine: Engine, text: str) -> None:
    device_slice = {**GPU_SLICE, "spec": {**GPU_SLICE["spec"]}}
    device_slice["spec"]["devices"] = [{"name": "gpu-0", "attributes": {"model": {"string": text}}}]
    device = next(devices_of_slice(device_slice))
    activation = engine.device_activation(device)
    literal = text.encode("unicode_escape").decode().replace('"', '\\"')
    same = engine.compile(f'device.attributes["gpu.nvidia.com"].model == "{literal}"', SELECTOR)
    assert same.evaluate(activation) is True


def test_a_quantity_joined_into_a_string_is_an_evaluation_error_not_a_leak(
    engine: Engine,
) -> None:
    with pytest.raises(CelEvalError) as raised:
        run(engine, ADMISSION_MESSAGE, 'dyn(quantity("1")) + "x"', {})
    assert "\x01" not in raised.value.message
