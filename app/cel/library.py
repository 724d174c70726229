"""The Kubernetes CEL library, once, in plain Python; the backends bind it.

What Kubernetes adds to CEL for DRA selectors and admission policies and the Python CEL packages
lack: ``quantity()``/``isQuantity()`` and the Quantity methods, ``semver()``/``isSemver()`` and
the Semver methods (k8s.io/apiserver/pkg/cel/library ``quantity.go``, ``semver.go``), the
Kubernetes list functions (``lists.go``: ``isSorted``, ``sum``, ``min``, ``max``, ``indexOf``,
``lastIndexOf``) and the regex functions (``regex.go``: ``find``, ``findAll``). The strings
extension is also written out here for the backend that has none (:data:`STRING_OVERLOADS`).

Every function is declared as :class:`Overload` rows with CEL parameter types, so a backend with
a type checker declares the exact signatures and a backend without one dispatches on the Python
types of the arguments (:func:`dispatch`). Implementations take and return plain Python values:
``str``, ``int``, ``float``, ``bool``, ``list``, :class:`~app.k8s.quantity.Quantity`,
:class:`~app.cel.semver.Semver`; they raise :class:`LibraryError` with the Kubernetes message.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from app.cel import syntax
from app.cel.errors import CelCompileError
from app.cel.semver import Semver, SemverError, parse_semver
from app.k8s.quantity import DECIMAL_EXPONENT, Quantity, QuantityError, parse_quantity
from app.regex import RegexError, user_pattern

__all__ = [
    "KUBERNETES_OVERLOADS",
    "STRING_OVERLOADS",
    "LibraryError",
    "Overload",
    "check_constant_patterns",
    "dispatch",
    "regex_matches",
]

# CEL parameter types used in the tables; "dyn" accepts anything.
QUANTITY: Final = "quantity"
SEMVER: Final = "semver"
STRING: Final = "string"
INT: Final = "int"
BOOL: Final = "bool"
DOUBLE: Final = "double"
LIST: Final = "list"
LIST_STRING: Final = "list_string"
DYN: Final = "dyn"


class LibraryError(ValueError):
    """A library function refused its arguments (the message is Kubernetes' where it has one)."""


@dataclass(frozen=True, slots=True)
class Overload:
    """One typed signature of a library function."""

    id: str
    name: str
    params: tuple[str, ...]
    result: str
    impl: Callable[..., Any]
    member: bool = True


def _matches(kind: str, value: Any) -> bool:
    if kind == DYN:
        return True
    if kind == STRING:
        return isinstance(value, str)
    if kind == INT:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == BOOL:
        return isinstance(value, bool)
    if kind == DOUBLE:
        return isinstance(value, float)
    if kind in (LIST, LIST_STRING):
        return isinstance(value, list)
    if kind == QUANTITY:
        return isinstance(value, Quantity)
    if kind == SEMVER:
        return isinstance(value, Semver)
    return False


def dispatch(overloads: Sequence[Overload], args: Sequence[Any]) -> Any:
    """Call the first overload whose parameter types fit ``args`` (for untyped backends)."""
    for overload in overloads:
        if len(overload.params) == len(args) and all(
            _matches(kind, arg) for kind, arg in zip(overload.params, args, strict=True)
        ):
            return overload.impl(*args)
    types = ", ".join(type(arg).__name__ for arg in args)
    raise LibraryError(f"no such overload: {overloads[0].name}({types})")


# -- quantity ---------------------------------------------------------------------------------


def _quantity(text: str) -> Quantity:
    try:
        return parse_quantity(text)
    except QuantityError as error:
        raise LibraryError(str(error)) from None


def _is_quantity(text: str) -> bool:
    try:
        parse_quantity(text)
    except QuantityError:
        return False
    return True


def _as_integer(q: Quantity) -> int:
    if not q.k8s_is_integer():
        raise LibraryError("cannot convert value to integer")
    return q.as_int()


def _quantity_of_int(n: int) -> Quantity:
    return Quantity.from_int(n, DECIMAL_EXPONENT)


# -- semver -----------------------------------------------------------------------------------


def _semver(text: str, normalize: bool = False) -> Semver:
    try:
        return parse_semver(text, normalize)
    except SemverError as error:
        raise LibraryError(str(error)) from None


def _is_semver(text: str, normalize: bool = False) -> bool:
    try:
        parse_semver(text, normalize)
    except SemverError:
        return False
    return True


# -- lists (k8s library/lists.go) ---------------------------------------------------------------


def _cel_key(value: Any) -> tuple[str, Any]:
    """Equality key that keeps CEL's ``true != 1`` while ``1 == 1.0``."""
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, int | float):
        return ("number", value)
    return (type(value).__name__, value)


