"""Which selectors are string comparisons answered without CEL, and their answers."""

from __future__ import annotations

import pytest

from app.devices.columns import MISSING
from app.devices.literals import Comparison, comparison, decide

UUID = ("attributes", "gpu.nvidia.com", "uuid")


@pytest.mark.parametrize(
    ("text", "negated", "literals"),
    [
        ('device.attributes["gpu.nvidia.com"].uuid == "GPU-1"', False, {"GPU-1"}),
        ('"GPU-1" != device.attributes["gpu.nvidia.com"].uuid', True, {"GPU-1"}),
        ("device.attributes['gpu.nvidia.com']['uuid'] == 'GPU-1'", False, {"GPU-1"}),
        ('device.attributes["gpu.nvidia.com"].uuid in ["a", "b"]', False, {"a", "b"}),
    ],
)
def test_string_comparisons_are_recognized(text: str, negated: bool, literals: set[str]) -> None:
    assert comparison(text) == Comparison(UUID, negated, frozenset(literals))


@pytest.mark.parametrize(
    "text",
    [
        'device.attributes["gpu.nvidia.com"].uuid.startsWith("GPU")',
        'device.attributes["gpu.nvidia.com"].uuid == "a" || true',
        '(device.attributes["gpu.nvidia.com"].uuid == "a")',
        'device.attributes["gpu.nvidia.com"].uuid == b"a"',
        'device.attributes["gpu.nvidia.com"].uuid == "a\\?"',  # escapes: the backend's own
        'device.attributes["gpu.nvidia.com"].index == 1',
        'device.capacity["gpu.nvidia.com"].memory == "80Gi"',
        'device.attributes["gpu.nvidia.com"].uuid == device.attributes["gpu.nvidia.com"].x',
        'device.attributes["gpu.nvidia.com"].uuid in []',
        'device.attributes["gpu.nvidia.com"].uuid in ["a", 1]',
        'has(device.attributes["gpu.nvidia.com"].uuid)',
        'device.driver == "gpu.nvidia.com"',
    ],
)
def test_anything_else_is_left_to_cel(text: str) -> None:
    assert comparison(text) is None


def test_a_value_that_is_not_a_string_is_left_to_cel() -> None:
    equal = ((0, Comparison(UUID, False, frozenset({"a"}))),)
    assert decide(equal, ((str, "a"),)) is True
    assert decide(equal, ((str, "b"),)) is False
    assert decide(equal, (MISSING,)) is None
    assert decide(equal, ((int, 1),)) is None
    both = ((0, Comparison(UUID, True, frozenset({"a"}))), (1, equal[0][1]))
    assert decide(both, ((str, "a"), MISSING)) is False  # the first is false: CEL stops there
    assert decide(both, ((str, "b"), MISSING)) is None
