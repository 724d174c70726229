"""Sizes, types and the DRA size estimator of the cost model (`app.cel.estimate`).

Saturating ranges as cel-go's uint64 arithmetic, the checker's types of `device`, and the
maximum sizes `dynamic-resource-allocation/cel` declares for its fields.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Final

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


def type_kind(t: Type) -> str:
    return t[0] if isinstance(t, tuple) else str(t)


def assignable(param: Type, arg: Type) -> bool:
    """Whether an argument of type ``arg`` can bind a parameter of type ``param``."""
    if arg == DYN or param in (DYN, "*"):
        return True
    if isinstance(param, tuple) or isinstance(arg, tuple):
        if not (isinstance(param, tuple) and isinstance(arg, tuple)) or param[0] != arg[0]:
            return False
        return all(assignable(p, a) for p, a in zip(param[1:], arg[1:], strict=True))
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


def path_size(path: tuple[str, ...] | None) -> Range | None:
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