def _is_sorted(items: list[Any]) -> bool:
    try:
        return all(a <= b for a, b in itertools.pairwise(items))
    except TypeError:
        raise LibraryError("isSorted: list elements are not comparable") from None


def _sum(items: list[Any]) -> Any:
    if not items:
        return 0
    if any(isinstance(i, bool) or not isinstance(i, int | float) for i in items):
        raise LibraryError("sum: list elements must be numbers")
    if len({type(i) for i in items}) > 1:
        raise LibraryError("sum: list elements must be of one type")
    return sum(items)


def _min(items: list[Any]) -> Any:
    if not items:
        raise LibraryError("min called on empty list")
    try:
        return min(items)
    except TypeError:
        raise LibraryError("min: list elements are not comparable") from None


def _max(items: list[Any]) -> Any:
    if not items:
        raise LibraryError("max called on empty list")
    try:
        return max(items)
    except TypeError:
        raise LibraryError("max: list elements are not comparable") from None


def _list_index_of(items: list[Any], value: Any) -> int:
    key = _cel_key(value)
    for i, item in enumerate(items):
        if _cel_key(item) == key:
            return i
    return -1


def _list_last_index_of(items: list[Any], value: Any) -> int:
    key = _cel_key(value)
    for i in range(len(items) - 1, -1, -1):
        if _cel_key(items[i]) == key:
            return i
    return -1


# -- regex (k8s library/regex.go) ------------------------------------------------------------


def _compile_regex(pattern: str) -> Any:
    """RE2, as Kubernetes: linear time whatever the text (see app/regex.py)."""
    try:
        return user_pattern(pattern)
    except RegexError as error:
        raise LibraryError(f"invalid regular expression {_short(pattern)!r}: {error}") from None


def _short(text: str) -> str:
    return text if len(text) <= 80 else text[:77] + "..."


def regex_matches(text: str, pattern: str) -> bool:
    """CEL's ``matches``: the pattern found anywhere in the text (RE2 partial match)."""
    return _compile_regex(pattern).search(text) is not None


_PATTERN_FUNCTIONS: Final = frozenset({"matches", "find", "findAll"})


def check_constant_patterns(expression: str) -> None:
    """Raise :class:`CelCompileError` at a constant pattern RE2 refuses.

    Kubernetes compiles constant patterns of ``matches``/``find``/``findAll`` when it builds the
    program (cel-go's regex optimization), so such an expression fails to compile there with the
    pattern's error; the same happens here, with the literal's position.
    """
    tokens = syntax.tokenize(expression)
    for i in range(1, len(tokens) - 3):
        name = tokens[i]
        if (
            name.kind != "ident"
            or name.text not in _PATTERN_FUNCTIONS
            or tokens[i - 1].text != "."
            or tokens[i + 1].text != "("
            or tokens[i + 2].kind != "string"
            or tokens[i + 3].text not in (")", ",")
        ):
            continue
        literal = tokens[i + 2]
        pattern = syntax.string_value(literal.text)
        if pattern is None:
            continue
        try:
            _compile_regex(pattern)
        except LibraryError as error:
            line, column = syntax.position(expression, literal.start)
            raise CelCompileError(
                expression,
                f"{name.text}(): {error}",
                line=line,
                column=column,
                offset=literal.start,
            ) from None


