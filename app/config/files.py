"""Reading the files a user names (a policy, a cluster dump, manifests): one line naming the
file and what is wrong with it, never a traceback, whatever the bytes.

A place in a file is written `file:line:column: why`, as compilers and linters write it (an
editor jumps there), and a YAML parser's error is said in our words: PyYAML and ruamel.yaml
describe their own state (`expected <block end>, but found '<block mapping start>'`, `in
"<unicode string>", line 3, column 2`); the user wants the line and what to change on it. A
command that reads many files lists every one it cannot use and goes on with the others
(`read_each`, `check` and `migrate`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from app.errors import ConfigError


@dataclass(frozen=True, slots=True)
class FileProblem:
    """A file, or a place in it, that cannot be used, and why."""

    file: str
    message: str
    line: int | None = None
    """From 1, as editors count; None: the file as a whole."""
    column: int | None = None
    """From 1."""

    def __str__(self) -> str:
        where = self.file
        if self.line is not None:
            where += f":{self.line}:{self.column or 1}"
        return f"{where}: {self.message}"


def read_text(path: Path, error: type[ConfigError], what: str = "") -> str:
    """The UTF-8 text of `path`; `error("<what> <path>: <why>")` when it cannot be read or
    is not UTF-8 (Kubernetes manifests and policy files always are)."""
    where = f"{what} {path}" if what else str(path)
    try:
        return _read(path)
    except _UnreadableError as exc:
        raise error(f"{where}: {exc}") from None


def read_each(paths: Iterable[Path]) -> tuple[dict[Path, str], list[FileProblem]]:
    """The text of every file that can be read, in order, and a problem for each one that
    cannot: one bad file among many does not hide what the others hold."""
    texts: dict[Path, str] = {}
    problems: list[FileProblem] = []
    for path in paths:
        try:
            texts[path] = _read(path)
        except _UnreadableError as exc:
            problems.append(FileProblem(str(path), str(exc)))
    return texts, problems


class _UnreadableError(Exception):
    """Why a file cannot be read as text."""


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise _UnreadableError(
            f"not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset {exc.start})"
        ) from None
    except OSError as exc:
        raise _UnreadableError(exc.strerror or str(exc)) from None


def one_line(exc: BaseException) -> str:
    """An error's text on one line (a YAML parser's error spans several, with a caret)."""
    return " ".join(str(exc).split())


Place = Callable[[int, int], tuple[int, int]]
"""(line, column) in the text parsed -> in the file, both from 1: for text that is a part of a
file (a document of a stream, a ConfigMap's policy.yaml)."""


def yaml_problem(
    file: str, exc: Exception, text: str = "", place: Place | None = None
) -> FileProblem:
    """A YAML parser's error (PyYAML's or ruamel.yaml's) as `file:line:column: not valid YAML:
    <what to change>`. `text` is what was parsed (to place an error that gives only an offset);
    `place` puts its lines where they are in the file."""
    line, column, why = yaml_words(exc, text, place)
    return FileProblem(file, f"not valid YAML: {why}", line, column)


def yaml_words(
    exc: Exception, text: str = "", place: Place | None = None
) -> tuple[int | None, int | None, str]:
    """(line, column, what is wrong) of a YAML parser's error, line and column from 1."""
    problem = str(getattr(exc, "problem", None) or "")
    context = str(getattr(exc, "context", None) or "")
    mark = _line_column(getattr(exc, "problem_mark", None), place)
    begun = _line_column(getattr(exc, "context_mark", None), place)
    position = getattr(exc, "position", None)
    if not problem and isinstance(position, int):  # a ReaderError: a character YAML forbids
        before = text[:position]
        offset = (before.count("\n") + 1, position - (before.rfind("\n") + 1) + 1)
        character = getattr(exc, "character", None)
        code = ord(character) if isinstance(character, str) and character else character
        shown = f"U+{code:04X}" if isinstance(code, int) else "a character"
        return *(place(*offset) if place else offset), f"{shown} is not allowed in YAML text"
    at: tuple[int, int] | None
    for pattern, words in _WORDS:
        found = pattern.search(problem)
        if found is None:
            continue
        said = words(found, context, begun)
        if said is not None:
            # a key without `:` is found where the next line starts: say where the key does
            at = (begun or mark) if pattern is _NO_COLON else (mark or begun)
            return (at[0] if at else None), (at[1] if at else None), said
    if not problem:
        return None, None, _UNICODE_STRING.sub("", one_line(exc))
    said = problem
    if context:
        said += f" ({context}" + (f" at {_at(begun)})" if begun else ")")
    at = mark or begun
    return (at[0] if at else None), (at[1] if at else None), _UNICODE_STRING.sub("", said)


_UNICODE_STRING = re.compile(r',?\s*in "<[^>]*>"(, line \d+, column \d+)?')
"""How the parsers name a string they were given: never shown."""


def _line_column(mark: object, place: Place | None) -> tuple[int, int] | None:
    line, column = getattr(mark, "line", None), getattr(mark, "column", None)
    if not isinstance(line, int) or not isinstance(column, int):
        return None
    return place(line + 1, column + 1) if place else (line + 1, column + 1)


def _at(at: tuple[int, int] | None) -> str:
    return f"line {at[0]}, column {at[1]}" if at else "its start"


_Words = Callable[[re.Match[str], str, tuple[int, int] | None], str | None]
_NO_COLON = re.compile(r"could not find expected ':'")


def _unaligned(found: re.Match[str], context: str, begun: tuple[int, int] | None) -> str | None:
    what = "list" if "collection" in context or "sequence" in context else "mapping"
    return (
        f"not aligned with the {what} that starts at {_at(begun)}: check the indentation (a "
        "value holding `: ` or starting with `- ` needs quotes)"
    )


def _unclosed(found: re.Match[str], context: str, begun: tuple[int, int] | None) -> str | None:
    opening = {"]": "[", "}": "{"}[found.group(1)]
    if found.group(2) == "<stream end>":
        return f"the `{opening}` at {_at(begun)} is never closed with `{found.group(1)}`"
    return f"a `,` or `{found.group(1)}` is missing in the `{opening}` that starts at {_at(begun)}"


_WORDS: tuple[tuple[re.Pattern[str], _Words], ...] = (
    (
        re.compile(r"mapping values are not allowed here"),
        lambda f, c, b: (
            "a `:` where no mapping can start: quote a value holding `: `, or check the indentation"
        ),
    ),
    (
        re.compile(r"found character '\\t' that cannot start any token"),
        lambda f, c, b: "a tab: YAML indents with spaces only",
    ),
    (
        re.compile(r"found character '(.+)' that cannot start any token"),
        lambda f, c, b: f"`{f.group(1)}` cannot start a value: quote the value",
    ),
    (re.compile(r"expected <block end>, but found"), _unaligned),
    (re.compile(r"expected ',' or '([\]}])', but got '(.*)'"), _unclosed),
    (
        re.compile(r"expected the node content, but found '<stream end>'"),
        lambda f, c, b: "the text ends where a value should follow (a `[` or `{` left open?)",
    ),
    (
        re.compile(r"found unexpected end of stream"),
        lambda f, c, b: f"the quote at {_at(b)} is never closed" if "quoted" in c else None,
    ),
    (
        re.compile(r"found undefined alias '(.+)'"),
        lambda f, c, b: f"`*{f.group(1)}` names no anchor `&{f.group(1)}` before it",
    ),
    (
        _NO_COLON,
        lambda f, c, b: "a line that is neither `key: value` nor a list item `- ...`",
    ),
    (
        re.compile(r"could not determine a constructor for the tag '(.+)'"),
        lambda f, c, b: f"unknown tag `{f.group(1)}`",
    ),
    (
        re.compile(r"second occurrence"),
        lambda f, c, b: (
            f"anchor `&{a.group(1)}` is defined twice (first at {_at(b)})"
            if (a := re.search(r"duplicate anchor '(.+?)'", c))
            else None
        ),
    ),
    (
        re.compile(r'found duplicate key "(.*?)"'),
        lambda f, c, b: f"key `{f.group(1)}` appears twice in one mapping",
    ),
)
"""A parser's problem -> our words (None: not this case after all); the rest keep theirs."""


MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")


def manifest_files(paths: Iterable[Path]) -> list[Path]:
    """The files named, and the YAML and JSON files in the folders named (recursively, in name
    order, hidden ones left out), as `kubectl apply -R -f` reads a folder."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            found += sorted(
                p
                for p in path.rglob("*")
                if p.suffix.lower() in MANIFEST_SUFFIXES
                and p.is_file()
                and not any(part.startswith(".") for part in p.relative_to(path).parts)
            )
        else:
            found.append(path)
    return list(dict.fromkeys(found))
