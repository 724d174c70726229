"""The worst-case cost of a DRA selector, as the Kubernetes API server estimates it.

`resource.k8s.io` validation compiles a selector with cel-go in an environment that declares one
variable, ``device``, and asks cel-go's static estimator (``checker.Cost``) for the most one
evaluation can cost; above 1,000,000 the selector is refused ("too complex, exceeds cost
limit"). This module walks the same tree with the same rules, so both verdicts agree:

- **the tree** is celpy's Lark parse, rewritten into cel-go's shape: operators become calls
  (``_==_``, ``_[_]``, ``@in``, ...), and the macros expand as cel-go's parser expands them
  (``all``/``exists``/``exists_one``/``map``/``filter`` into comprehensions over an accumulator
  ``@result``, ``has()`` into a presence test, ``cel.bind`` into a comprehension over ``[]``);
- **the types** are those the checker gives: ``device`` is a struct with ``driver`` (string),
  ``allowMultipleAllocations`` (bool), ``attributes`` (map of maps of any value) and
  ``capacity`` (map of maps of Quantity); an attribute value is dynamic, so a call on it
  resolves to every overload its other arguments allow, and its cost is their union;
- **the sizes** come from the DRA size estimator (``dynamic-resource-allocation/cel``): each
  map holds at most 32 entries (ResourceSliceMaxAttributesAndCapacitiesPerDevice), a domain is
  at most 63 characters, an attribute name 32, a driver name 63, an attribute value 64; sizes
  follow field paths (``device.attributes[d].x`` is ``device/attributes/@values/x``) and flow
  through literals, concatenations, comprehensions and bindings as cel-go's do;
- **the costs** are cel-go's (``checker/cost.go``: 1 per identifier or selection of a map or
  struct field, 0 per constant, 10 per list and 30 per map created, 1 per call, a tenth of a
  string's length per traversal, a quarter of a pattern's length per regex step, comprehension
  cost = range size x (step + condition), ``&&``/``||`` the sum of both sides) and Kubernetes'
  (``apiserver/pkg/cel/library/cost.go``: Quantity, Semver and list functions, string
  extension functions, O(1) equality of Quantities and Semvers).

``presence tests cost 0`` as in Kubernetes' base environment (``PresenceTestHasCost(false)``).
What the model does not know (a function outside the DRA environment, syntax celpy cannot
parse) falls back to a bound that is never lower than cel-go's: :func:`estimate` then returns
the unknown cost, and the selector is refused.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Any, Final

__all__ = ["MAX_U64", "Node", "estimate_cost", "parse"]

MAX_U64: Final = 2**64 - 1
SELECT_COST: Final = 1
CONST_COST: Final = 0
LIST_CREATE_COST: Final = 10
MAP_CREATE_COST: Final = 30
STRUCT_CREATE_COST: Final = 40
STRING_TRAVERSAL: Final = 0.1
REGEX_LENGTH: Final = 0.25
ACCU: Final = "@result"

# DRA size bounds (k8s.io/api/resource/v1).
MAX_ATTRIBUTES: Final = 32
MAX_DOMAIN: Final = 63
MAX_ID: Final = 32
MAX_DRIVER: Final = 63
MAX_ATTRIBUTE_VALUE: Final = 64

# -- sizes and costs (saturating, as cel-go's uint64 arithmetic) ------------------------------


@dataclass(frozen=True, slots=True)
class Range:
    """A [min, max] size or cost estimate."""

    lo: int
    hi: int

    def add(self, other: Range) -> Range:
        return Range(min(self.lo + other.lo, MAX_U64), min(self.hi + other.hi, MAX_U64))

    def mul(self, other: Range) -> Range:
        return Range(min(self.lo * other.lo, MAX_U64), min(self.hi * other.hi, MAX_U64))

    def factor(self, k: float) -> Range:
        return Range(_by_factor(self.lo, k), _by_factor(self.hi, k))

    def union(self, other: Range) -> Range:
        return Range(min(self.lo, other.lo), max(self.hi, other.hi))


def _by_factor(x: int, k: float) -> int:
    xf = float(x)
    if xf > 0 and k > 0 and xf > MAX_U64 / k:
        return MAX_U64
    ceil = math.ceil(xf * k)
    return MAX_U64 if ceil >= 2.0**64 else int(ceil)


def fixed(n: int) -> Range:
    return Range(n, n)


ZERO: Final = fixed(0)
ONE: Final = fixed(1)
UNKNOWN: Final = Range(0, MAX_U64)

# -- types -------------------------------------------------------------------------------------
# A type is a string ("bool", "int", "uint", "double", "string", "bytes", "null", "dyn",
# "quantity", "semver", "device", "type", "duration", "timestamp") or a tuple
# ("list", elem) / ("map", key, value).

Type = Any
DYN: Final = "dyn"
SCALARS: Final = frozenset({"bool", "int", "uint", "double", "duration", "timestamp"})
ATTRIBUTES_TYPE: Final = ("map", "string", ("map", "string", DYN))
CAPACITY_TYPE: Final = ("map", "string", ("map", "string", "quantity"))
DEVICE_FIELDS: Final[dict[str, Type]] = {
    "driver": "string",
    "allowMultipleAllocations": "bool",
    "attributes": ATTRIBUTES_TYPE,
    "capacity": CAPACITY_TYPE,
}


def _kind(t: Type) -> str:
    return t[0] if isinstance(t, tuple) else str(t)


def _assignable(param: Type, arg: Type) -> bool:
    """Whether an argument of type ``arg`` can bind a parameter of type ``param``."""
    if arg == DYN or param in (DYN, "*"):
        return True
    if isinstance(param, tuple) or isinstance(arg, tuple):
        if not (isinstance(param, tuple) and isinstance(arg, tuple)) or param[0] != arg[0]:
            return False
        return all(_assignable(p, a) for p, a in zip(param[1:], arg[1:], strict=True))
    return bool(param == arg)


# -- the DRA size estimator (declared types of `device`) --------------------------------------


@dataclass(frozen=True, slots=True)
class _Decl:
    max_elements: int
    fields: dict[str, _Decl] | None = None
    key: _Decl | None = None
    elem: _Decl | None = None


_ATTRIBUTE: Final = _Decl(MAX_ATTRIBUTE_VALUE)
_QUANTITY: Final = _Decl(0)
_INNER_ATTRIBUTES: Final = _Decl(MAX_ATTRIBUTES, key=_Decl(MAX_ID), elem=_ATTRIBUTE)
_INNER_CAPACITY: Final = _Decl(MAX_ATTRIBUTES, key=_Decl(MAX_ID), elem=_QUANTITY)
_DEVICE: Final = _Decl(
    0,
    fields={
        "driver": _Decl(MAX_DRIVER),
        "allowMultipleAllocations": _Decl(1),
        "attributes": _Decl(MAX_ATTRIBUTES, key=_Decl(MAX_DOMAIN), elem=_INNER_ATTRIBUTES),
        "capacity": _Decl(MAX_ATTRIBUTES, key=_Decl(MAX_DOMAIN), elem=_INNER_CAPACITY),
    },
)


def _path_size(path: tuple[str, ...] | None) -> Range | None:
    """The DRA sizeEstimator: the declared maximum size at a field path from ``device``."""
    if not path or path[0] != "device":
        return None
    node = _DEVICE
    for name in path[1:]:
        if name in ("@items", "@values"):
            if node.elem is None:
                return None
            node = node.elem
        elif name == "@keys":
            if node.key is None:
                return None
            node = node.key
        else:
            found = node.fields.get(name) if node.fields else None
            if found is None:
                if node.elem is _ATTRIBUTE:
                    node = _ATTRIBUTE
                    continue
                return None
            node = found
    return Range(0, node.max_elements)


# -- the tree ----------------------------------------------------------------------------------


@dataclass(eq=False, slots=True)
class Node:
    """One expression in cel-go's shape."""

    kind: str  # lit, ident, select, call, list, map, struct, comp
    name: str = ""  # ident name, field name, function name
    args: list[Node] = field(default_factory=list)
    target: Node | None = None
    value_type: Type = None  # literal type
    value_size: int = 0  # literal size
    test_only: bool = False
    # comprehension parts
    iter_var: str = ""
    iter_var2: str = ""
    accu_var: str = ""
    accu_init: Node | None = None
    cond: Node | None = None
    step: Node | None = None
    result: Node | None = None
    is_bind: bool = False


