"""Static cost of a DRA selector, and the per-review CEL budget.

Kubernetes refuses a DRA selector longer than 10 KiB or whose estimated cost exceeds 1,000,000
(`resource.k8s.io` validation: CELSelectorExpressionMaxLength, CELSelectorExpressionMaxCost,
checked with cel-go's cost estimator over the DRA device type). :func:`estimate` is that
estimate, computed by :mod:`app.cel.estimate` (a port of cel-go's estimator with the DRA size
bounds and the Kubernetes library costs), once per compile and kept with the compiled program.

Syntax the port cannot parse (celpy's grammar lacks the optional-value syntax ``.?x``/``[?k]``)
falls back to the coarse token estimate below, which is what the webhook used before: a bound
of the work of one evaluation, not the API server's figure.

The per-review budget (:class:`Budget`) charges each selector evaluation its estimate and each
selector compiled for the review a fixed amount. Compiling is bounded on its own
(`cel.compileBudget`): a compile with its estimate is 0.3 to 1 ms of CPU here, not the 40 µs the
fixed amount stands for, so a claim within the API server's limits (32 requests x 8
alternatives x 32 selectors) spent seconds compiling before the units ran out. The text the
review may ask to compile is checked before any of it is parsed (:meth:`Budget.admit`), the
count and CPU time of new compiles before each one (:meth:`Budget.before_compile`, from
:class:`app.cel.cache.CompileCache`); an expression already compiled is free.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from app.cel import syntax
from app.cel.errors import CelError
from app.cel.estimate import UnsupportedError, estimate_cost
from app.config.policy import CompileBudget

__all__ = [
    "COMPILE_CHARGE",
    "MAX_SELECTOR_COST",
    "MAX_SELECTOR_LENGTH",
    "Budget",
    "BudgetExceededError",
    "coarse_estimate",
    "estimate",
]

MAX_SELECTOR_LENGTH: Final = 10 * 1024
MAX_SELECTOR_COST: Final = 1_000_000
COMPILE_CHARGE: Final = 1_000
"""What checking one not-yet-compiled selector costs a review's budget (a compile is ~40 µs,
about as long as 1,000 units of evaluation)."""
_MACROS: Final = frozenset({"all", "exists", "exists_one", "map", "filter"})
_UNKNOWN_RANGE: Final = 32
_CLOSE: Final = {"(": ")", "[": "]", "{": "}"}


class BudgetExceededError(CelError):
    """The review spent its CEL budget."""


MEMO_TEXT_PER_REVIEW: Final = 64 * 1024
"""Selector text (distinct expressions, in bytes) past which a review's CEL work is done but
not memoized: compiled programs, device matches and verdicts of a review that large are not
kept, so one review cannot flood the caches (its work is still capped by its Budget). Claims
people write stay far below it: 32 requests of 32 selectors of 64 characters reach it."""


class Budget:
    """Units a review may spend on CEL; `charge` raises :class:`BudgetExceededError` past it.
    With ``compiles`` (`cel.compileBudget`), what it may compile is bounded too
    (:meth:`admit`, :meth:`before_compile`); without, only the units bound it.

    ``memoize``: whether what the review's CEL work makes may be kept in the caches
    (:meth:`memoize_unless_over`); when not, ``scratch`` holds the review's own compiled
    programs (by expression), so each compiles once for the review and goes with it."""

    __slots__ = (
        "compile_seconds",
        "compiled",
        "compiles",
        "limit",
        "memoize",
        "scratch",
        "spent",
        "text",
    )

    def __init__(self, limit: int, compiles: CompileBudget | None = None) -> None:
        self.limit = limit
        self.spent = 0
        self.memoize = True
        self.scratch: dict[object, object] = {}
        self.compiles = compiles
        self.compiled = 0
        """New expressions compiled for the review."""
        self.compile_seconds = 0.0
        """CPU time they took."""
        self.text: int | None = None
        """Bytes of CEL text of the object under review, once :meth:`admit` has read them."""

    def memoize_unless_over(self, expressions: Iterable[str]) -> None:
        """Stop memoizing when the distinct ``expressions`` pass :data:`MEMO_TEXT_PER_REVIEW`."""
        self.memoize = sum(map(len, set(expressions))) <= MEMO_TEXT_PER_REVIEW

    def admit(self, expressions: Iterable[str]) -> None:
        """Before any of them is parsed: raise :class:`BudgetExceededError` when the distinct
        ``expressions`` of the object under review hold more CEL text than `cel.compileBudget`
        allows; else decide ``memoize`` (:meth:`memoize_unless_over`). The object is the same
        for every call on one review's budget: its size is read once."""
        size = self.text
        if size is None:
            distinct = set(expressions)
            size = sum(map(len, distinct))
            if not all(map(str.isascii, distinct)):
                size = sum(len(e.encode()) for e in distinct)
            self.text = size
        if self.compiles is not None and size > self.compiles.text_bytes:
            raise BudgetExceededError(
                f"its selectors hold {size:,} bytes of CEL, over the review's compile budget of "
                f"{self.compiles.text_bytes:,} (cel.compileBudget.bytes)"
            )
        self.memoize = size <= MEMO_TEXT_PER_REVIEW

    def before_compile(self) -> None:
        """Before each new compile: raise :class:`BudgetExceededError` once the review has
        compiled as many new expressions, or spent as much CPU time compiling, as
        `cel.compileBudget` allows."""
        limits = self.compiles
        if limits is None:
            return
        if self.compiled >= limits.expressions:
            raise BudgetExceededError(
                f"the review's compile budget of {limits.expressions:,} new CEL expressions "
                "(cel.compileBudget.expressions) is spent"
            )
        if self.compile_seconds * 1000 >= limits.milliseconds:
            raise BudgetExceededError(
                f"the review's compile budget of {limits.milliseconds:,} ms of CEL compiling "
                "(cel.compileBudget.milliseconds) is spent"
            )

    def count_compile(self, seconds: float) -> None:
        """One new compile, of ``seconds`` of CPU time."""
        self.compiled += 1
        self.compile_seconds += seconds

    def charge(self, units: int) -> None:
        self.spent += units
        if self.spent > self.limit:
            raise BudgetExceededError(
                f"the review's CEL budget of {self.limit:,} cost units (cel.reviewBudget) is spent"
            )


