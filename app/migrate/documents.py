"""A YAML stream cut into its documents' text, and one document loaded and dumped round-trip.

`migrate` must leave every document it does not change byte-for-byte as it was, so a file is not
loaded and dumped whole: the parser's events give where each document starts, each document's
text is kept as it is, and only a document with something to change is loaded with ruamel.yaml's
round-trip loader (comments, key order, quoting, anchors kept) and dumped again. The `---` line
that opens a document is kept apart from its body, so the marker and any comment on it stay too.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass
from typing import Any

import yaml
from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError
from ruamel.yaml.events import DocumentStartEvent

from app.config.files import yaml_words

_FAST_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_OPENS_BLOCK = re.compile(r"""[^#'"]*:[ \t]*(#.*)?$""")
"""A `key:` line whose value is the block below it."""
_MARKER_LINE = re.compile(r"---[ \t]*(#[^\n]*)?(\n|$)")
WIDE = 1 << 16
"""Line width for dumping: never fold a long string that was on one line."""


class DocumentError(ValueError):
    """A YAML stream that cannot be read: the message says what, `line` and `column` (from 1,
    in the text read; None when unknown) where."""

    def __init__(self, exc: Exception, text: str, first_line: int = 0) -> None:
        self.line, self.column, why = yaml_words(
            exc, text, lambda line, column: (line + first_line, column)
        )
        super().__init__(f"not valid YAML: {why}")


@dataclass(frozen=True, slots=True)
class Document:
    """One document of a stream: the `---` line that opens it ("" for none) and its body."""

    marker: str
    body: str
    line: int = 0
    """The line of the stream its body starts on, from 0: where its own line numbers start."""

    @property
    def text(self) -> str:
        return self.marker + self.body


def split(text: str) -> list[Document]:
    """The documents of a YAML stream; joining their text gives `text` back exactly."""
    starts = _starts(text)
    if not starts:
        return [Document("", text)] if text else []
    bounds = [0] + [index for index, _ in starts[1:]] + [len(text)]
    documents = []
    for (start, explicit), begin, end in zip(starts, bounds[:-1], bounds[1:], strict=True):
        chunk = text[begin:end]
        marker = ""
        if explicit:
            found = _MARKER_LINE.match(text, start)
            if found is not None:  # else content follows `---` on its line: keep it in the body
                marker, chunk = text[begin : found.end()], text[found.end() : end]
        documents.append(Document(marker, chunk, text.count("\n", 0, begin + len(marker))))
    return documents


def _starts(text: str) -> list[tuple[int, bool]]:
    """(offset, explicit `---`) of each document start, from the parser's events.

    PyYAML's C parser first (ten times faster than ruamel.yaml's pure-Python one, and a stream's
    document boundaries are the same in YAML 1.1 and 1.2), ruamel.yaml's where it refuses.
    """
    try:
        return [
            (event.start_mark.index if event.start_mark is not None else 0, bool(event.explicit))
            for event in yaml.parse(text, Loader=_FAST_LOADER)
            if isinstance(event, yaml.DocumentStartEvent)
        ]
    except yaml.YAMLError:
        pass
    try:
        return [
            (event.start_mark.index, bool(event.explicit))
            for event in YAML(typ="rt").parse(text)
            if isinstance(event, DocumentStartEvent)
        ]
    except YAMLError as exc:
        raise DocumentError(exc, text) from None


class Loaded:
    """One document's body loaded round-trip, dumped again with the indentation it had."""

    def __init__(self, body: str, first_line: int = 0) -> None:
        """`first_line`: the line of the stream `body` starts on, from 0 (for errors)."""
        self._body = body
        self._yaml = YAML(typ="rt")
        self._yaml.preserve_quotes = True
        self._yaml.width = WIDE
        mapping, offset = guess_indent(body)
        self.indent = mapping
        """How far a mapping's keys sit from its parent's: where a moved field lands."""
        self._yaml.indent(mapping=mapping, sequence=offset + 2, offset=offset)
        try:
            self.data: Any = self._yaml.load(body)
        except YAMLError as exc:
            raise DocumentError(exc, body, first_line) from None
        self._yaml.explicit_end = _has_end_marker(body)

    def dump_new(self, data: Any) -> str:
        """A new document (a template) indented as this one is."""
        out = io.StringIO()
        self._yaml.dump(data, out)
        return out.getvalue()

    def dump(self) -> str:
        out = io.StringIO()
        self._yaml.dump(self.data, out)
        text = out.getvalue()
        if not self._body.endswith("\n"):
            text = text.rstrip("\n")
        return text


def dump(data: Any) -> str:
    """New content (a template, a patch) as block YAML, two-space indented; a null is written
    `null` (a strategic-merge patch removes a key with it: an empty value reads as a slip)."""
    yaml = YAML(typ="rt")
    yaml.width = WIDE
    yaml.representer.add_representer(type(None), _null)
    yaml.indent(mapping=2, sequence=2, offset=0)
    out = io.StringIO()
    yaml.dump(data, out)
    return out.getvalue()


def _null(representer: Any, data: None) -> Any:
    return representer.represent_scalar("tag:yaml.org,2002:null", "null")


def guess_indent(body: str) -> tuple[int, int]:
    """(mapping indent, dash offset of block sequences), the first of each the body shows;
    (2, 0) where it shows none: kubectl's and Helm's style."""
    mapping: int | None = None
    offset: int | None = None
    parent: int | None = None
    for line in body.splitlines():
        stripped = line.lstrip(" ")
        if not stripped or stripped.startswith("#"):
            continue
        column = len(line) - len(stripped)
        if parent is not None and column > parent:
            if stripped.startswith("- ") or stripped == "-":
                offset = column - parent if offset is None else offset
            else:
                mapping = column - parent if mapping is None else mapping
        if mapping is not None and offset is not None:
            break
        content = stripped[2:] if stripped.startswith("- ") else stripped
        opens = _OPENS_BLOCK.match(content) is not None
        parent = (column + len(stripped) - len(content)) if opens else None
    return mapping or 2, offset or 0


def _has_end_marker(body: str) -> bool:
    return any(line.rstrip() == "..." for line in body.splitlines())
