"""Semantic versions with the semantics of Kubernetes' CEL ``semver()`` (blang/semver v4).

DRA drivers publish versions as ``version`` attributes (``driverVersion: {version: "1.2.3"}``);
selectors compare them with ``isGreaterThan``/``compareTo``. Strict parsing follows semver 2.0:
``MAJOR.MINOR.PATCH[-PRERELEASE][+BUILD]``, no leading zeros, no ``v``. ``normalize=True``
follows the Kubernetes library: drop one leading ``v``, pad ``1``/``1.2`` with zeros, strip
leading zeros. Build metadata is kept for display but ignored by comparison and equality.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Final

from app.bounded import CacheName, memoized

__all__ = ["Semver", "SemverError", "parse_semver"]

_NUMBERS: Final = frozenset("0123456789")
_ALPHANUM: Final = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-")
_MAX_UINT64: Final = 2**64 - 1
_MAX_UINT64_DIGITS: Final = len(str(_MAX_UINT64))
"""Longer digit strings are out of range without converting them (Python's int() refuses more
than 4300 digits with a plain ValueError)."""


class SemverError(ValueError):
    """The text is not a semantic version."""


@functools.total_ordering
@dataclass(frozen=True, eq=False, slots=True)
class Semver:
    """A parsed semantic version; ordered and compared as semver 2.0 precedence."""

    major: int
    minor: int
    patch: int
    pre: tuple[int | str, ...] = ()
    build: tuple[str, ...] = field(default=(), compare=False)

    def compare(self, other: Semver) -> int:
        """-1, 0 or 1 by semver precedence (build metadata ignored)."""
        mine = (self.major, self.minor, self.patch)
        theirs = (other.major, other.minor, other.patch)
        if mine != theirs:
            return -1 if mine < theirs else 1
        if not self.pre or not other.pre:
            return (not self.pre) - (not other.pre)
        for a, b in zip(self.pre, other.pre, strict=False):
            if a == b:
                continue
            if isinstance(a, int) and isinstance(b, int):
                return -1 if a < b else 1
            if isinstance(a, int):
                return -1
            if isinstance(b, int):
                return 1
            return -1 if a < b else 1
        return (len(self.pre) > len(other.pre)) - (len(self.pre) < len(other.pre))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Semver):
            return self.compare(other) == 0
        return NotImplemented

    def __lt__(self, other: object) -> bool:
        if isinstance(other, Semver):
            return self.compare(other) < 0
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self.major, self.minor, self.patch, self.pre))

    def __str__(self) -> str:
        text = f"{self.major}.{self.minor}.{self.patch}"
        if self.pre:
            text += "-" + ".".join(str(p) for p in self.pre)
        if self.build:
            text += "+" + ".".join(self.build)
        return text

    def __repr__(self) -> str:
        return f"Semver({str(self)!r})"


@memoized(CacheName.SEMVERS, 2048)
def parse_semver(text: str, normalize: bool = False) -> Semver:
    """Parse ``text``; raise :class:`SemverError` with blang/semver's message on failure."""
    if normalize:
        text = _normalize(text)
    if not text:
        raise SemverError("Version string empty")
    parts = text.split(".", 2)
    if len(parts) != 3:
        raise SemverError("No Major.Minor.Patch elements found")
    major = _number(parts[0], "major")
    minor = _number(parts[1], "minor")
    rest = parts[2]
    build: tuple[str, ...] = ()
    pre: tuple[int | str, ...] = ()
    if "+" in rest:
        rest, _, build_text = rest.partition("+")
        build = tuple(build_text.split("."))
        for item in build:
            if not item:
                raise SemverError("Build meta data is empty")
            if not set(item) <= _ALPHANUM:
                raise SemverError(f"Invalid character(s) found in build meta data {item!r}")
    if "-" in rest:
        rest, _, pre_text = rest.partition("-")
        pre = tuple(_prerelease(p) for p in pre_text.split("."))
    patch = _number(rest, "patch")
    return Semver(major, minor, patch, pre, build)


def _number(text: str, what: str) -> int:
    if not set(text) <= _NUMBERS:
        raise SemverError(f"Invalid character(s) found in {what} number {text!r}")
    if len(text) > 1 and text[0] == "0":
        raise SemverError(f"{what.capitalize()} number must not contain leading zeroes {text!r}")
    if not text or len(text) > _MAX_UINT64_DIGITS or int(text) > _MAX_UINT64:
        raise SemverError(f"Invalid {what} number {_short(text)!r}")
    return int(text)


def _prerelease(text: str) -> int | str:
    if not text:
        raise SemverError("Prerelease is empty")
    if set(text) <= _NUMBERS:
        if len(text) > 1 and text[0] == "0":
            raise SemverError(f"Leading zeroes not allowed in prerelease {text!r}")
        if len(text) > _MAX_UINT64_DIGITS or int(text) > _MAX_UINT64:
            # blang/semver: strconv.ParseUint(s, 10, 64)
            raise SemverError(f"Prerelease number {_short(text)!r} is out of range")
        return int(text)
    if set(text) <= _ALPHANUM:
        return text
    raise SemverError(f"Invalid character(s) found in prerelease {text!r}")


def _short(text: str) -> str:
    """`text`, cut for an error message."""
    return text if len(text) <= 40 else text[:37] + "..."


def _normalize(text: str) -> str:
    """Kubernetes' normalizeAndParse: drop a ``v``, strip leading zeros, pad to three parts."""
    text = text.removeprefix("v")
    parts = text.split(".", 2)
    for i, part in enumerate(parts):
        if len(part) > 1:
            stripped = part.lstrip("0")
            if not stripped or stripped[0] not in _NUMBERS:
                stripped = "0" + stripped
            parts[i] = stripped
    if len(parts) < 3:
        if any(c in parts[-1] for c in "+-"):
            raise SemverError("short version cannot contain PreRelease/Build meta data")
        parts.extend(["0"] * (3 - len(parts)))
    return ".".join(parts)
