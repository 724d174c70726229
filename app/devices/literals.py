"""Selectors simple enough to answer without CEL: a string attribute compared with string
literals.

``device.attributes["gpu.nvidia.com"].uuid == "GPU-1"`` (or ``!=``, the literal on either
side, or ``... in ["GPU-1", "GPU-2"]``) reads one value of its own on every device: grouped
evaluation shares nothing there, and a CEL evaluation per device (an activation each) costs
~11 us. Such a selector is recognized on its tokens (:mod:`app.cel.syntax`) and answered from
the device's column value when that value is a string: the same answer CEL gives, as string
equality is exact in both. Any other value (a missing attribute, which errs in CEL, or a value
of another type) is left to CEL, so errors and their messages stay CEL's own. An answer given
here is not charged to the review's CEL budget: it is a set lookup, not an evaluation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from app.cel.syntax import Token, device_paths, string_value, tokenize
from app.devices.columns import MISSING

__all__ = ["Comparison", "comparison", "decide", "decide_all"]

_EQUALITY: Final = ("==", "!=")


@dataclass(frozen=True, slots=True)
class Comparison:
    """``path op literals``: op is ``==``/``in`` (the value is one of them) or ``!=``."""

    path: tuple[str, str, str]
    negated: bool
    literals: frozenset[str]


def comparison(text: str) -> Comparison | None:
    """The comparison ``text`` is, or None if it is anything else."""
    paths = device_paths(text)
    if len(paths) != 1:
        return None
    path = paths[0]
    keys = path.keys
    if path.in_has or len(keys) != 3 or keys[0] != "attributes" or None in keys:
        return None
    start, end = path.start, path.end_after(3)
    tokens = tokenize(text)
    before = [t for t in tokens if t.end <= start]
    after = [t for t in tokens if t.start >= end]
    at = (str(keys[0]), str(keys[1]), str(keys[2]))
    if not before and len(after) == 2 and after[0].text in _EQUALITY:
        return _equality(at, after[0], after[1])
    if not after and len(before) == 2 and before[1].text in _EQUALITY:
        return _equality(at, before[1], before[0])
    if not before and len(after) >= 3 and after[0].text == "in" and after[1].text == "[":
        literals = _list(after[1:])
        return None if literals is None else Comparison(at, False, literals)
    return None


def _equality(path: tuple[str, str, str], op: Token, literal: Token) -> Comparison | None:
    value = _plain(literal)
    if value is None:
        return None
    return Comparison(path, op.text == "!=", frozenset((value,)))


def _list(tokens: list[Token]) -> frozenset[str] | None:
    """``[ "a", "b" ]`` (a trailing comma allowed) as its strings."""
    if tokens[-1].text != "]":
        return None
    values = []
    expect_value = True
    for token in tokens[1:-1]:
        if expect_value:
            value = _plain(token)
            if value is None:
                return None
            values.append(value)
        elif token.text != ",":
            return None
        expect_value = not expect_value
    return frozenset(values) if values else None


def _plain(token: Token) -> str | None:
    """A string literal without escapes (the backends decode some escapes differently: such a
    literal is left to the backend's own CEL)."""
    if token.kind != "string" or "\\" in token.text or token.text[:1] in ("b", "B"):
        return None
    return string_value(token.text)


def decide(comparisons: tuple[tuple[int, Comparison], ...], view: tuple[Any, ...]) -> bool | None:
    """Every comparison's answer on a device's view (``view[i]``: its typed value on the i-th
    path), True if all hold, False at the first that does not; None when a value is not a
    string (CEL answers then)."""
    for column, found in comparisons:
        typed = view[column]
        if typed is MISSING or typed[0] is not str:
            return None
        if (typed[1] in found.literals) == found.negated:
            return False
    return True


def decide_all(
    comparisons: tuple[tuple[int, Comparison], ...],
    columns: Sequence[tuple[Any, ...]],
    positions: Sequence[int],
) -> list[bool | None]:
    """:func:`decide` for each device at ``positions`` of a slice whose columns on the plan's
    paths are ``columns`` (one comparison, the common case: one pass over its column)."""
    if len(comparisons) == 1:
        ((at, found),) = comparisons
        column, literals, negated = columns[at], found.literals, found.negated
        return [
            None
            if (typed := column[p]) is MISSING or typed[0] is not str
            else (typed[1] in literals) != negated
            for p in positions
        ]
    return [decide(comparisons, tuple([c[p] for c in columns])) for p in positions]
