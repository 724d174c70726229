"""The wording of CEL compile errors."""

from __future__ import annotations

from app.cel.errors import CelCompileError, does_not_compile


def test_a_compile_error_is_worded_with_its_position_message_and_expression() -> None:
    error = CelCompileError("device.nope", "undefined field 'nope'", line=1, column=7, offset=6)
    assert does_not_compile(error, "device.nope") == (
        "does not compile at 1:7: undefined field 'nope': 'device.nope'"
    )


def test_a_compile_error_without_a_position_is_worded_without_one() -> None:
    error = CelCompileError("1 +", "Syntax error")
    assert does_not_compile(error, "1 +") == "does not compile: Syntax error: '1 +'"