class UnsupportedError(Exception):
    """Syntax or a function the model cannot cost exactly."""


def _lit(value_type: Type, size: int) -> Node:
    return Node("lit", value_type=value_type, value_size=size)


def _ident(name: str) -> Node:
    return Node("ident", name=name)


def _call(name: str, *args: Node, target: Node | None = None) -> Node:
    return Node("call", name=name, args=list(args), target=target)


@functools.cache
def _lark_parser() -> Any:
    from celpy.celparser import CELParser

    return CELParser()


def parse(expression: str) -> Node:
    """celpy's Lark tree of ``expression`` in cel-go's shape; raises :class:`UnsupportedError`."""
    try:
        tree = _lark_parser().parse(expression)
    except Exception as error:  # celpy raises its own parse errors
        raise UnsupportedError(f"not parsed: {error}") from None
    return _Builder().expr(tree)


_RELATIONS: Final = {
    "relation_lt": "_<_",
    "relation_le": "_<=_",
    "relation_gt": "_>_",
    "relation_ge": "_>=_",
    "relation_eq": "_==_",
    "relation_ne": "_!=_",
    "relation_in": "@in",
    "addition_add": "_+_",
    "addition_sub": "_-_",
    "multiplication_mul": "_*_",
    "multiplication_div": "_/_",
    "multiplication_mod": "_%_",
}
_MACROS: Final = frozenset({"all", "exists", "exists_one", "map", "filter"})


