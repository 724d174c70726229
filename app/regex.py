"""Regular expressions that user input reaches, in RE2: linear time, whatever the input.

Python's `re` backtracks: `^(a+)+$` against `"a" * 28 + "!"` takes 16 s, and a request handler
doing that stalls the event loop for every request behind it. Kubernetes' CEL uses RE2 (cel-go
and cel-cpp both), so CEL's `matches`/`find`/`findAll` and the policy's mapping patterns use it
here too (the `google-re2` binding). RE2 refuses what it cannot do in linear time —
backreferences (`\\1`), lookaround (`(?=`, `(?<!`), possessive quantifiers — with an error, which
callers turn into a compile error, an evaluation error or a startup error, never a crash.

The exception tree: :class:`RegexError` (a ValueError) for any pattern RE2 refuses.
"""

from __future__ import annotations

from typing import Any, Final

import re2

from app.bounded import CacheName, memoized

__all__ = ["RegexError", "compile_re2", "glob_to_re2", "user_pattern"]

_OPTIONS: Final = re2.Options()
_OPTIONS.log_errors = False  # the binding would print every refused pattern to stderr
_USER_PATTERNS_KEPT: Final = 256
_USER_PATTERN_MAX_CHARS: Final = 4096
"""Patterns longer than this are compiled for the call and not kept (the cache holds at most
256 x 4 KiB of pattern text plus their compiled programs, each bounded by RE2's max_mem)."""


class RegexError(ValueError):
    """RE2 refuses the pattern; the message says why (and that RE2 syntax applies)."""


def compile_re2(pattern: str) -> Any:
    """The compiled pattern; raises :class:`RegexError`."""
    try:
        return re2.compile(pattern, _OPTIONS)
    except re2.error as error:
        reason = error.args[0] if error.args else "invalid pattern"
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        raise RegexError(f"{reason} (RE2 syntax: no backreferences or lookaround)") from None


@memoized(CacheName.REGEX_PATTERNS, _USER_PATTERNS_KEPT)
def _cached(pattern: str) -> Any:
    return compile_re2(pattern)


def user_pattern(pattern: str) -> Any:
    """A pattern from user input, compiled once while it is among the recent few."""
    if len(pattern) > _USER_PATTERN_MAX_CHARS:
        return compile_re2(pattern)
    return _cached(pattern)


def glob_to_re2(glob: str) -> str:
    """A shell-style pattern (`*`, `?`, `[seq]`, `[!seq]`, as fnmatch) as an RE2 pattern."""
    out: list[str] = []
    i, end = 0, len(glob)
    while i < end:
        ch = glob[i]
        i += 1
        if ch == "*":
            out.append(".*")
        elif ch == "?":
            out.append(".")
        elif ch == "[":
            close = glob.find("]", i + 1 if glob[i : i + 1] in ("!", "]") else i)
            if close < 0:
                out.append(r"\[")
                continue
            body = glob[i:close]
            i = close + 1
            negate = body.startswith("!")
            body = body[1:] if negate else body
            body = body.replace("\\", r"\\").replace("[", r"\[").replace("^", r"\^")
            out.append(f"[{'^' if negate else ''}{body}]")
        else:
            out.append(_escape(ch))
    return "(?s:" + "".join(out) + ")"


def _escape(ch: str) -> str:
    return "\\" + ch if not ch.isalnum() and ch != "_" and ord(ch) < 128 else ch
