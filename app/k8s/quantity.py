"""Kubernetes ``resource.Quantity``: exact parsing, comparison and the canonical string.

Quantities appear everywhere the webhook looks: ``nvidia.com/gpu: "2"`` in a container's limits,
``memory: 80Gi`` in a ResourceSlice's capacity, ``quantity("40Gi")`` in a CEL selector. This module
reads them the way ``k8s.io/apimachinery/pkg/api/resource`` does, but keeps the value as an exact
:class:`fractions.Fraction`, so no comparison is ever off by a rounding error.

Semantics carried over from Kubernetes:

- grammar ``<sign><digits>[.<digits>]<suffix>`` with suffixes ``n u m "" k M G T P E``
  (powers of 1000), ``Ki Mi Gi Ti Pi Ei`` (powers of 1024) and decimal exponents (``1e3``,
  ``12E-3``); no whitespace, no other letters;
- precision finer than 1n is rounded up, away from zero (``0.1n`` is ``1n``);
- a binary-suffixed value is capped at 2^63-1 in magnitude (``9Ei``);
- the suffix family is remembered and used again by :meth:`Quantity.__str__`, which prints the
  canonical form (``1.5Gi`` prints as ``1536Mi``, ``1.5`` as ``1500m``).

Where this module differs on purpose: an exponent above 1000, or more than 1000 significant
digits, is refused instead of being carried as an astronomically large number (and Python's
int-from-string conversion, which stops at 4300 digits, is never reached with more), a string
with no digits at all (``"Mi"``) is refused as the Kubernetes CEL documentation says, and
``is_integer``/``as_int`` answer for the value (Kubernetes answers for its internal
representation, so ``1000m`` is "not an integer" there).
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Final, Literal

from app.bounded import CacheName, memoized

__all__ = [
    "BINARY_SI",
    "DECIMAL_EXPONENT",
    "DECIMAL_SI",
    "Quantity",
    "QuantityError",
    "QuantityFormat",
    "parse_quantity",
    "whole_count",
]

QuantityFormat = Literal["DecimalSI", "BinarySI", "DecimalExponent"]
DECIMAL_SI: Final = "DecimalSI"
BINARY_SI: Final = "BinarySI"
DECIMAL_EXPONENT: Final = "DecimalExponent"

_FORMAT_MESSAGE: Final = (
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
)
_MAX_INT64: Final = 2**63 - 1
_MIN_INT64: Final = -(2**63)
_NANO: Final = Fraction(1, 10**9)
_MAX_EXPONENT: Final = 1000
_MAX_DIGITS: Final = 1000
"""Significant digits of a mantissa (leading zeros of the whole part and trailing zeros of the
fraction do not count): well past any real quantity, far below Python's 4300-digit limit."""
_MAX_EXPONENT_DIGITS: Final = 9
"""Kubernetes reads a decimal exponent as an int32 (ParseInt(..., 10, 32)): nine digits at most."""
_SUFFIX_CHARS: Final = frozenset("eEinumkKMGTP")
_DIGITS: Final = frozenset("0123456789")

_DECIMAL_SUFFIXES: Final[dict[str, int]] = {
    "n": -9,
    "u": -6,
    "m": -3,
    "": 0,
    "k": 3,
    "M": 6,
    "G": 9,
    "T": 12,
    "P": 15,
    "E": 18,
}
_DECIMAL_SUFFIX_FOR_EXPONENT: Final[dict[int, str]] = {v: k for k, v in _DECIMAL_SUFFIXES.items()}
_BINARY_SUFFIXES: Final[dict[str, int]] = {
    "Ki": 10,
    "Mi": 20,
    "Gi": 30,
    "Ti": 40,
    "Pi": 50,
    "Ei": 60,
}
_BINARY_SUFFIX_FOR_POWER: Final = ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei")


class QuantityError(ValueError):
    """The text is not a Kubernetes quantity, or a conversion would lose the exact value."""