def estimate(expression: str) -> int:
    """cel-go's estimated maximum cost of ``expression`` as a DRA selector (the API server's
    figure), or the coarse token estimate where the port cannot parse the expression."""
    try:
        return estimate_cost(expression)
    except UnsupportedError:
        return coarse_estimate(expression)


def coarse_estimate(expression: str) -> int:
    """A token-based bound of the work of one evaluation (the fallback)."""
    tokens = syntax.tokenize(expression)
    return max(1, round(_cost(tokens, 0, len(tokens))))


def _cost(tokens: list[syntax.Token], start: int, end: int) -> float:
    total = 0.0
    i = start
    while i < end:
        token = tokens[i]
        if token.kind == "string":
            total += len(token.text) / 10
        elif (
            token.kind == "ident"
            and token.text in _MACROS
            and i > start
            and tokens[i - 1].text == "."
            and i + 1 < end
            and tokens[i + 1].text == "("
        ):
            close = _matching(tokens, i + 1, end)
            total += _range_size(tokens, start, i - 1) * (1 + _cost(tokens, i + 2, close))
            i = close + 1
            continue
        elif token.kind != "punct" or token.text not in ("(", ")", ",", "[", "]", "{", "}"):
            total += 1
        i += 1
    return total


def _matching(tokens: list[syntax.Token], open_index: int, end: int) -> int:
    depth = 0
    for j in range(open_index, end):
        text = tokens[j].text
        if tokens[j].kind != "punct":
            continue
        if text in _CLOSE:
            depth += 1
        elif text in (")", "]", "}"):
            depth -= 1
            if depth == 0:
                return j
    return end


def _range_size(tokens: list[syntax.Token], start: int, dot: int) -> int:
    """Elements of a list literal just before ``.macro(`` (top-level commas + 1), else 32."""
    if dot - 1 < start or tokens[dot - 1].text != "]":
        return _UNKNOWN_RANGE
    depth, elements, j = 0, 1, dot - 1
    while j >= start:
        text = tokens[j].text
        if text in (")", "]", "}"):
            depth += 1
        elif text in _CLOSE:
            depth -= 1
            if depth == 0:
                before = tokens[j - 1] if j > start else None
                if text != "[" or (
                    before is not None
                    and (before.kind in ("ident", "string", "number") or before.text in ")]}")
                ):
                    return _UNKNOWN_RANGE  # an index `x[...]`, not a list literal
                empty = j + 1 == dot - 1
                return 0 if empty else elements
        elif text == "," and depth == 1:
            elements += 1
        j -= 1
    return _UNKNOWN_RANGE
