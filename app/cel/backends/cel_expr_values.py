"""How cel-expr-python carries Kubernetes quantities and semvers: tagged strings, decoded once.

cel-cpp knows no Kubernetes types, so the backend (`cel_expr.py`) hands a Quantity or Semver to
it as a string that starts with a tag, and decodes such strings back when a library function
receives one. The decodings and their comparison keys are memoized in bounded caches
(`app.bounded`); the comparisons selectors use most read them without counting a hit.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable, Mapping
from fractions import Fraction
from typing import Any, Final

from app.bounded import BoundedCache, CacheName
from app.cel.semver import Semver, parse_semver
from app.k8s.quantity import Quantity

# A tag holds a random key drawn per process: a string that came from outside (an object, a
# device attribute, a literal in an expression) cannot be taken for a tagged value, since it
# cannot know the key. Error texts and string results never show it (see `scrub`).
TAG_KEY: Final = secrets.token_hex(8)
QUANTITY_TAG: Final = f"\x01k8s.q.{TAG_KEY}\x02"
SEMVER_TAG: Final = f"\x01k8s.v.{TAG_KEY}\x02"
TAG_LENGTH: Final = len(QUANTITY_TAG)
QUANTITY_BODY_RE: Final = re.compile(r"(-?[0-9]+)/([1-9][0-9]*)")
NOT_A_STRING: Final = "no such overload: a quantity or semver used as a string"


DECODED_LIMIT: Final = 65536
decoded: BoundedCache[str, Quantity | Semver] = BoundedCache(
    CacheName.CEL_TAGGED_VALUES, DECODED_LIMIT
)


def encode(value: Any) -> Any:
    if isinstance(value, Quantity):
        v = value.value
        return f"{QUANTITY_TAG}{v.numerator}/{v.denominator}"
    if isinstance(value, Semver):
        pre = "-" + ".".join(str(p) for p in value.pre) if value.pre else ""
        return f"{SEMVER_TAG}{value.major}.{value.minor}.{value.patch}{pre}"
    if isinstance(value, list | tuple):
        return [encode(v) for v in value]
    if isinstance(value, Mapping):
        return {k: encode(v) for k, v in value.items()}
    return value


def decode_tagged(text: str) -> Quantity | Semver:
    cached = decoded.get(text)
    if cached is not None:
        return cached
    body = text[TAG_LENGTH:]
    result: Quantity | Semver
    if text.startswith(QUANTITY_TAG):
        match = QUANTITY_BODY_RE.fullmatch(body)
        if match is None:
            raise ValueError(NOT_A_STRING)
        result = Quantity(Fraction(int(match.group(1)), int(match.group(2))))
    else:
        try:
            result = parse_semver(body)
        except ValueError:
            raise ValueError(NOT_A_STRING) from None
    return decoded.put(text, result)


def scrub(text: str) -> str:
    """`text` without the tags' key (an error or a string result may carry a tagged value)."""
    if TAG_KEY not in text:
        return text
    return text.replace(QUANTITY_TAG, "quantity:").replace(SEMVER_TAG, "semver:")


def decode(value: Any) -> Any:
    if isinstance(value, str):
        if value[:1] == "\x01" and value[:TAG_LENGTH] in (QUANTITY_TAG, SEMVER_TAG):
            return decode_tagged(value)
        return value
    if isinstance(value, list):
        return [decode(v) for v in value]
    if isinstance(value, dict):
        return {decode(k): decode(v) for k, v in value.items()}
    return value


order_keys: BoundedCache[str, tuple[type, Any]] = BoundedCache(
    CacheName.CEL_ORDER_KEYS, DECODED_LIMIT
)


def order_key(value: Any) -> tuple[type, Any]:
    """(type, key) whose natural order is the Quantity/Semver order, cached per runtime value."""
    cached = order_keys.get(value)
    if cached is not None:
        return cached
    if not (isinstance(value, str) and value[:TAG_LENGTH] in (QUANTITY_TAG, SEMVER_TAG)):
        raise ValueError(f"no such overload for argument {value!r}")
    decoded = decode_tagged(value)
    key: tuple[type, Any]
    if isinstance(decoded, Quantity):
        v = decoded.value
        # Parsed quantities are whole multiples of 1n; compare those as integers.
        nano, rest = divmod(v.numerator * 10**9, v.denominator)
        key = (Quantity, nano if rest == 0 else v)
    else:
        pre = tuple((0, p, "") if isinstance(p, int) else (1, 0, p) for p in decoded.pre)
        key = (Semver, (decoded.major, decoded.minor, decoded.patch, 0 if pre else 1, pre))
    return order_keys.put(value, key)


def comparison(name: str) -> Callable[[Any, Any], Any]:
    """Fast path for the comparisons selectors use most: two dict lookups and one compare."""
    known = order_keys.reader()

    def is_greater_than(a: Any, b: Any) -> bool:
        ka, kb = known(a) or order_key(a), known(b) or order_key(b)
        if ka[0] is not kb[0]:
            raise ValueError("no such overload: isGreaterThan")
        return bool(ka[1] > kb[1])

    def is_less_than(a: Any, b: Any) -> bool:
        ka, kb = known(a) or order_key(a), known(b) or order_key(b)
        if ka[0] is not kb[0]:
            raise ValueError("no such overload: isLessThan")
        return bool(ka[1] < kb[1])

    def compare_to(a: Any, b: Any) -> int:
        ka, kb = known(a) or order_key(a), known(b) or order_key(b)
        if ka[0] is not kb[0]:
            raise ValueError("no such overload: compareTo")
        return int(ka[1] > kb[1]) - int(ka[1] < kb[1])

    return {
        "isGreaterThan": is_greater_than,
        "isLessThan": is_less_than,
        "compareTo": compare_to,
    }[name]


COMPARISONS: Final = frozenset({"isGreaterThan", "isLessThan", "compareTo"})