@functools.total_ordering
@dataclass(frozen=True, eq=False, slots=True)
class Quantity:
    """An exact Kubernetes quantity: a rational ``value`` plus the suffix family to print it in.

    Equality, hashing and ordering look at the value only: ``1Gi == 1073741824`` and
    ``200M == 0.2G``, as ``Quantity.Cmp`` does in Kubernetes.
    """

    value: Fraction
    format: QuantityFormat = DECIMAL_SI
    negative_scale: bool = False
    """Parsed into a representation Kubernetes cannot read as an int64 (`AsInt64` fails): a
    negative scale (``1000m``, ``1.0``) or the arbitrary-precision slow path (over 18 digits,
    ``1.5Gi``). Only CEL's ``isInteger``/``asInteger`` look at it (:meth:`k8s_is_integer`)."""

    @classmethod
    def from_int(cls, number: int, fmt: QuantityFormat = DECIMAL_SI) -> Quantity:
        """The quantity of an integer, like ``resource.NewQuantity(n, format)``."""
        return cls(Fraction(number), fmt)

    # -- comparison -------------------------------------------------------------------------

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Quantity):
            return self.value == other.value
        return NotImplemented

    def __lt__(self, other: object) -> bool:
        if isinstance(other, Quantity):
            return self.value < other.value
        return NotImplemented

    def __hash__(self) -> int:
        value = self.value  # an integral Fraction hashes as its int, which is much cheaper
        return hash(value.numerator) if value.denominator == 1 else hash(value)

    def compare(self, other: Quantity) -> int:
        """-1, 0 or 1, as ``Quantity.Cmp``."""
        return (self.value > other.value) - (self.value < other.value)

    # -- arithmetic (formats follow Quantity.Add/Sub: a zero receiver takes the other's) ------

    def __add__(self, other: Quantity) -> Quantity:
        return Quantity(self.value + other.value, other.format if not self.value else self.format)

    def __sub__(self, other: Quantity) -> Quantity:
        return Quantity(self.value - other.value, other.format if not self.value else self.format)

    def __neg__(self) -> Quantity:
        return Quantity(-self.value, self.format)

    def mul(self, factor: int) -> Quantity:
        """The quantity times an integer, like ``Quantity.Mul``."""
        return Quantity(self.value * factor, self.format)

    # -- conversions --------------------------------------------------------------------------

    def sign(self) -> int:
        """-1, 0 or 1."""
        return (self.value > 0) - (self.value < 0)

    def is_integer(self) -> bool:
        """Whether :meth:`as_int` succeeds: the value is whole and fits in an int64."""
        return self.value.denominator == 1 and _MIN_INT64 <= self.value.numerator <= _MAX_INT64

    def k8s_is_integer(self) -> bool:
        """CEL ``isInteger()``: whether Kubernetes' ``AsInt64`` succeeds, which depends on how
        the quantity was written (``quantity("1000m").isInteger()`` is false)."""
        return not self.negative_scale and self.is_integer()

    def as_int(self) -> int:
        """The exact integer value; :class:`QuantityError` if it has a fraction or overflows."""
        if not self.is_integer():
            raise QuantityError("cannot convert value to integer")
        return self.value.numerator

    def ceil_int(self) -> int:
        """The value rounded up, away from zero, as ``Quantity.Value()`` (``1500m`` is 2)."""
        if self.value >= 0:
            return math.ceil(self.value)
        return math.floor(self.value)

    def as_approximate_float(self) -> float:
        """The nearest float (``inf`` beyond the float range), as ``AsApproximateFloat64``."""
        try:
            return float(self.value)
        except OverflowError:
            return math.inf if self.value > 0 else -math.inf

    # -- text ----------------------------------------------------------------------------------

    def __str__(self) -> str:
        return _canonical(self.value, self.format)

    def __repr__(self) -> str:
        return f"Quantity({str(self)!r})"


def parse_quantity(text: str | int | float) -> Quantity:
    """Parse a quantity as ``resource.ParseQuantity`` does, exactly.

    Accepts the JSON forms a quantity takes on the wire: a string, or a bare number (``2`` in a
    YAML manifest arrives as an int). Raises :class:`QuantityError` on anything else.
    """
    if isinstance(text, bool):
        raise QuantityError(f"not a quantity: {text!r}")
    if isinstance(text, int):
        return Quantity.from_int(text)
    if isinstance(text, float):
        if not math.isfinite(text):
            raise QuantityError(f"not a quantity: {text!r}")
        return _parse_cached(repr(text))
    if not isinstance(text, str):
        raise QuantityError(f"not a quantity: {text!r}")
    return _parse_cached(text)