def _find(text: str, pattern: str) -> str:
    match = _compile_regex(pattern).search(text)
    return match.group(0) if match else ""


def _find_all(text: str, pattern: str, limit: int = -1) -> list[str]:
    if limit == 0:
        return []
    found = [m.group(0) for m in _compile_regex(pattern).finditer(text)]
    return found if limit < 0 else found[:limit]


KUBERNETES_OVERLOADS: Final[tuple[Overload, ...]] = (
    Overload("string_to_quantity", "quantity", (STRING,), QUANTITY, _quantity, member=False),
    Overload("is_quantity_string", "isQuantity", (STRING,), BOOL, _is_quantity, member=False),
    Overload("quantity_sign", "sign", (QUANTITY,), INT, Quantity.sign, member=False),
    Overload("quantity_sign_member", "sign", (QUANTITY,), INT, Quantity.sign),
    Overload(
        "quantity_is_greater_than",
        "isGreaterThan",
        (QUANTITY, QUANTITY),
        BOOL,
        lambda a, b: a.compare(b) > 0,
    ),
    Overload("quantity_is_less_than", "isLessThan", (QUANTITY, QUANTITY), BOOL, lambda a, b: a < b),
    Overload(
        "quantity_compare_to", "compareTo", (QUANTITY, QUANTITY), INT, lambda a, b: a.compare(b)
    ),
    Overload(
        "quantity_get_float",
        "asApproximateFloat",
        (QUANTITY,),
        DOUBLE,
        Quantity.as_approximate_float,
    ),
    Overload("quantity_get_int", "asInteger", (QUANTITY,), INT, _as_integer),
    Overload("quantity_is_integer", "isInteger", (QUANTITY,), BOOL, Quantity.k8s_is_integer),
    Overload("quantity_add", "add", (QUANTITY, QUANTITY), QUANTITY, lambda a, b: a + b),
    Overload(
        "quantity_add_int", "add", (QUANTITY, INT), QUANTITY, lambda a, b: a + _quantity_of_int(b)
    ),
    Overload("quantity_sub", "sub", (QUANTITY, QUANTITY), QUANTITY, lambda a, b: a - b),
    Overload(
        "quantity_sub_int", "sub", (QUANTITY, INT), QUANTITY, lambda a, b: a - _quantity_of_int(b)
    ),
    Overload("quantity_multiply_int", "mul", (QUANTITY, INT), QUANTITY, Quantity.mul),
    Overload("string_to_semver", "semver", (STRING,), SEMVER, _semver, member=False),
    Overload("string_bool_to_semver", "semver", (STRING, BOOL), SEMVER, _semver, member=False),
    Overload("is_semver_string", "isSemver", (STRING,), BOOL, _is_semver, member=False),
    Overload("is_semver_string_bool", "isSemver", (STRING, BOOL), BOOL, _is_semver, member=False),
    Overload("semver_is_greater_than", "isGreaterThan", (SEMVER, SEMVER), BOOL, lambda a, b: a > b),
    Overload("semver_is_less_than", "isLessThan", (SEMVER, SEMVER), BOOL, lambda a, b: a < b),
    Overload("semver_compare_to", "compareTo", (SEMVER, SEMVER), INT, lambda a, b: a.compare(b)),
    Overload("semver_major", "major", (SEMVER,), INT, lambda v: v.major),
    Overload("semver_minor", "minor", (SEMVER,), INT, lambda v: v.minor),
    Overload("semver_patch", "patch", (SEMVER,), INT, lambda v: v.patch),
    Overload("list_is_sorted", "isSorted", (LIST,), BOOL, _is_sorted),
    Overload("list_sum", "sum", (LIST,), DYN, _sum),
    Overload("list_min", "min", (LIST,), DYN, _min),
    Overload("list_max", "max", (LIST,), DYN, _max),
    Overload("list_index_of", "indexOf", (LIST, DYN), INT, _list_index_of),
    Overload("list_last_index_of", "lastIndexOf", (LIST, DYN), INT, _list_last_index_of),
    Overload("string_find", "find", (STRING, STRING), STRING, _find),
    Overload("string_find_all", "findAll", (STRING, STRING), LIST_STRING, _find_all),
    Overload("string_find_all_n", "findAll", (STRING, STRING, INT), LIST_STRING, _find_all),
)