class _Builder:
    def expr(self, tree: Any) -> Node:
        """Rewrite one node of celpy's Lark tree (its `data` names the grammar rule)."""
        method = getattr(self, "_" + str(tree.data), None)
        if method is None:
            raise UnsupportedError(f"syntax {tree.data}")
        node: Node = method(tree.children)
        return node

    def _expr(self, children: list[Any]) -> Node:
        if len(children) == 1 or children[1] is None:
            return self.expr(children[0])
        return _call("_?_:_", *(self.expr(c) for c in children))

    def _binary(self, children: list[Any], op: str) -> Node:
        if len(children) == 1 or children[0] is None:
            return self.expr(children[-1])
        return _call(op, self.expr(children[0]), self.expr(children[1]))

    def _conditionalor(self, children: list[Any]) -> Node:
        return self._binary(children, "_||_")

    def _conditionaland(self, children: list[Any]) -> Node:
        return self._binary(children, "_&&_")

    def _operator(self, children: list[Any]) -> Node:
        if len(children) == 1 or children[0] is None:
            return self.expr(children[-1])
        left = children[0]
        return _call(
            _RELATIONS[str(left.data)], self.expr(left.children[0]), self.expr(children[1])
        )

    _relation = _operator
    _addition = _operator
    _multiplication = _operator

    def _unary(self, children: list[Any]) -> Node:
        if len(children) == 1:
            return self.expr(children[0])
        op = "!_" if children[0].data == "unary_not" else "-_"
        return _call(op, self.expr(children[1]))

    def _member(self, children: list[Any]) -> Node:
        return self.expr(children[0])

    def _primary(self, children: list[Any]) -> Node:
        return self.expr(children[0])

    def _paren_expr(self, children: list[Any]) -> Node:
        return self.expr(children[0])

    def _member_dot(self, children: list[Any]) -> Node:
        return Node("select", name=str(children[1]), args=[self.expr(children[0])])

    def _exprlist(self, tree: Any) -> list[Node]:
        if tree is None:
            return []
        return [self.expr(c) for c in tree.children]

    def _member_dot_arg(self, children: list[Any]) -> Node:
        target_tree, name = children[0], str(children[1])
        args = self._exprlist(children[2] if len(children) > 2 else None)
        if name in _MACROS and args and args[0].kind == "ident" and len(args) in (2, 3):
            return _comprehension(name, self.expr(target_tree), args)
        target = self.expr(target_tree)
        if name == "bind" and target.kind == "ident" and target.name == "cel" and len(args) == 3:
            if args[0].kind != "ident":
                raise UnsupportedError("cel.bind needs a name")
            return Node(
                "comp",
                args=[Node("list")],
                iter_var="#unused",
                accu_var=args[0].name,
                accu_init=args[1],
                cond=_lit("bool", 1),
                step=_ident(args[0].name),
                result=args[2],
                is_bind=True,
            )
        return _call(name, *args, target=target)

    def _member_index(self, children: list[Any]) -> Node:
        return _call("_[_]", self.expr(children[0]), self.expr(children[1]))

    def _member_object(self, children: list[Any]) -> Node:
        raise UnsupportedError("message construction")

    def _ident_arg(self, children: list[Any]) -> Node:
        name = str(children[0])
        args = self._exprlist(children[1] if len(children) > 1 else None)
        if name == "has" and len(args) == 1 and args[0].kind == "select":
            presence = args[0]
            return Node("select", name=presence.name, args=presence.args, test_only=True)
        return _call(name, *args)

    def _dot_ident_arg(self, children: list[Any]) -> Node:
        return self._ident_arg(children)

    def _ident(self, children: list[Any]) -> Node:
        return _ident(str(children[0]))

    def _dot_ident(self, children: list[Any]) -> Node:
        return _ident(str(children[0]))

    def _list_lit(self, children: list[Any]) -> Node:
        return Node("list", args=self._exprlist(children[0] if children else None))

    def _map_lit(self, children: list[Any]) -> Node:
        items = self._exprlist(children[0] if children else None)
        return Node("map", args=items)

    _mapinits = _exprlist

    def _literal(self, children: list[Any]) -> Node:
        token = children[0]
        kind, text = token.type, str(token)
        if kind in ("STRING_LIT", "MLSTRING_LIT"):
            return _lit("string", len(_string_value(text)))
        if kind == "BYTES_LIT":
            return _lit("bytes", len(_string_value(text[1:]).encode("utf-8", "surrogatepass")))
        if kind == "BOOL_LIT":
            return _lit("bool", 1)
        if kind == "NULL_LIT":
            return _lit("null", 1)
        if kind == "UINT_LIT":
            return _lit("uint", 1)
        if kind == "FLOAT_LIT":
            return _lit("double", 1)
        return _lit("int", 1)