@memoized(CacheName.QUANTITIES, 4096)
def _parse_cached(text: str) -> Quantity:
    return _parse(text)


def whole_count(raw: object) -> int | None:
    """A device count written as a quantity: a non-negative whole number (`2`, `"2"`, `"1k"`,
    `"2000m"`), else None (absent, not a quantity, fractional or negative). Devices are counted
    in whole numbers: the API server rejects the rest in extended-resource requests and in a
    ResourceQuota's device counts."""
    if isinstance(raw, str):
        return _whole_count_text(raw)
    if not isinstance(raw, int | float) or isinstance(raw, bool):
        return None
    return _whole_count_of(raw)


@memoized(CacheName.WHOLE_NUMBERS, 1024)
def _whole_count_text(raw: str) -> int | None:
    """Memoized: the same few counts ("1", "2", "8") arrive again and again."""
    return _whole_count_of(raw)


def _whole_count_of(raw: str | int | float) -> int | None:
    try:
        quantity = parse_quantity(raw)
    except QuantityError:
        return None
    if not quantity.is_integer() or quantity.sign() < 0:
        return None
    return quantity.as_int()


def _parse(text: str) -> Quantity:
    if not text:
        raise QuantityError(_FORMAT_MESSAGE)
    if text == "0":
        return Quantity(Fraction(0), DECIMAL_SI)
    negative, whole, fraction, suffix = _split(text)
    base, exponent, fmt = _interpret_suffix(suffix)

    whole_digits, fraction_digits = len(whole), len(fraction)
    whole = whole.lstrip("0")
    fraction = fraction.rstrip("0")
    if len(whole) + len(fraction) > _MAX_DIGITS:
        raise QuantityError(f"quantity has more than {_MAX_DIGITS} significant digits")
    mantissa = int(whole + fraction) if whole or fraction else 0
    if base == 10 and exponent > _MAX_EXPONENT:
        raise QuantityError(f"exponent out of range in quantity {text!r}")
    if base == 10 and len(whole) + exponent < -10:
        # Far below 1n: only "is it zero" survives the rounding up to 1n below.
        value = _NANO if mantissa else Fraction(0)
    else:
        value = Fraction(mantissa, 10 ** len(fraction)) * Fraction(base) ** exponent

    if (value / _NANO).denominator != 1:
        value = math.ceil(value / _NANO) * _NANO
    if fmt == BINARY_SI and value > _MAX_INT64:
        value = Fraction(_MAX_INT64)
    if fmt == BINARY_SI and 0 < value < 1:
        fmt = DECIMAL_SI
    return Quantity(
        -value if negative else value,
        fmt,
        not _int64_representation(base, exponent, whole_digits, fraction_digits),
    )


def _int64_representation(base: int, exponent: int, whole: int, fraction: int) -> bool:
    """Whether ParseQuantity's fast path stores the value as an int64 at scale >= 0 (so that
    AsInt64 can succeed), from the digit counts as written (resource.ParseQuantity)."""
    if base == 2:
        return fraction == 0 and 15 - whole - int(exponent * 3 / 10) - 1 >= 0
    return 18 - (whole + fraction) >= 0 and exponent - fraction >= 0


def _split(text: str) -> tuple[bool, str, str, str]:
    """Cut ``text`` into sign, whole digits, fraction digits and suffix (parseQuantityString)."""
    pos, end = 0, len(text)
    negative = False
    if text[0] in "+-":
        negative = text[0] == "-"
        pos = 1
    start = pos
    while pos < end and text[pos] in _DIGITS:
        pos += 1
    whole = text[start:pos]
    fraction = ""
    if pos < end and text[pos] == ".":
        pos += 1
        start = pos
        while pos < end and text[pos] in _DIGITS:
            pos += 1
        fraction = text[start:pos]
    if not whole and not fraction:
        raise QuantityError(_FORMAT_MESSAGE)
    suffix_start = pos
    while pos < end and text[pos] in _SUFFIX_CHARS:
        pos += 1
    if pos < end and text[pos] in "+-":
        pos += 1
    while pos < end and text[pos] in _DIGITS:
        pos += 1
    if pos != end:
        raise QuantityError(_FORMAT_MESSAGE)
    return negative, whole, fraction, text[suffix_start:]


