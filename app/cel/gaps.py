"""What Kubernetes' DRA CEL environment declares and this webhook's engines lack.

Kubernetes compiles device selectors in an environment with its IP, CIDR, URL, format and
JSONPatch libraries and some of cel-go's extensions; the backends here (cel-expr-python,
cel-python: :mod:`app.cel.backends`) lack some of them, and cel-cpp's parser nests less deep. A
selector refused for such a reason is not wrong: :func:`engine_gap` tells that refusal from the
expression's own error, so the selector check allows it unchecked (the API server compiles it)
and the allocation model leaves a claim it cannot evaluate unchecked rather than "never".
"""

from __future__ import annotations

import re

from app.cel import syntax
from app.cel.errors import CelCompileError

__all__ = ["engine_gap"]

_GAP_FUNCTIONS = frozenset({"ip", "isIP", "cidr", "isCIDR", "url", "isURL"})
"""Global functions of Kubernetes' IP, CIDR and URL libraries."""

_GAP_NAMESPACES = frozenset(
    {"format", "ip", "math", "base64", "lists", "jsonpatch", "strings", "sets"}
)
"""Namespaced functions (``format.dns1123Label()``, ``ip.isCanonical()``, ``math.greatest()``):
Kubernetes' format and JSONPatch libraries and the cel-go extensions its environment registers.
cel-expr-python has ``strings.*`` and ``sets.*``; cel-python does not."""

_GAP_MEMBERS = frozenset(
    {
        # IP and CIDR values
        "family",
        "isUnspecified",
        "isLoopback",
        "isLinkLocalMulticast",
        "isLinkLocalUnicast",
        "isGlobalUnicast",
        "containsIP",
        "containsCIDR",
        "masked",
        "prefixLength",
        # URL values
        "getScheme",
        "getHost",
        "getHostname",
        "getPort",
        "getEscapedPath",
        "getQuery",
        # format values, optional values (cel-python has no optionals)
        "validate",
        "hasValue",
        "orValue",
        "value",
        "optMap",
        "optFlatMap",
        # cel-go's lists and strings extensions
        "distinct",
        "flatten",
        "slice",
        "sort",
        "sortBy",
        "first",
        "last",
        "format",
    }
)
"""Member functions of those libraries' values and extensions."""

_UNDECLARED_RE = re.compile(r"undeclared reference to '([A-Za-z_][A-Za-z0-9_]*)'")


def engine_gap(error: CelCompileError) -> str | None:
    """What Kubernetes' DRA CEL declares that made this engine refuse the expression, or None
    when the error is the expression's own (syntax, unknown device field, an unknown function,
    a type mismatch on a function both have).

    The backends report the first error only: an expression with a gap *and* a real error
    further on is taken as a gap here, and left to the API server.
    """
    message = error.message
    if "recursion limit exceeded" in message.lower():
        return "nesting this deep"
    match = _UNDECLARED_RE.search(message)
    if match is None:
        return _optional_syntax(error)
    name = match.group(1)
    for form in sorted(_call_forms(error.expression, name)):
        if form == "." and name in _GAP_MEMBERS:
            return f".{name}()"
        if form == "" and name in _GAP_FUNCTIONS:
            return f"{name}()"
        if form in _GAP_NAMESPACES:
            return f"{form}.{name}()"
        if form == "namespace" and name in _GAP_NAMESPACES:
            return f"{name}.*"
    return None


def _call_forms(expression: str, name: str) -> set[str]:
    """How ``name`` is used in the expression: "" (global call), "." (member call), the
    identifier before it (``format.named(`` -> "format"), or "namespace" (``math.greatest``)."""
    tokens = syntax.tokenize(expression)
    forms = set()
    for i, token in enumerate(tokens):
        if token.kind != "ident" or token.text != name:
            continue
        after = tokens[i + 1].text if i + 1 < len(tokens) else ""
        before = tokens[i - 1].text if i >= 1 else ""
        if after == "." and before != ".":
            forms.add("namespace")
        if after != "(":
            continue
        if before != ".":
            forms.add("")
            continue
        forms.add(".")
        qualifier = tokens[i - 2] if i >= 2 else None
        if (
            qualifier is not None
            and qualifier.kind == "ident"
            and (i < 3 or tokens[i - 3].text != ".")
        ):
            forms.add(qualifier.text)
    return forms


def _optional_syntax(error: CelCompileError) -> str | None:
    """cel-python cannot parse optional selection (``.?field``, ``[?key]``)."""
    offset = error.offset
    text = error.expression
    if offset is None or not error.message.startswith("Syntax error"):
        return None
    at = text[max(offset - 1, 0) : offset + 1]
    return "optional selection (.? and [?)" if at in (".?", "[?") else None
