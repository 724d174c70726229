"""The overloads the cost model resolves a call to, and their result types (cel-go's standard
library and Kubernetes' DRA library), by name, receiver and argument types.
"""

from __future__ import annotations

from typing import Final

from app.cel.estimate.sizes import DYN, Type, assignable

# -- overloads ---------------------------------------------------------------------------------
# For each function, the overloads cel-go's checker (or the Kubernetes libraries) declare:
# (id, member?, parameter types, result type). Only ids that the cost rules tell apart matter;
# "*" in a parameter is a type parameter.

_NUM: Final = ("int", "uint", "double")


def _comparisons(op: str) -> list[tuple[str, bool, tuple[Type, ...], Type]]:
    out: list[tuple[str, bool, tuple[Type, ...], Type]] = [
        (f"{op}_string", False, ("string", "string"), "bool"),
        (f"{op}_bytes", False, ("bytes", "bytes"), "bool"),
        (f"{op}_bool", False, ("bool", "bool"), "bool"),
        (f"{op}_timestamp", False, ("timestamp", "timestamp"), "bool"),
        (f"{op}_duration", False, ("duration", "duration"), "bool"),
    ]
    out += [(f"{op}_{a}_{b}", False, (a, b), "bool") for a in _NUM for b in _NUM]
    return out


_OVERLOADS: Final[dict[str, list[tuple[str, bool, tuple[Type, ...], Type]]]] = {
    "_<_": _comparisons("less"),
    "_<=_": _comparisons("less_equals"),
    "_>_": _comparisons("greater"),
    "_>=_": _comparisons("greater_equals"),
    "_+_": [
        ("add_string", False, ("string", "string"), "string"),
        ("add_bytes", False, ("bytes", "bytes"), "bytes"),
        ("add_list", False, (("list", "*"), ("list", "*")), ("list", "*")),
        *[(f"add_{t}", False, (t, t), t) for t in _NUM],
        ("add_duration", False, ("duration", "duration"), "duration"),
        ("add_timestamp_duration", False, ("timestamp", "duration"), "timestamp"),
        ("add_duration_timestamp", False, ("duration", "timestamp"), "timestamp"),
    ],
    "_[_]": [
        ("index_list", False, (("list", "*"), "int"), "*"),
        ("index_map", False, (("map", "*", "*"), "*"), "*"),
    ],
    "@in": [
        ("in_list", False, ("*", ("list", "*")), "bool"),
        ("in_map", False, ("*", ("map", "*", "*")), "bool"),
    ],
    "string": [
        ("string_to_string", False, ("string",), "string"),
        ("int64_to_string", False, ("int",), "string"),
        ("uint64_to_string", False, ("uint",), "string"),
        ("double_to_string", False, ("double",), "string"),
        ("bool_to_string", False, ("bool",), "string"),
        ("bytes_to_string", False, ("bytes",), "string"),
        ("timestamp_to_string", False, ("timestamp",), "string"),
        ("duration_to_string", False, ("duration",), "string"),
    ],
    "bytes": [
        ("bytes_to_bytes", False, ("bytes",), "bytes"),
        ("string_to_bytes", False, ("string",), "bytes"),
    ],
    "matches": [
        ("matches_string", True, ("string", "string"), "bool"),
        ("matches", False, ("string", "string"), "bool"),
    ],
    "contains": [("contains_string", True, ("string", "string"), "bool")],
    "startsWith": [("starts_with_string", True, ("string", "string"), "bool")],
    "endsWith": [("ends_with_string", True, ("string", "string"), "bool")],
    "size": [
        ("size_string", False, ("string",), "int"),
        ("size_bytes", False, ("bytes",), "int"),
        ("size_list", False, (("list", "*"),), "int"),
        ("size_map", False, (("map", "*", "*"),), "int"),
        ("string_size", True, ("string",), "int"),
        ("bytes_size", True, ("bytes",), "int"),
        ("list_size", True, (("list", "*"),), "int"),
        ("map_size", True, (("map", "*", "*"),), "int"),
    ],
}
_RESULT_TYPES: Final[dict[str, Type]] = {
    # Kubernetes and extension functions with one result type whatever the overload.
    "quantity": "quantity",
    "semver": "semver",
    "isQuantity": "bool",
    "isSemver": "bool",
    "isGreaterThan": "bool",
    "isLessThan": "bool",
    "compareTo": "int",
    "sign": "int",
    "asInteger": "int",
    "isInteger": "bool",
    "asApproximateFloat": "double",
    "add": "quantity",
    "sub": "quantity",
    "major": "int",
    "minor": "int",
    "patch": "int",
    "lowerAscii": "string",
    "upperAscii": "string",
    "trim": "string",
    "substring": "string",
    "replace": "string",
    "charAt": "string",
    "indexOf": "int",
    "lastIndexOf": "int",
    "split": ("list", "string"),
    "join": "string",
    "format": "string",
    "quote": "string",
    "reverse": "string",
    "find": "string",
    "findAll": ("list", "string"),
    "isSorted": "bool",
    "int": "int",
    "uint": "uint",
    "double": "double",
    "bool": "bool",
    "type": "type",
    "duration": "duration",
    "timestamp": "timestamp",
    "!_": "bool",
    "-_": DYN,
    "_-_": DYN,
    "_*_": DYN,
    "_/_": DYN,
    "_%_": DYN,
    "_==_": "bool",
    "_!=_": "bool",
    "_&&_": "bool",
    "_||_": "bool",
    "@not_strictly_false": "bool",
    "sum": DYN,
    "min": DYN,
    "max": DYN,
    "slice": DYN,
}
FIXED_K8S: Final = frozenset(
    {
        "sign",
        "asInteger",
        "isInteger",
        "asApproximateFloat",
        "isGreaterThan",
        "isLessThan",
        "compareTo",
        "add",
        "sub",
        "major",
        "minor",
        "patch",
    }
)


def _bind_param(param: Type, arg: Type, bindings: dict[str, Type]) -> None:
    if param == "*":
        bindings.setdefault("*", arg)
    elif isinstance(param, tuple) and isinstance(arg, tuple):
        for p, a in zip(param[1:], arg[1:], strict=False):
            _bind_param(p, a, bindings)


def _substitute(t: Type, bindings: dict[str, Type]) -> Type:
    if t == "*":
        return bindings.get("*", DYN)
    if isinstance(t, tuple):
        return (t[0], *(_substitute(p, bindings) for p in t[1:]))
    return t


def resolve(name: str, member: bool, arg_types: list[Type]) -> tuple[list[str], Type]:
    """The overload ids the checker would keep for a call, and the call's type."""
    candidates = _OVERLOADS.get(name)
    if candidates is None:
        return [name], _RESULT_TYPES.get(name, DYN)
    found: list[str] = []
    results: list[Type] = []
    for overload_id, is_member, params, result in candidates:
        if is_member != member:
            continue
        if len(params) != len(arg_types):
            continue
        if all(assignable(p, a) for p, a in zip(params, arg_types, strict=True)):
            bindings: dict[str, Type] = {}
            for p, a in zip(params, arg_types, strict=True):
                _bind_param(p, a, bindings)
            if name == "_[_]" and overload_id == "index_list":
                bindings["*"] = arg_types[0][1] if isinstance(arg_types[0], tuple) else DYN
            elif name == "_[_]" and isinstance(arg_types[0], tuple):
                bindings["*"] = arg_types[0][2]
            found.append(overload_id)
            results.append(_substitute(result, bindings))
    if not found:
        return [name], DYN
    result_type = results[0] if all(r == results[0] for r in results) else DYN
    return found, result_type