def _comprehension(macro: str, target: Node, args: list[Node]) -> Node:
    """cel-go's parser expansion of a macro (parser/macro.go)."""
    var = args[0].name
    accu = _ident(ACCU)
    comp = Node("comp", args=[target], iter_var=var, accu_var=ACCU, result=_ident(ACCU))
    if len(args) == 3 and macro in ("all", "exists", "exists_one"):
        # the two-variable forms: all(k, v, p)
        if args[1].kind != "ident":
            raise UnsupportedError("two-variable comprehension needs names")
        comp.iter_var2 = args[1].name
        args = [args[0], args[2]]
    if macro == "all":
        comp.accu_init = _lit("bool", 1)
        comp.cond = _call("@not_strictly_false", accu)
        comp.step = _call("_&&_", _ident(ACCU), args[1])
    elif macro == "exists":
        comp.accu_init = _lit("bool", 1)
        comp.cond = _call("@not_strictly_false", _call("!_", accu))
        comp.step = _call("_||_", _ident(ACCU), args[1])
    elif macro == "exists_one":
        comp.accu_init = _lit("int", 1)
        comp.cond = _lit("bool", 1)
        comp.step = _call(
            "_?_:_", args[1], _call("_+_", _ident(ACCU), _lit("int", 1)), _ident(ACCU)
        )
        comp.result = _call("_==_", accu, _lit("int", 1))
    elif macro == "map":
        comp.accu_init = Node("list")
        comp.cond = _lit("bool", 1)
        transform = args[-1]
        step = _call("_+_", _ident(ACCU), Node("list", args=[transform]))
        if len(args) == 3:
            step = _call("_?_:_", args[1], step, _ident(ACCU))
        comp.step = step
    else:  # filter
        comp.accu_init = Node("list")
        comp.cond = _lit("bool", 1)
        step = _call("_+_", _ident(ACCU), Node("list", args=[_ident(var)]))
        comp.step = _call("_?_:_", args[1], step, _ident(ACCU))
    return comp


_SIMPLE_ESCAPES: Final = frozenset("abfnrtv\"'\\`?")