def _interpret_suffix(suffix: str) -> tuple[int, int, QuantityFormat]:
    if suffix in _DECIMAL_SUFFIXES:
        return 10, _DECIMAL_SUFFIXES[suffix], DECIMAL_SI
    if suffix in _BINARY_SUFFIXES:
        return 2, _BINARY_SUFFIXES[suffix], BINARY_SI
    if len(suffix) > 1 and suffix[0] in "eE":
        digits = suffix[1:]
        body = digits[1:] if digits[0] in "+-" else digits
        if body and all(c in _DIGITS for c in body):
            if len(body.lstrip("0")) > _MAX_EXPONENT_DIGITS:
                raise QuantityError("unable to parse quantity's suffix")
            return 10, int(digits), DECIMAL_EXPONENT
    raise QuantityError("unable to parse quantity's suffix")


def _canonical(value: Fraction, fmt: QuantityFormat) -> str:
    """The canonical text (Quantity.CanonicalizeBytes): no fraction digits, largest suffix."""
    if not value:
        return "0"
    sign = "-" if value < 0 else ""
    magnitude = abs(value)
    if fmt == BINARY_SI and magnitude >= 1024 and magnitude.denominator == 1:
        number, power = magnitude.numerator, 0
        while number % 1024 == 0 and power < len(_BINARY_SUFFIX_FOR_POWER) - 1:
            number //= 1024
            power += 1
        return f"{sign}{number}{_BINARY_SUFFIX_FOR_POWER[power]}"

    mantissa, exponent = _decimal_parts(magnitude)
    if fmt == DECIMAL_EXPONENT:
        return f"{sign}{mantissa}" + (f"e{exponent}" if exponent else "")
    if exponent > 18:
        mantissa, exponent = mantissa * 10 ** (exponent - 18), 18
    suffix = _DECIMAL_SUFFIX_FOR_EXPONENT.get(exponent)
    if suffix is None:
        return f"{sign}{mantissa}e{exponent}"
    return f"{sign}{mantissa}{suffix}"


def _decimal_parts(magnitude: Fraction) -> tuple[int, int]:
    """``magnitude == mantissa * 10**exponent`` with an integer mantissa, exponent % 3 == 0."""
    shift = 0
    scaled = magnitude
    while scaled.denominator != 1:
        if shift > 30:  # not a decimal fraction; cannot come out of parsing
            scaled = Fraction(math.ceil(scaled))
            break
        scaled *= 10
        shift += 1
    mantissa, exponent = scaled.numerator, -shift
    while mantissa % 10 == 0:
        mantissa //= 10
        exponent += 1
    while exponent % 3:
        mantissa *= 10
        exponent -= 1
    return mantissa, exponent


_MAY_BE_ZERO = re.compile(r"[+-]?[0.]+([eE][-+]?[0-9]+|[A-Za-z]*)")
"""The text of every quantity of zero (and a few non-quantities, which then fail to parse)."""


_NONZERO_DIGITS = frozenset("123456789")


def is_zero(amount: Any) -> bool:
    """Whether an amount is absent or a quantity of zero (`0`, `"0"`, `"0Mi"`); an amount that
    does not parse is not zero (it is reported as written)."""
    if amount is None:
        return True
    if type(amount) is str and amount[:1] in _NONZERO_DIGITS:
        return False  # a count like "2": a nonzero leading digit is never zero, whatever follows
    if isinstance(amount, bool):
        return False
    if isinstance(amount, int | float):
        return amount == 0
    if not isinstance(amount, str) or not _MAY_BE_ZERO.fullmatch(amount):
        return False  # the common case, a count like "2", costs one regex match
    try:
        return parse_quantity(amount).sign() == 0
    except QuantityError:
        return False
