"""The ``cel-expr-python`` backend (cel-cpp), with the Kubernetes library bound.

cel-expr-python cannot carry a Python object through evaluation, and a function whose parameter
is an abstract type cannot be bound at run time. So each environment exists twice:

- a *checker* environment that declares the Kubernetes types (``kubernetes.Quantity``,
  ``kubernetes.Semver``, the DRA device paths through typed placeholders, see
  :func:`app.cel.syntax.typed_for_checker`) and is only ever used to type-check;
- a *runtime* environment where a Quantity or Semver travels as a tagged string whose text is a
  canonical form of its value (so CEL ``==`` is value equality), the library functions decode the
  tag, and the expression is compiled unchecked, after the type checker accepted it.

A tagged string is still a string to the runtime: ``<`` or ``+`` on one is only refused by the
type checker, which sees the real types wherever the expression spells them (a version read
through ``device.attributes`` is ``dyn`` in Kubernetes too, there ``attr > "1.0.0"`` is a runtime
error and here it compares text; either way the device does not match).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from cel_expr_python import cel

from app.cel import syntax
from app.cel.backends.cel_expr_values import (
    COMPARISONS,
    NOT_A_STRING,
    TAG_KEY,
    comparison,
    decode,
    encode,
    scrub,
)
from app.cel.device import Device
from app.cel.engine import Engine, Environment, Program
from app.cel.errors import CelCompileError, CelEvalError
from app.cel.library import (
    BOOL,
    DOUBLE,
    DYN,
    INT,
    KUBERNETES_OVERLOADS,
    LIST,
    LIST_STRING,
    QUANTITY,
    SEMVER,
    STRING,
    LibraryError,
    Overload,
    check_constant_patterns,
)
from app.cel.semver import Semver
from app.k8s.quantity import Quantity, QuantityError, parse_quantity

__all__ = ["CelExprEngine"]

# Extensions Kubernetes enables in its base environment that cel-cpp ships.
_CONFIG_YAML: Final = """
extensions:
  - name: "strings"
  - name: "bindings"
  - name: "optional"
  - name: "sets"
  - name: "two-var-comprehensions"