def _string_value(text: str) -> str:
    """The value of a CEL string literal (only its length matters here)."""
    raw = text[:1] in ("r", "R")
    if raw:
        text = text[1:]
    quote = text[:3] if text[:3] in ('"""', "'''") else text[:1]
    body = text[len(quote) : len(text) - len(quote)]
    if raw or "\\" not in body:
        return body
    out: list[str] = []
    i = 0
    while i < len(body):
        ch = body[i]
        if ch != "\\" or i + 1 >= len(body):
            out.append(ch)
            i += 1
            continue
        nxt = body[i + 1]
        if nxt in "xX":
            out.append(chr(int(body[i + 2 : i + 4], 16)))
            i += 4
        elif nxt == "u":
            out.append(chr(int(body[i + 2 : i + 6], 16)))
            i += 6
        elif nxt == "U":
            out.append(chr(int(body[i + 2 : i + 10], 16)))
            i += 10
        elif nxt in "0123":
            out.append(chr(int(body[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(nxt if nxt not in _SIMPLE_ESCAPES else "?")
            i += 2
    return "".join(out)


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
_FIXED_K8S: Final = frozenset(
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


def _resolve(name: str, member: bool, arg_types: list[Type]) -> tuple[list[str], Type]:
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
        if all(_assignable(p, a) for p, a in zip(params, arg_types, strict=True)):
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


# -- the estimator -----------------------------------------------------------------------------


@dataclass(slots=True)
class _Local:
    path: tuple[str, ...] | None
    size: Range | None
    entry: _Entry | None
    type: Type


@dataclass(frozen=True, slots=True)
class _Entry:
    container: str  # "list" or "map"
    key: Range
    val: Range

    def union(self, other: _Entry | None) -> _Entry | None:
        if other is None:
            return None
        return _Entry(self.container, self.key.union(other.key), self.val.union(other.val))


class _Coster:
    def __init__(self) -> None:
        self.types: dict[int, Type] = {}
        self.paths: dict[int, tuple[str, ...]] = {}
        self.sizes: dict[int, Range] = {}
        self.entries: dict[int, _Entry] = {}
        self.locals: dict[str, list[_Local]] = {}

    # bookkeeping ------------------------------------------------------------------------------
    def type_of(self, e: Node) -> Type:
        return self.types.get(id(e), DYN)

    def local(self, name: str) -> _Local | None:
        stack = self.locals.get(name)
        return stack[-1] if stack else None

    def push(self, name: str, local: _Local) -> None:
        self.locals.setdefault(name, []).append(local)

    def pop(self, name: str) -> None:
        self.locals[name].pop()

    def path(self, e: Node) -> tuple[str, ...] | None:
        if e.kind == "ident":
            found = self.local(e.name)
            if found is not None:
                return found.path
        return self.paths.get(id(e))

    def size(self, e: Node) -> Range | None:
        """cel-go computeSize: computed, literal, estimator by path, scalar type, local."""
        found = self.sizes.get(id(e))
        if found is not None:
            return found
        if e.kind == "lit":
            return fixed(e.value_size)
        if e.kind in ("list", "map"):
            return fixed(len(e.args) if e.kind == "list" else len(e.args) // 2)
        path = self.path(e)
        if path and path[0] in (ACCU, "__result__"):
            path = None
        estimated = _path_size(path)
        if estimated is not None:
            self.sizes[id(e)] = estimated
            return estimated
        if self.type_of(e) in SCALARS:
            return ONE
        if e.kind == "ident":
            found_local = self.local(e.name)
            if found_local is not None and found_local.size is not None:
                return found_local.size
        return None

    def size_or_unknown(self, e: Node) -> Range:
        return self.size(e) or UNKNOWN

    def entry(self, e: Node) -> _Entry | None:
        found = self.entries.get(id(e))
        if found is not None:
            return found
        if e.kind == "ident":
            local = self.local(e.name)
            if local is not None:
                return local.entry
        return None

    # the walk ---------------------------------------------------------------------------------
    def cost(self, e: Node) -> Range:
        if e.kind == "lit":
            self.types[id(e)] = e.value_type
            return fixed(CONST_COST)
        if e.kind == "ident":
            return self.cost_ident(e)
        if e.kind == "select":
            return self.cost_select(e)
        if e.kind == "call":
            return self.cost_call(e)
        if e.kind == "list":
            return self.cost_list(e)
        if e.kind == "map":
            return self.cost_map(e)
        if e.kind == "comp":
            return self.cost_bind(e) if e.is_bind else self.cost_comprehension(e)
        raise UnsupportedError(e.kind)

    def cost_ident(self, e: Node) -> Range:
        local = self.local(e.name)
        if local is not None:
            self.paths[id(e)] = local.path or ()
            self.types[id(e)] = local.type
        else:
            self.paths[id(e)] = (e.name,)
            self.types[id(e)] = "device" if e.name == "device" else DYN
        return fixed(SELECT_COST)

    def cost_select(self, e: Node) -> Range:
        operand = e.args[0]
        total = self.cost(operand)
        operand_type = self.type_of(operand)
        if operand_type == "device":
            self.types[id(e)] = DEVICE_FIELDS.get(e.name, DYN)
        elif _kind(operand_type) == "map":
            self.types[id(e)] = operand_type[2]
        else:
            self.types[id(e)] = DYN
        if e.test_only:
            self.types[id(e)] = "bool"
            return total  # presence tests cost nothing in Kubernetes
        if operand_type == "device" or _kind(operand_type) == "map":
            total = total.add(fixed(SELECT_COST))
        base = self.path(operand)
        self.paths[id(e)] = (*(base or ()), e.name)
        return total

    def cost_list(self, e: Node) -> Range:
        total = ZERO
        item = Range(MAX_U64, 0) if e.args else ZERO
        elem_types: list[Type] = []
        for element in e.args:
            total = total.add(self.cost(element))
            item = item.union(self.size_or_unknown(element))
            elem_types.append(self.type_of(element))
        self.entries[id(e)] = _Entry("list", ONE, item)
        elem = elem_types[0] if elem_types and all(t == elem_types[0] for t in elem_types) else DYN
        self.types[id(e)] = ("list", elem)
        return total.add(fixed(LIST_CREATE_COST))

    def cost_map(self, e: Node) -> Range:
        total = ZERO
        empty = not e.args
        key = ZERO if empty else Range(MAX_U64, 0)
        val = ZERO if empty else Range(MAX_U64, 0)
        key_types, val_types = [], []
        for k, v in zip(e.args[::2], e.args[1::2], strict=True):
            total = total.add(self.cost(k)).add(self.cost(v))
            key = key.union(self.size_or_unknown(k))
            val = val.union(self.size_or_unknown(v))
            key_types.append(self.type_of(k))
            val_types.append(self.type_of(v))
        self.entries[id(e)] = _Entry("map", key, val)
        kt = key_types[0] if key_types and all(t == key_types[0] for t in key_types) else DYN
        vt = val_types[0] if val_types and all(t == val_types[0] for t in val_types) else DYN
        self.types[id(e)] = ("map", kt, vt)
        return total.add(fixed(MAP_CREATE_COST))

    def _iter_types(self, range_type: Type) -> tuple[Type, Type, str]:
        kind = _kind(range_type)
        if kind == "list":
            return "int", range_type[1], "list"
        if kind == "map":
            return range_type[1], range_type[2], "map"
        return DYN, DYN, "dyn"

    def cost_comprehension(self, e: Node) -> Range:
        assert e.accu_init is not None and e.cond is not None and e.step is not None
        assert e.result is not None
        iter_range = e.args[0]
        total = self.cost(iter_range).add(self.cost(e.accu_init))
        range_type = self.type_of(iter_range)
        key_type, value_type, container = self._iter_types(range_type)
        entry = self.entry(iter_range)
        if entry is not None:
            container = entry.container
        base = self.path(iter_range) or ()
        accu_type = self._accu_type(e, value_type if container == "list" else key_type)
        self.push(
            e.accu_var,
            _Local(
                self.path(e.accu_init), self.size(e.accu_init), self.entry(e.accu_init), accu_type
            ),
        )
        if e.iter_var2:
            key_path = "@indices" if container == "list" else "@keys"
            value_path = "@items" if container == "list" else "@values"
            self.push(
                e.iter_var,
                _Local((*base, key_path), entry.key if entry else None, None,
                       "int" if container == "list" else key_type),
            )  # fmt: skip
            self.push(
                e.iter_var2,
                _Local((*base, value_path), entry.val if entry else None, None, value_type),
            )
        elif container == "list":
            self.push(
                e.iter_var,
                _Local((*base, "@items"), entry.val if entry else None, None, value_type),
            )
        else:
            self.push(
                e.iter_var, _Local((*base, "@keys"), entry.key if entry else None, None, key_type)
            )
        loop = self.cost(e.cond)
        step = self.cost(e.step)
        # the accumulator's type after one step (a list built by map() has the transform's type)
        self.pop(e.iter_var)
        if e.iter_var2:
            self.pop(e.iter_var2)
        total = total.add(self.cost(e.result))
        self.pop(e.accu_var)
        count = self.size_or_unknown(iter_range)
        total = total.add(count.mul(step.add(loop)))
        self.types[id(e)] = self.type_of(e.result)
        if e.accu_init.kind == "lit":
            init_size = self.size(e.accu_init)
            if init_size is not None:
                self.sizes[id(e)] = init_size
        elif e.accu_init.kind in ("list", "map"):
            self.sizes[id(e)] = count
            step_entry = self.entry(e.step)
            if step_entry is not None:
                self.entries[id(e)] = step_entry
        return total

    def _accu_type(self, e: Node, element: Type) -> Type:
        init = e.accu_init
        assert init is not None
        if init.kind == "lit":
            return init.value_type
        if e.step is not None and e.step.kind == "call":
            # map/filter: the list's element type comes from the step's list literal
            step = e.step
            add = step.args[1] if step.name == "_?_:_" else step
            if add.kind == "call" and add.name == "_+_" and add.args[1].kind == "list":
                new = add.args[1].args[0]
                if new.kind == "ident" and new.name == e.iter_var:
                    return ("list", element)
                return ("list", DYN)
        return ("list", DYN)

    def cost_bind(self, e: Node) -> Range:
        assert e.accu_init is not None and e.result is not None
        total = self.cost(e.args[0]).add(self.cost(e.accu_init))
        init = e.accu_init
        self.push(
            e.accu_var,
            _Local(self.path(init), self.size(init), self.entry(init), self.type_of(init)),
        )
        total = total.add(self.cost(e.result))
        self.pop(e.accu_var)
        self.types[id(e)] = self.type_of(e.result)
        size = self.size(e.result)
        if size is not None:
            self.sizes[id(e)] = size
        entry = self.entry(e.result)
        if entry is not None:
            self.entries[id(e)] = entry
        return total

    def cost_call(self, e: Node) -> Range:
        if e.name == "dyn" and e.target is None and len(e.args) == 1:
            arg = e.args[0]
            cost = self.cost(arg)
            self.types[id(e)] = DYN
            size = self.size(arg)
            if size is not None:
                self.sizes[id(e)] = size
            entry = self.entry(arg)
            if entry is not None:
                self.entries[id(e)] = entry
            return ONE.add(cost)
        arg_costs = [self.cost(a) for a in e.args]
        total = ZERO
        target_type: Type = None
        if e.target is not None:
            total = total.add(self.cost(e.target))
            target_type = self.type_of(e.target)
        types = ([target_type] if e.target is not None else []) + [self.type_of(a) for a in e.args]
        overloads, result_type = _resolve(e.name, e.target is not None, types)
        self.types[id(e)] = result_type
        fn = Range(MAX_U64, 0)
        result_size: Range | None = None
        for overload in overloads:
            cost, size = self.function_cost(e, overload, arg_costs)
            fn = fn.union(cost)
            if size is not None:
                result_size = size if result_size is None else result_size.union(size)
            if overload in ("index_list", "index_map") and e.args:
                entry = self.entry(e.args[0])
                result_size = entry.val if entry is not None else None
                step = "@items" if overload == "index_list" else "@values"
                self.paths[id(e)] = (*(self.path(e.args[0]) or ()), step)
            if result_size is None:
                result_size = self.size(e)
        if result_size is not None:
            self.sizes[id(e)] = result_size
        return total.add(fn)

    def function_cost(
        self, e: Node, overload: str, arg_costs: list[Range]
    ) -> tuple[Range, Range | None]:
        args_sum = ZERO
        for c in arg_costs:
            args_sum = args_sum.add(c)
        name = e.name
        target = e.target
        args = e.args
        k8s = self.kubernetes_cost(e)
        if k8s is not None:
            cost, size = k8s
            return cost.add(args_sum), size
        if overload in ("starts_with_string", "ends_with_string") and len(args) == 1:
            return self.size_or_unknown(args[0]).factor(STRING_TRAVERSAL).add(args_sum), None
        if overload == "in_list" and len(args) == 2:
            return self.size_or_unknown(args[1]).factor(1).add(args_sum), None
        if overload in ("matches_string", "matches"):
            subject, pattern = (target, args[0]) if target is not None else (args[0], args[1])
            if subject is None:
                return ONE.add(args_sum), None
            string_cost = self.size_or_unknown(subject).add(ONE).factor(STRING_TRAVERSAL)
            regex_cost = self.size_or_unknown(pattern).factor(REGEX_LENGTH)
            return string_cost.mul(regex_cost).add(args_sum), None
        if overload == "contains_string" and target is not None and len(args) == 1:
            string_cost = self.size_or_unknown(target).factor(STRING_TRAVERSAL)
            sub_cost = self.size_or_unknown(args[0]).factor(STRING_TRAVERSAL)
            return string_cost.mul(sub_cost).add(args_sum), None
        if name in ("_&&_", "_||_"):
            lhs, rhs = arg_costs
            return Range(lhs.lo, lhs.add(rhs).hi), None
        if name == "_?_:_":
            size = self.size_or_unknown(args[1]).union(self.size_or_unknown(args[2]))
            left, right = self.entry(args[1]), self.entry(args[2])
            if left is not None:
                joined = left.union(right)
                if joined is not None:
                    self.entries[id(e)] = joined
            return arg_costs[0].add(arg_costs[1].union(arg_costs[2])), size
        if overload in ("string_to_bytes", "bytes_to_string") and len(args) == 1:
            sz = self.size_or_unknown(args[0])
            cost = sz.factor(STRING_TRAVERSAL).add(args_sum)
            if overload == "string_to_bytes":
                return cost, Range(sz.lo, min(sz.hi * 4, MAX_U64))
            return cost, Range(sz.lo // 4, sz.hi)
        if overload in ("add_string", "add_bytes", "add_list") and len(args) == 2:
            result = self.size_or_unknown(args[0]).add(self.size_or_unknown(args[1]))
            left, right = self.entry(args[0]), self.entry(args[1])
            if left is not None:
                joined = left.union(right)
                if joined is not None:
                    self.entries[id(e)] = joined
            if overload == "add_list":
                return ONE.add(args_sum), result
            return result.factor(STRING_TRAVERSAL).add(args_sum), result
        if name in ("_==_", "_!=_") or (
            name in ("_<_", "_<=_", "_>_", "_>=_") and overload.endswith(("_string", "_bytes"))
        ):
            lhs, rhs = self.size_or_unknown(args[0]), self.size_or_unknown(args[1])
            smallest = min(lhs.hi, rhs.hi)
            return Range(1 if smallest > 0 else 0, smallest).factor(STRING_TRAVERSAL).add(
                args_sum
            ), None
        return ONE.add(args_sum), None

    def kubernetes_cost(self, e: Node) -> tuple[Range, Range | None] | None:
        """k8s.io/apiserver/pkg/cel/library CostEstimator.EstimateCallCost (the DRA subset)."""
        name, target, args = e.name, e.target, e.args
        if name in _FIXED_K8S:
            return ONE, None
        if name in ("isSorted", "sum", "max", "min", "indexOf", "lastIndexOf") and target:
            target_type = self.type_of(target)
            if _kind(target_type) == "list" or target_type == DYN:
                element_cost = ONE
                elem_type = target_type[1] if isinstance(target_type, tuple) else DYN
                if elem_type in ("string", "bytes"):
                    base = self.path(target)
                    elem_size = _path_size((*base, "@items") if base else None) or UNKNOWN
                    element_cost = element_cost.add(elem_size.factor(STRING_TRAVERSAL))
                return self.size_or_unknown(target).mul(element_cost), None
            return self.size_or_unknown(target).factor(STRING_TRAVERSAL), None
        if name in ("lowerAscii", "upperAscii", "substring", "trim") and target:
            size = self.size_or_unknown(target)
            return size.factor(STRING_TRAVERSAL), size
        if name == "replace" and target and len(args) >= 2:
            return self._replace(target, args)
        if name == "split" and target:
            size = self.size_or_unknown(target)
            return size.factor(2 * STRING_TRAVERSAL), Range(0, size.hi)
        if name == "join" and target:
            list_size = self.size_or_unknown(target)
            target_type = self.type_of(target)
            size = ZERO
            if isinstance(target_type, tuple):
                base = self.path(target)
                elem = _path_size((*base, "@items") if base else None) or UNKNOWN
                size = list_size.mul(elem)
            if args:
                sep = self.size_or_unknown(args[0])
                separators = Range(max(list_size.lo - 1, 0), max(list_size.hi - 1, 0))
                size = size.add(sep.mul(separators))
            return size.factor(STRING_TRAVERSAL), size
        if name in ("find", "findAll") and target and args:
            size = self.size_or_unknown(target)
            string_cost = size.add(ONE).factor(STRING_TRAVERSAL)
            regex_cost = self.size_or_unknown(args[0]).factor(REGEX_LENGTH)
            return string_cost.mul(regex_cost), Range(0, size.hi)
        if name in ("quantity", "isQuantity", "semver", "isSemver") and target and args:
            return self.size_or_unknown(args[0]).factor(STRING_TRAVERSAL), None
        if name == "_==_" and len(args) == 2:
            lhs, rhs = self.type_of(args[0]), self.type_of(args[1])
            if lhs == rhs and lhs in ("quantity", "semver"):
                return ONE, None
        if name in ("format", "quote", "charAt", "reverse") or name.startswith("sets."):
            return None
        return None

    def _replace(self, target: Node, args: list[Node]) -> tuple[Range, Range | None]:
        size = self.size_or_unknown(target)
        old = self.size_or_unknown(args[0])
        new = self.size_or_unknown(args[1])
        if old.lo == 0:
            count_hi = size.hi + 1 if size.hi < MAX_U64 else size.hi
            retained_hi = size.hi
        elif new.hi <= old.lo:
            count_hi, retained_hi = 0, size.hi
        else:
            count_hi, retained_hi = math.ceil(size.hi / old.lo), 0
        if old.hi == 0:
            count_lo = size.lo + 1 if size.lo < MAX_U64 else size.lo
            retained_lo = size.lo
        elif old.hi <= new.lo:
            count_lo, retained_lo = 0, size.lo
        else:
            count_lo, retained_lo = math.ceil(size.lo / old.hi), 0
        result = Range(count_lo, count_hi).mul(new).add(Range(retained_lo, retained_hi))
        return size.factor(2 * STRING_TRAVERSAL), result


def estimate_cost(expression: str) -> int:
    """The maximum of cel-go's cost estimate for ``expression`` as a DRA selector.

    Raises :class:`UnsupportedError` for syntax this model cannot parse.
    """
    tree = parse(expression)
    return _Coster().cost(tree).hi