# -- strings extension (cel-go ext.Strings v2), for a backend that has none -----------------


_ASCII_LOWER: Final = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
_ASCII_UPPER: Final = str.maketrans("abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ")


def _check_index(text: str, index: int) -> None:
    if index < 0 or index > len(text):
        raise LibraryError(f"index out of range: {index}")


def _char_at(text: str, index: int) -> str:
    _check_index(text, index)
    return text[index : index + 1]


def _index_of(text: str, sub: str, start: int = 0) -> int:
    _check_index(text, start)
    return text.find(sub, start)


def _last_index_of(text: str, sub: str, start: int | None = None) -> int:
    if start is None:
        return text.rfind(sub)
    _check_index(text, start)
    return text.rfind(sub, 0, start + len(sub))


def _replace(text: str, old: str, new: str, count: int = -1) -> str:
    return text.replace(old, new, count if count >= 0 else -1)


def _split(text: str, sep: str, limit: int = -1) -> list[str]:
    if limit == 0:
        return []
    if sep == "":
        chars = list(text)
        if limit > 0 and len(chars) > limit:
            return [*chars[: limit - 1], "".join(chars[limit - 1 :])]
        return chars
    return text.split(sep, limit - 1 if limit > 0 else -1)


def _substring(text: str, start: int, end: int | None = None) -> str:
    end = len(text) if end is None else end
    if start < 0 or end > len(text) or start > end:
        raise LibraryError(f"substring out of range: [{start}:{end}]")
    return text[start:end]


def _join(items: list[Any], sep: str = "") -> str:
    if not all(isinstance(i, str) for i in items):
        raise LibraryError("join: list elements must be strings")
    return sep.join(items)


STRING_OVERLOADS: Final[tuple[Overload, ...]] = (
    Overload("string_char_at_int", "charAt", (STRING, INT), STRING, _char_at),
    Overload("string_index_of_string", "indexOf", (STRING, STRING), INT, _index_of),
    Overload("string_index_of_string_int", "indexOf", (STRING, STRING, INT), INT, _index_of),
    Overload("string_last_index_of_string", "lastIndexOf", (STRING, STRING), INT, _last_index_of),
    Overload(
        "string_last_index_of_string_int",
        "lastIndexOf",
        (STRING, STRING, INT),
        INT,
        _last_index_of,
    ),
    Overload(
        "string_lower_ascii", "lowerAscii", (STRING,), STRING, lambda s: s.translate(_ASCII_LOWER)
    ),
    Overload(
        "string_upper_ascii", "upperAscii", (STRING,), STRING, lambda s: s.translate(_ASCII_UPPER)
    ),
    Overload("string_replace_string_string", "replace", (STRING, STRING, STRING), STRING, _replace),
    Overload(
        "string_replace_string_string_int",
        "replace",
        (STRING, STRING, STRING, INT),
        STRING,
        _replace,
    ),
    Overload("string_split_string", "split", (STRING, STRING), LIST_STRING, _split),
    Overload("string_split_string_int", "split", (STRING, STRING, INT), LIST_STRING, _split),
    Overload("string_substring_int", "substring", (STRING, INT), STRING, _substring),
    Overload("string_substring_int_int", "substring", (STRING, INT, INT), STRING, _substring),
    Overload("string_trim", "trim", (STRING,), STRING, str.strip),
    Overload("list_join", "join", (LIST,), STRING, _join),
    Overload("list_join_string", "join", (LIST, STRING), STRING, _join),
    Overload("string_reverse", "reverse", (STRING,), STRING, lambda s: s[::-1]),
)
