"""A small CEL tokenizer and the source-level analyses built on it.

Neither backend exposes a typed AST we can walk, so the few things the webhook needs to know about
an expression's *text* are found here, on tokens:

- every path into the DRA ``device`` variable (``device.capacity["gpu.example.com"].memory``),
  with the source span of each step. Paths drive three things: the Kubernetes device type given
  to the type checker (:func:`typed_for_checker`), the "unknown domain is an empty map" rule for
  backends whose maps cannot have a default (:func:`optional_domains`), and which parts of a
  device an expression can see at all (:func:`device_paths`), so devices that look the same to
  a selector are evaluated once;
- ``cel.bind`` for a backend without the bindings extension (:func:`expand_bind`).

Rewrites keep every character of the original outside the rewritten span, and
:func:`typed_for_checker` keeps the length of the whole text, so positions reported on the
rewritten text are positions in the original.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

__all__ = [
    "DEVICE_FIELDS",
    "DevicePath",
    "Token",
    "device_paths",
    "expand_bind",
    "fold_constructors",
    "number_out_of_range",
    "optional_domains",
    "position",
    "string_value",
    "tokenize",
    "typed_for_checker",
    "unknown_device_field",
]

DEVICE_FIELDS: Final = frozenset({"driver", "attributes", "capacity", "allowMultipleAllocations"})

_TOKEN_RE: Final = re.compile(
    r"""
    (?P<space>[\t\n\f\r ]+)
  | (?P<comment>//[^\n]*)
  | (?P<string>(?:[bB][rR]?|[rR][bB]?)?(?:\"\"\"(?:\\.|[^\\])*?\"\"\"|'''(?:\\.|[^\\])*?'''
        |"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*'))
  | (?P<number>0[xX][0-9a-fA-F]+[uU]?|\d+\.\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?
        |\d+[eE][+-]?\d+|\d+[uU]?)
  | (?P<ident>[_a-zA-Z][_a-zA-Z0-9]*)
  | (?P<punct>==|!=|<=|>=|&&|\|\||[-+*/%!<>?:.,\[\]{}()])
  | (?P<other>.)
    """,
    re.VERBOSE | re.DOTALL,
)
_SIMPLE_STRING: Final = re.compile(r"""^(?:"([^"\\\n]*)"|'([^'\\\n]*)')$""")
_OPEN: Final = {"(": ")", "[": "]", "{": "}"}


@dataclass(frozen=True, slots=True)
class Token:
    kind: str
    text: str
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class Step:
    """One step of a device path: ``.name`` or ``[key]`` (``key`` None when not a literal)."""

    key: str | None
    start: int
    end: int
    key_start: int
    key_end: int
    is_field: bool


@dataclass(frozen=True, slots=True)
class DevicePath:
    """``device`` followed by field selections and literal-key indexes, as written."""

    start: int
    steps: tuple[Step, ...]
    in_has: bool

    @property
    def keys(self) -> tuple[str | None, ...]:
        return tuple(step.key for step in self.steps)

    def end_after(self, count: int) -> int:
        return self.steps[count - 1].end if count else self.start + len("device")


def tokenize(text: str) -> list[Token]:
    """Significant tokens of ``text`` (whitespace and comments dropped)."""
    tokens = []
    for match in _TOKEN_RE.finditer(text):
        kind = match.lastgroup or "other"
        if kind in ("space", "comment"):
            continue
        tokens.append(Token(kind, match.group(), match.start(), match.end()))
    return tokens


_MAX_INT_MAGNITUDE: Final = 2**63
_MAX_UINT: Final = 2**64 - 1
_MAX_INT_DIGITS: Final = 20
"""No int64 or uint64 has more digits (in decimal or hex): longer literals are out of range
without being converted (Python's int() refuses over 4300 digits with a plain ValueError)."""


def number_out_of_range(text: str) -> Token | None:
    """The first integer literal that is neither an int64 nor a uint64 literal in range.

    cel-go and cel-cpp refuse such a literal when parsing; a backend that converts literals only
    when it evaluates them must be told here. The magnitude may reach 2^63 (``-9223372036854775808``
    is a valid int literal; the sign is a separate token).
    """
    for token in tokenize(text):
        if token.kind != "number" or "." in token.text:
            continue
        body = token.text
        if body[:2].lower() != "0x" and any(c in "eE" for c in body):
            continue  # a double
        unsigned = body[-1] in "uU"
        digits = body[:-1] if unsigned else body
        hexadecimal = digits[:2].lower() == "0x"
        digits = digits[2:] if hexadecimal else digits
        significant = digits.lstrip("0")
        if len(significant) > _MAX_INT_DIGITS:
            return token
        value = int(significant or "0", 16 if hexadecimal else 10)
        if value > (_MAX_UINT if unsigned else _MAX_INT_MAGNITUDE):
            return token
    return None


def position(text: str, offset: int) -> tuple[int, int]:
    """1-based line and column of a 0-based character offset."""
    line = text.count("\n", 0, offset) + 1
    column = offset - (text.rfind("\n", 0, offset) + 1) + 1
    return line, column


def offset(text: str, line: int, column: int) -> int:
    """The 0-based offset of a 1-based line and column (the inverse of `position`)."""
    start = 0
    for _ in range(line - 1):
        newline = text.find("\n", start)
        if newline < 0:
            break
        start = newline + 1
    return min(start + column - 1, len(text))


_ESCAPES: Final = {
    "\\": "\\",
    '"': '"',
    "'": "'",
    "`": "`",
    "?": "?",
    "n": "\n",
    "t": "\t",
    "r": "\r",
    "a": "\a",
    "b": "\b",
    "f": "\f",
    "v": "\v",
}


def string_value(text: str) -> str | None:
    """The value of a (single-line, single- or double-quoted, optionally raw) CEL string literal;
    None for other literals or escapes this does not decode (\\x, \\u, octal)."""
    raw = text[:1] in ("r", "R")
    body = text[1:] if raw else text
    if len(body) < 2 or body[0] not in "'\"" or body[-1] != body[0] or body[:3] in ('"""', "'''"):
        return None
    body = body[1:-1]
    if raw or "\\" not in body:
        return body
    out: list[str] = []
    i = 0
    while i < len(body):
        ch = body[i]
        if ch != "\\":
            out.append(ch)
            i += 1
            continue
        decoded = _ESCAPES.get(body[i + 1 : i + 2])
        if decoded is None:
            return None
        out.append(decoded)
        i += 2
    return "".join(out)


def _literal_key(token: Token) -> str | None:
    match = _SIMPLE_STRING.match(token.text)
    if not match:
        return None
    return match.group(1) if match.group(1) is not None else match.group(2)


def _closing(tokens: list[Token], index: int) -> int:
    """Index of the token closing the bracket at ``index`` (len(tokens) if unbalanced)."""
    depth = 0
    for i in range(index, len(tokens)):
        text = tokens[i].text
        if tokens[i].kind != "punct":
            continue
        if text in _OPEN:
            depth += 1
        elif text in (")", "]", "}"):
            depth -= 1
            if depth == 0:
                return i
    return len(tokens)


def device_paths(text: str, variable: str = "device") -> list[DevicePath]:
    """Every use of the root variable ``variable`` with the steps that follow it."""
    tokens = tokenize(text)
    paths = []
    for i, token in enumerate(tokens):
        if token.kind != "ident" or token.text != variable:
            continue
        if i > 0 and tokens[i - 1].text == ".":
            continue
        if i + 1 < len(tokens) and tokens[i + 1].text == "(":
            continue
        steps: list[Step] = []
        j = i + 1
        while j < len(tokens):
            nxt = tokens[j]
            if (
                nxt.text == "."
                and j + 1 < len(tokens)
                and tokens[j + 1].kind == "ident"
                and not (j + 2 < len(tokens) and tokens[j + 2].text == "(")
            ):
                name = tokens[j + 1]
                steps.append(Step(name.text, nxt.start, name.end, name.start, name.end, True))
                j += 2
                continue
            if nxt.text == "[" and not (j + 1 < len(tokens) and tokens[j + 1].text == "?"):
                close = _closing(tokens, j)
                if close >= len(tokens):
                    break
                inner = tokens[j + 1 : close]
                key = _literal_key(inner[0]) if len(inner) == 1 else None
                if inner:
                    steps.append(
                        Step(
                            key, nxt.start, tokens[close].end, inner[0].start, inner[-1].end, False
                        )
                    )
                j = close + 1
                if key is None:
                    break
                continue
            break
        in_has = (
            i >= 2
            and tokens[i - 1].text == "("
            and tokens[i - 2].text == "has"
            and j < len(tokens)
            and tokens[j].text == ")"
        )
        paths.append(DevicePath(token.start, tuple(steps), in_has))
    return paths


def unknown_device_field(paths: list[DevicePath]) -> tuple[str, int] | None:
    """The first ``device.<field>`` that the Kubernetes device type does not have."""
    for path in paths:
        if path.steps and path.steps[0].is_field and path.steps[0].key not in DEVICE_FIELDS:
            return str(path.steps[0].key), path.steps[0].key_start
    return None


# Placeholder identifiers the type checker declares with the Kubernetes device types.
PLACEHOLDER_DRIVER: Final = "__dd"
PLACEHOLDER_MULTI: Final = "__db"
PLACEHOLDER_ATTRIBUTES: Final = "__dA"
PLACEHOLDER_ATTRIBUTE_DOMAIN: Final = "__dD"
PLACEHOLDER_ATTRIBUTE: Final = "__da"
PLACEHOLDER_CAPACITIES: Final = "__dC"
PLACEHOLDER_CAPACITY_DOMAIN: Final = "__dK"
PLACEHOLDER_CAPACITY: Final = "__dc"


def _placeholder(keys: tuple[str | None, ...]) -> tuple[str, int] | None:
    """The typed stand-in for the longest typed prefix of a path, and how many steps it covers."""
    if not keys or keys[0] is None:
        return None
    head = keys[0]
    if head == "driver":
        return PLACEHOLDER_DRIVER, 1
    if head == "allowMultipleAllocations":
        return PLACEHOLDER_MULTI, 1
    if head not in ("attributes", "capacity"):
        return None
    names = (
        (PLACEHOLDER_ATTRIBUTES, PLACEHOLDER_ATTRIBUTE_DOMAIN, PLACEHOLDER_ATTRIBUTE)
        if head == "attributes"
        else (PLACEHOLDER_CAPACITIES, PLACEHOLDER_CAPACITY_DOMAIN, PLACEHOLDER_CAPACITY)
    )
    covered = 1
    while covered < min(len(keys), 3) and keys[covered] is not None:
        covered += 1
    return names[covered - 1], covered


def typed_for_checker(text: str, paths: list[DevicePath]) -> str:
    """``text`` with device paths replaced by typed placeholders of the same length.

    ``device.capacity["gpu.example.com"].memory`` becomes ``__dc`` padded with spaces: the checker
    declares ``__dc`` a Quantity, so ``memory >= "40Gi"`` fails to compile as it does in
    Kubernetes, and every position after the path is unchanged.
    """
    out = list(text)
    for path in paths:
        keys = path.keys
        if path.in_has:
            keys = keys[:-1]
        found = _placeholder(keys)
        if found is None:
            continue
        name, covered = found
        end = path.end_after(covered)
        span = text[path.start : end]
        if "\n" in span[: len(name)]:
            continue
        replacement = name + "".join("\n" if c == "\n" else " " for c in span[len(name) :])
        out[path.start : end] = replacement
    return "".join(out)


def optional_domains(text: str, paths: list[DevicePath]) -> str:
    """``device.attributes[D]`` rewritten to ``device.attributes[?D].orValue({})``.

    Kubernetes answers an unknown domain with an empty map; this gives the same answer on a
    backend whose maps raise on a missing key. Spans are rewritten from the end so earlier
    offsets stay valid; paths whose domain step is inside another path's key are left alone.
    """
    edits = []
    for path in paths:
        if len(path.steps) < 2 or path.keys[0] not in ("attributes", "capacity"):
            continue
        if path.in_has and len(path.steps) == 2:
            continue
        domain = path.steps[1]
        key_text = repr(domain.key) if domain.is_field else text[domain.key_start : domain.key_end]
        head = text[path.start : path.steps[0].end]
        edits.append((path.start, domain.end, f"{head}[?{key_text}].orValue({{}})"))
    edits.sort()
    result = text
    last_start = len(text) + 1
    for start, end, replacement in reversed(edits):
        if end > last_start:
            continue
        result = result[:start] + replacement + result[end:]
        last_start = start
    return result


def expand_bind(text: str) -> str:
    """``cel.bind(v, init, body)`` rewritten as ``[init].map(v, body)[0]`` (same value)."""
    tokens = tokenize(text)
    for i in range(len(tokens) - 3):
        if (
            tokens[i].text == "cel"
            and tokens[i + 1].text == "."
            and tokens[i + 2].text == "bind"
            and tokens[i + 3].text == "("
            and (i == 0 or tokens[i - 1].text != ".")
        ):
            close = _closing(tokens, i + 3)
            if close >= len(tokens):
                return text
            args = _split_args(text, tokens, i + 3, close)
            if len(args) != 3:
                return text
            var, init, body = (expand_bind(arg).strip() for arg in args)
            replacement = f"[{init}].map({var}, {body})[0]"
            start, end = tokens[i].start, tokens[close].end
            return text[:start] + replacement + expand_bind(text[end:])
    return text


def _split_args(text: str, tokens: list[Token], open_index: int, close_index: int) -> list[str]:
    args = []
    depth = 0
    start = tokens[open_index].end
    for token in tokens[open_index + 1 : close_index]:
        if token.kind == "punct" and token.text in _OPEN:
            depth += 1
        elif token.kind == "punct" and token.text in (")", "]", "}"):
            depth -= 1
        elif token.text == "," and depth == 0:
            args.append(text[start : token.start])
            start = token.end
    args.append(text[start : tokens[close_index].start])
    return args


def fold_constructors(text: str, fold: Callable[[str, str], str | None]) -> str:
    """Replace ``quantity("...")``/``semver("...")`` with a literal ``fold`` returns for it.

    Constructors of a constant are evaluated once at compile time instead of on every
    evaluation. ``fold`` gets the function name and the literal's text and returns the
    replacement source, or None to leave the call alone (an invalid literal stays a call, so it
    still fails at evaluation as in Kubernetes).
    """
    tokens = tokenize(text)
    edits = []
    for i in range(len(tokens) - 3):
        head = tokens[i]
        if head.kind != "ident" or head.text not in ("quantity", "semver"):
            continue
        if i > 0 and tokens[i - 1].text == ".":
            continue
        if tokens[i + 1].text != "(" or tokens[i + 3].text != ")":
            continue
        literal = _literal_key(tokens[i + 2])
        if literal is None:
            continue
        replacement = fold(head.text, literal)
        if replacement is not None:
            edits.append((head.start, tokens[i + 3].end, replacement))
    for start, end, replacement in reversed(edits):
        text = text[:start] + replacement + text[end:]
    return text