"""

_QUANTITY_TYPE: Final = cel.Type.AbstractType("kubernetes.Quantity")
_SEMVER_TYPE: Final = cel.Type.AbstractType("kubernetes.Semver")
_CHECKER_TYPES: Final[dict[str, Any]] = {
    QUANTITY: _QUANTITY_TYPE,
    SEMVER: _SEMVER_TYPE,
    STRING: cel.Type.STRING,
    INT: cel.Type.INT,
    BOOL: cel.Type.BOOL,
    DOUBLE: cel.Type.DOUBLE,
    LIST: cel.Type.List(cel.Type.DYN),
    LIST_STRING: cel.Type.List(cel.Type.STRING),
    DYN: cel.Type.DYN,
}
_RUNTIME_KINDS: Final[dict[str, tuple[Any, ...]]] = {
    QUANTITY: (cel.Type.STRING,),
    SEMVER: (cel.Type.STRING,),
    STRING: (cel.Type.STRING,),
    INT: (cel.Type.INT,),
    BOOL: (cel.Type.BOOL,),
    DOUBLE: (cel.Type.DOUBLE,),
    LIST: (cel.Type.List(cel.Type.DYN),),
    LIST_STRING: (cel.Type.List(cel.Type.DYN),),
    DYN: (
        cel.Type.INT,
        cel.Type.UINT,
        cel.Type.DOUBLE,
        cel.Type.STRING,
        cel.Type.BOOL,
        cel.Type.List(cel.Type.DYN),
        cel.Type.Map(cel.Type.DYN, cel.Type.DYN),
    ),
}
_DEVICE_PLACEHOLDERS: Final[dict[str, Any]] = {
    syntax.PLACEHOLDER_DRIVER: cel.Type.STRING,
    syntax.PLACEHOLDER_MULTI: cel.Type.BOOL,
    syntax.PLACEHOLDER_ATTRIBUTES: cel.Type.Map(
        cel.Type.STRING, cel.Type.Map(cel.Type.STRING, cel.Type.DYN)
    ),
    syntax.PLACEHOLDER_ATTRIBUTE_DOMAIN: cel.Type.Map(cel.Type.STRING, cel.Type.DYN),
    syntax.PLACEHOLDER_ATTRIBUTE: cel.Type.DYN,
    syntax.PLACEHOLDER_CAPACITIES: cel.Type.Map(
        cel.Type.STRING, cel.Type.Map(cel.Type.STRING, _QUANTITY_TYPE)
    ),
    syntax.PLACEHOLDER_CAPACITY_DOMAIN: cel.Type.Map(cel.Type.STRING, _QUANTITY_TYPE),
    syntax.PLACEHOLDER_CAPACITY: _QUANTITY_TYPE,
}
# cel-cpp's strings extension owns these names and a function cannot be declared twice, so the
# Kubernetes list versions (``[1, 2].indexOf(2)``) are not available on this backend.
_SHADOWED_BY_STRINGS: Final = frozenset({"indexOf", "lastIndexOf"})
_OVERLOADS: Final = tuple(o for o in KUBERNETES_OVERLOADS if o.name not in _SHADOWED_BY_STRINGS)
_ERROR_RE: Final = re.compile(r"ERROR: <input>:(\d+):(\d+): ([^\n]*)")
# Kubernetes enables cross-type numeric comparisons (1 < 2.5); cel-cpp's checker does not, its
# runtime does. Such a checker complaint is not an error here.
_CROSS_NUMERIC_RE: Final = re.compile(
    r"found no matching overload for '_(?:<|<=|>|>=|==|!=)_' applied to "
    r"'\((?:int|uint|double), (?:int|uint|double)\)'"
)


def _runtime_impl(overloads: Sequence[Overload]) -> Callable[..., Any]:
    """One Python callable for all overloads sharing a runtime signature."""
    if overloads[0].name in COMPARISONS and all(len(o.params) == 2 for o in overloads):
        return comparison(overloads[0].name)
    if len(overloads) == 1 and not any(
        p in (QUANTITY, SEMVER, LIST, LIST_STRING, DYN) for p in overloads[0].params
    ):
        single = overloads[0].impl

        def call_plain(*args: Any) -> Any:
            try:
                return encode(single(*args))
            except LibraryError as error:
                raise ValueError(str(error)) from None

        return call_plain

    from app.cel.library import dispatch

    def call(*args: Any) -> Any:
        try:
            return encode(dispatch(overloads, [decode(a) for a in args]))
        except LibraryError as error:
            raise ValueError(str(error)) from None

    return call


def _runtime_signatures(overload: Overload) -> list[tuple[Any, ...]]:
    signatures: list[tuple[Any, ...]] = [()]
    for param in overload.params:
        signatures = [(*s, kind) for s in signatures for kind in _RUNTIME_KINDS[param]]
    return signatures


def _function_decls(checker: bool) -> list[Any]:
    by_name: dict[str, list[Any]] = {}
    if checker:
        for o in _OVERLOADS:
            params = [_CHECKER_TYPES[p] for p in o.params]
            by_name.setdefault(o.name, []).append(
                cel.Overload(o.id, _CHECKER_TYPES[o.result], params, is_member=o.member)
            )
    else:
        groups: dict[tuple[str, bool, tuple[str, ...]], list[Overload]] = {}
        kinds: dict[tuple[str, bool, tuple[str, ...]], tuple[Any, ...]] = {}
        for o in _OVERLOADS:
            for signature in _runtime_signatures(o):
                key = (o.name, o.member, tuple(t.name() for t in signature))
                groups.setdefault(key, []).append(o)
                kinds[key] = signature
        for key, overloads in groups.items():
            name, member, names = key
            overload_id = f"rt_{name}_{'m' if member else 'g'}_{'_'.join(names)}"
            by_name.setdefault(name, []).append(
                cel.Overload(
                    overload_id,
                    cel.Type.DYN,
                    list(kinds[key]),
                    is_member=member,
                    impl=_runtime_impl(overloads),
                )
            )
    return [cel.FunctionDecl(name, decls) for name, decls in by_name.items()]


_RESULT_TYPES: Final[dict[str, type]] = {"bool": bool, "string": str}


class _CelExprProgram(Program):
    __slots__ = ("_expression", "environment", "expression", "output_type")

    def __init__(
        self, expression: str, environment: Environment, output_type: str, compiled: Any
    ) -> None:
        self.expression = expression
        self.environment = environment
        self.output_type = output_type
        self._expression = compiled

    def evaluate(self, activation: Any) -> Any:
        try:
            result = self._expression.eval(activation)
        except RuntimeError as error:
            raise CelEvalError(scrub(str(error))) from None
        value = result.value()
        if value is True or value is False:
            return value
        if result.type() == cel.Type.ERROR:
            raise CelEvalError(scrub(str(value)))
        try:
            value = decode(value if isinstance(value, int | float | str) else result.plain_value())
        except ValueError as error:
            raise CelEvalError(scrub(str(error))) from None
        if isinstance(value, str) and TAG_KEY in value:
            # A quantity or semver joined into a string (`dyn(quantity("1")) + "x"`): Kubernetes
            # has no such overload.
            raise CelEvalError(NOT_A_STRING)
        wanted = self.environment.result
        if wanted is not None and type(value) is not _RESULT_TYPES[wanted]:
            raise CelEvalError(f"must evaluate to {wanted}, not {type(value).__name__}")
        return value


class _Envs:
    """The checker and runtime cel-cpp environments of one :class:`Environment`."""

    def __init__(self, environment: Environment) -> None:
        variables = {name: cel.Type.DYN for name in environment.variables}
        checker_variables = dict(variables)
        if environment.device:
            checker_variables.update(_DEVICE_PLACEHOLDERS)
        self.checker = cel.NewEnv(
            config=cel.NewEnvConfigFromYaml(_CONFIG_YAML),
            variables=checker_variables,
            functions=_function_decls(checker=True),
        )
        self.runtime = cel.NewEnv(
            config=cel.NewEnvConfigFromYaml(_CONFIG_YAML),
            variables=variables,
            functions=_function_decls(checker=False),
        )


class CelExprEngine(Engine):
    """cel-expr-python with the Kubernetes library; see the module docstring for the design."""

    name = "cel-expr-python"
    checks_types = True

    def __init__(self) -> None:
        self._envs: dict[Environment, _Envs] = {}
        self._lock = threading.Lock()

    def _environment(self, environment: Environment) -> _Envs:
        envs = self._envs.get(environment)
        if envs is None:
            with self._lock:
                envs = self._envs.get(environment)
                if envs is None:
                    envs = _Envs(environment)
                    self._envs[environment] = envs
        return envs

    def compile(self, expression: str, environment: Environment) -> Program:
        envs = self._environment(environment)
        check_text = run_text = expression
        if environment.device:
            paths = syntax.device_paths(expression)
            unknown = syntax.unknown_device_field(paths)
            if unknown is not None:
                name, offset = unknown
                line, column = syntax.position(expression, offset)
                raise CelCompileError(
                    expression,
                    f"undefined field '{name}'",
                    line=line,
                    column=column,
                    offset=offset,
                )
            check_text = syntax.typed_for_checker(expression, paths)
            run_text = syntax.optional_domains(expression, paths)
        run_text = _fold_is_integer(run_text)
        run_text = syntax.fold_constructors(run_text, _folded_literal)
        check_constant_patterns(expression)
        output_type = self._check(expression, check_text, envs, environment)
        try:
            compiled = envs.runtime.compile(run_text, disable_check=True)
        except RuntimeError as error:  # pragma: no cover - the checker accepted it
            raise _compile_error(expression, str(error)) from None
        return _CelExprProgram(expression, environment, output_type, compiled)

    def _check(
        self, expression: str, check_text: str, envs: _Envs, environment: Environment
    ) -> str:
        try:
            checked = envs.checker.compile(check_text)
        except RuntimeError as error:
            message = str(error)
            errors = _ERROR_RE.findall(message)
            if errors and all(_CROSS_NUMERIC_RE.search(text) for _, _, text in errors):
                return "dyn"
            raise _compile_error(expression, message) from None
        output = checked.return_type()
        name = str(output.name())
        output_type = (
            "dyn" if output == cel.Type.DYN else (name.lower() if name.isupper() else name)
        )
        wanted = environment.result
        if wanted is not None and output_type not in (wanted, "dyn"):
            raise CelCompileError(
                expression,
                f"must evaluate to {wanted} or the unknown type, not {output_type}",
            )
        return output_type

    def activation(self, environment: Environment, variables: Mapping[str, Any]) -> Any:
        data = {
            name: encode(value) if isinstance(value, Quantity | Semver) else value
            for name, value in variables.items()
        }
        return self._environment(environment).runtime.Activation(data)

    def device_activation(self, device: Device) -> Any:
        from app.cel.engine import SELECTOR

        value = {
            "driver": device.driver,
            "attributes": encode(device.attributes),
            "capacity": encode(device.capacity),
            "allowMultipleAllocations": device.allow_multiple_allocations,
        }
        return self._environment(SELECTOR).runtime.Activation({"device": value})


def _folded_literal(function: str, argument: str) -> str | None:
    """``quantity("40Gi")`` as the CEL string literal of its runtime value (None: leave it)."""
    try:
        value = _quantity_or_semver(function, argument)
    except LibraryError:
        return None
    encoded = str(encode(value))
    return '"' + encoded.replace("\x01", "\\x01").replace("\x02", "\\x02") + '"'


def _fold_is_integer(text: str) -> str:
    """``quantity("1000m").isInteger()`` as ``false``: the answer depends on how the quantity is
    written (Kubernetes' AsInt64 fails for a negative scale), which a tagged runtime value, equal
    by value, cannot carry. Literal receivers are answered here, at compile time."""
    tokens = syntax.tokenize(text)
    edits = []
    for i in range(len(tokens) - 7):
        window = [t.text for t in tokens[i : i + 8]]
        if (
            tokens[i].kind == "ident"
            and window[0] == "quantity"
            and (i == 0 or tokens[i - 1].text != ".")
            and window[1] == "("
            and tokens[i + 2].kind == "string"
            and window[3:] == [")", ".", "isInteger", "(", ")"]
        ):
            literal = syntax.string_value(tokens[i + 2].text)
            try:
                quantity = parse_quantity(literal) if literal is not None else None
            except QuantityError:
                quantity = None
            if quantity is not None:
                answer = "true" if quantity.k8s_is_integer() else "false"
                edits.append((tokens[i].start, tokens[i + 7].end, answer))
    for start, end, answer in reversed(edits):
        text = text[:start] + answer.ljust(end - start) + text[end:]
    return text


def _quantity_or_semver(function: str, argument: str) -> Quantity | Semver:
    for overload in KUBERNETES_OVERLOADS:
        if overload.name == function and overload.params == (STRING,):
            result = overload.impl(argument)
            assert isinstance(result, Quantity | Semver)
            return result
    raise LibraryError(function)


def _compile_error(expression: str, message: str) -> CelCompileError:
    match = _ERROR_RE.search(message)
    if match is None:
        text = message.removeprefix("INVALID_ARGUMENT: ").split(" [", 1)[0].strip()
        return CelCompileError(expression, text)
    line, column = int(match.group(1)), int(match.group(2))
    offset = syntax.offset(expression, line, column)
    line, column = syntax.position(expression, offset)
    return CelCompileError(
        expression, match.group(3).strip(), line=line, column=column, offset=offset
    )
