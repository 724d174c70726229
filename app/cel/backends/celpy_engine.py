"""The ``cel-python`` backend (``celpy``, pure Python), with the Kubernetes library bound.

celpy parses with Lark and evaluates by walking the tree; it has no type checker, no bindings
or optional extension, and resolves functions by name only. So this module:

- reports syntax errors with their position, refuses unknown ``device`` fields and calls to
  functions no library defines, and leaves type errors to evaluation;
- expands ``cel.bind(v, init, body)`` into ``[init].map(v, body)[0]`` (the same value);
- dispatches every library function on the Python types of its arguments
  (:func:`app.cel.library.dispatch`), methods and global functions alike;
- wraps Quantity and Semver values so ``==`` works and ``<`` does not, as in Kubernetes;
- gives ``device.attributes``/``device.capacity`` a default of an empty map for unknown domains.

Not available here (use the default backend): ``sets.*``, ``strings.quote``, optional values,
two-variable comprehensions.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, Final

import celpy
from celpy import celtypes
from celpy.celparser import CELParseError
from celpy.evaluation import CELEvalError

from app.cel import syntax
from app.cel.device import Device
from app.cel.engine import Engine, Environment, Program
from app.cel.errors import CelCompileError, CelEvalError
from app.cel.library import (
    KUBERNETES_OVERLOADS,
    STRING_OVERLOADS,
    LibraryError,
    check_constant_patterns,
    dispatch,
    regex_matches,
)
from app.cel.semver import Semver
from app.k8s.quantity import Quantity

__all__ = ["CelPyEngine"]

# celpy logs every evaluation step at DEBUG; keep it quiet whatever the root level is.
logging.getLogger("celpy").setLevel(logging.WARNING)

_MACROS: Final = frozenset(
    {"has", "all", "exists", "exists_one", "map", "filter", "dyn", "reduce", "min", "bind"}
)


class _Opaque:
    """A Kubernetes library value inside celpy: equality by value, no ordering, no arithmetic."""

    __slots__ = ("value",)

    def __init__(self, value: Quantity | Semver) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        if isinstance(other, _Opaque) and type(other.value) is type(self.value):
            return bool(self.value == other.value)
        raise TypeError("no such overload")

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    def __hash__(self) -> int:
        return hash(self.value)

    def __repr__(self) -> str:
        return repr(self.value)


class _DefaultEmptyMap(celtypes.MapType):
    """``device.attributes`` and ``device.capacity``: an unknown domain is an empty map."""

    def __missing__(self, key: Any) -> Any:
        return celtypes.MapType()


class _String(celtypes.StringType):
    """A string value from outside: not iterable, so a macro over it (``s.exists(c, ...)``) is an
    evaluation error, as in cel-go, instead of a loop over its characters."""

    def __iter__(self) -> Any:
        raise TypeError("no such overload: a string is not a list or map to iterate over")


def _to_python(value: Any) -> Any:
    if isinstance(value, _Opaque):
        return value.value
    if isinstance(value, celtypes.BoolType):
        return bool(value)
    if isinstance(value, celtypes.IntType | celtypes.UintType):
        return int(value)
    if isinstance(value, celtypes.DoubleType):
        return float(value)
    if isinstance(value, celtypes.StringType):
        return str(value)
    if isinstance(value, celtypes.ListType | list | tuple):
        return [_to_python(v) for v in value]
    if isinstance(value, celtypes.MapType | dict):
        return {_to_python(k): _to_python(v) for k, v in value.items()}
    return value


def _to_cel(value: Any) -> Any:
    if isinstance(value, Quantity | Semver):
        return _Opaque(value)
    if isinstance(value, bool):
        return celtypes.BoolType(value)
    if isinstance(value, int):
        return celtypes.IntType(value)
    if isinstance(value, float):
        return celtypes.DoubleType(value)
    if isinstance(value, str):
        return _String(value)
    if value is None:
        return None
    if isinstance(value, list | tuple):
        return celtypes.ListType([_to_cel(v) for v in value])
    if isinstance(value, Mapping):
        return celtypes.MapType({_to_cel(k): _to_cel(v) for k, v in value.items()})
    return value


def _bound(name: str) -> Callable[..., Any]:
    overloads = [o for o in (*KUBERNETES_OVERLOADS, *STRING_OVERLOADS) if o.name == name]

    def call(*args: Any) -> Any:
        try:
            return _to_cel(dispatch(overloads, [_to_python(a) for a in args]))
        except LibraryError as error:
            return CELEvalError(str(error))

    return call


def _identity(value: Any) -> Any:
    return value


def _matches(text: Any, pattern: Any) -> Any:
    """CEL ``matches`` in RE2 (celpy's own uses Python's backtracking ``re``)."""
    if not isinstance(text, str) or not isinstance(pattern, str):
        return CELEvalError("no such overload: matches")
    try:
        return celtypes.BoolType(regex_matches(str(text), str(pattern)))
    except LibraryError as error:
        return CELEvalError(str(error))


_NUMBERS: Final = (celtypes.IntType, celtypes.UintType, celtypes.DoubleType)


def _cross_numeric(operator: str) -> Callable[[Any, Any], Any]:
    """Kubernetes enables cross-type numeric comparisons (``1 < 2.5``); celpy does not."""
    base = celpy.evaluation.base_functions[operator]
    compare: Callable[[Any, Any], bool] = {
        "_<_": lambda a, b: a < b,
        "_<=_": lambda a, b: a <= b,
        "_>_": lambda a, b: a > b,
        "_>=_": lambda a, b: a >= b,
    }[operator]

    def relation(left: Any, right: Any) -> Any:
        if (
            isinstance(left, _NUMBERS)
            and isinstance(right, _NUMBERS)
            and type(left) is not type(right)
        ):
            return celtypes.BoolType(compare(_to_python(left), _to_python(right)))
        return base(left, right)

    return relation


class _CelPyProgram(Program):
    def __init__(self, expression: str, environment: Environment, runner: celpy.Runner) -> None:
        self.expression = expression
        self.environment = environment
        self.output_type = "dyn"
        self._runner = runner

    def evaluate(self, activation: Any) -> Any:
        try:
            result = self._runner.evaluate(activation)
        except CELEvalError as error:
            raise CelEvalError(_message(error)) from None
        except (TypeError, ValueError, KeyError, IndexError, ZeroDivisionError) as error:
            raise CelEvalError(str(error)) from None
        if isinstance(result, CELEvalError):
            raise CelEvalError(_message(result))
        value = _to_python(result)
        wanted = self.environment.result
        if wanted is not None and type(value) is not {"bool": bool, "string": str}[wanted]:
            raise CelEvalError(f"must evaluate to {wanted}, not {type(value).__name__}")
        return value


def _message(error: CELEvalError) -> str:
    return str(error.args[0]) if error.args else str(error)


class CelPyEngine(Engine):
    """celpy with the Kubernetes library; see the module docstring."""

    name = "cel-python"
    checks_types = False

    def __init__(self) -> None:
        self._env = celpy.Environment()
        names = {o.name for o in (*KUBERNETES_OVERLOADS, *STRING_OVERLOADS)}
        self._functions: dict[str, Callable[..., Any]] = {name: _bound(name) for name in names}
        self._functions["dyn"] = _identity
        self._functions["matches"] = _matches
        for operator in ("_<_", "_<=_", "_>_", "_>=_"):
            self._functions[operator] = _cross_numeric(operator)
        self._known = frozenset(names) | frozenset(celpy.evaluation.base_functions) | _MACROS

    def compile(self, expression: str, environment: Environment) -> Program:
        try:
            self._env.compile(expression)
        except CELParseError as error:
            line = getattr(error, "line", None)
            column = getattr(error, "column", None)
            offset = None
            if line is not None and column is not None:
                offset = syntax.offset(expression, line, column)
            message = "Syntax error: unexpected input"
            raise CelCompileError(
                expression, message, line=line, column=column, offset=offset
            ) from None
        literal = syntax.number_out_of_range(expression)
        if literal is not None:
            line, column = syntax.position(expression, literal.start)
            raise CelCompileError(
                expression,
                "invalid int literal (out of range)",
                line=line,
                column=column,
                offset=literal.start,
            )
        if environment.device:
            unknown = syntax.unknown_device_field(syntax.device_paths(expression))
            if unknown is not None:
                name, offset = unknown
                line, column = syntax.position(expression, offset)
                raise CelCompileError(
                    expression, f"undefined field '{name}'", line=line, column=column, offset=offset
                )
        self._check_functions(expression)
        check_constant_patterns(expression)
        runnable = syntax.expand_bind(expression)
        try:
            runner = self._env.program(self._env.compile(runnable), functions=self._functions)
        except CELParseError as error:  # pragma: no cover - the original parsed
            raise CelCompileError(expression, str(error)) from None
        return _CelPyProgram(expression, environment, runner)

    def _check_functions(self, expression: str) -> None:
        tokens = syntax.tokenize(expression)
        for i, token in enumerate(tokens[:-1]):
            if token.kind != "ident" or token.text == "in" or tokens[i + 1].text != "(":
                continue  # `x in (...)` is the operator, not a call
            if i >= 2 and tokens[i - 1].text == "." and tokens[i - 2].text == "cel":
                continue
            if token.text not in self._known:
                line, column = syntax.position(expression, tokens[i + 1].start)
                raise CelCompileError(
                    expression,
                    f"undeclared reference to '{token.text}'",
                    line=line,
                    column=column,
                    offset=tokens[i + 1].start,
                )

    def activation(self, environment: Environment, variables: Mapping[str, Any]) -> Any:
        return {name: _to_cel(value) for name, value in variables.items()}

    def device_activation(self, device: Device) -> Any:
        value = celtypes.MapType(
            {
                celtypes.StringType("driver"): celtypes.StringType(device.driver),
                celtypes.StringType("attributes"): _DefaultEmptyMap(
                    {celtypes.StringType(k): _to_cel(v) for k, v in device.attributes.items()}
                ),
                celtypes.StringType("capacity"): _DefaultEmptyMap(
                    {celtypes.StringType(k): _to_cel(v) for k, v in device.capacity.items()}
                ),
                celtypes.StringType("allowMultipleAllocations"): celtypes.BoolType(
                    device.allow_multiple_allocations
                ),
            }
        )
        return {"device": value}
