"""Reading the files a user names: what is wrong said in our words, at file:line:column, for
PyYAML's and ruamel.yaml's errors alike; and every file read, the unreadable ones listed."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from ruamel.yaml import YAML

from app.config.files import FileProblem, read_each, yaml_problem


def _pyyaml(text: str) -> Any:
    return list(yaml.safe_load_all(text))


def _ruamel(text: str) -> Any:
    return YAML(typ="rt").load(text)


PARSERS: dict[str, Callable[[str], Any]] = {"PyYAML": _pyyaml, "ruamel.yaml": _ruamel}


def _problem(parse: Callable[[str], Any], text: str) -> str:
    with pytest.raises(Exception) as raised:
        parse(text)
    return str(yaml_problem("apps/x.yaml", raised.value, text))


@pytest.mark.parametrize("parser", PARSERS)
@pytest.mark.parametrize(
    ("text", "at", "said"),
    [
        (
            "a: b: c\n",
            "1:5",
            "a `:` where no mapping can start: quote a value holding `: `, or check the indentation",
        ),
        (
            "a:\n  b: 1\n c: 2\n",
            "3:2",
            "not aligned with the mapping that starts at line 1, column 1: check the indentation "
            "(a value holding `: ` or starting with `- ` needs quotes)",
        ),
        (
            "- a\nb: 1\n",
            "2:1",
            "not aligned with the list that starts at line 1, column 1: check the indentation "
            "(a value holding `: ` or starting with `- ` needs quotes)",
        ),
        ("a:\n\t- b\n", "2:1", "a tab: YAML indents with spaces only"),
        ("a: @x\n", "1:4", "`@` cannot start a value: quote the value"),
        ("a: [1, 2\n", "2:1", "the `[` at line 1, column 4 is never closed with `]`"),
        ("a: {b: 1\n", "2:1", "the `{` at line 1, column 4 is never closed with `}`"),
        ("a: 'x\n", "2:1", "the quote at line 1, column 4 is never closed"),
        ("a: *nope\n", "1:4", "`*nope` names no anchor `&nope` before it"),
        ("x: |\n a\nc\n", "3:1", "a line that is neither `key: value` nor a list item `- ...`"),
        ("a: \x00\n", "1:4", "U+0000 is not allowed in YAML text"),
    ],
)
def test_a_yaml_error_is_said_in_our_words_at_its_line_and_column(
    parser: str, text: str, at: str, said: str
) -> None:
    assert _problem(PARSERS[parser], text) == f"apps/x.yaml:{at}: not valid YAML: {said}"


@pytest.mark.parametrize(
    ("parser", "text", "said"),
    [
        (
            "ruamel.yaml",
            "a: 1\na: 2\n",
            "2:1: not valid YAML: key `a` appears twice in one mapping",
        ),
        ("PyYAML", "a: !foo x\n", "1:4: not valid YAML: unknown tag `!foo`"),
        (
            "PyYAML",
            "a: &x 1\nb: &x 2\n",
            "2:4: not valid YAML: anchor `&x` is defined twice (first at line 1, column 4)",
        ),
        (
            "PyYAML",
            "a: b\n---\n{\n",
            "4:1: not valid YAML: the text ends where a value should follow (a `[` or `{` left "
            "open?)",
        ),
        (
            "PyYAML",
            "a: ]\n",
            "1:4: not valid YAML: expected the node content, but found ']' (while parsing a "
            "block node at line 1, column 4)",
        ),
    ],
)
def test_other_yaml_errors_are_said_at_their_place_too(parser: str, text: str, said: str) -> None:
    assert _problem(PARSERS[parser], text) == f"apps/x.yaml:{said}"


@pytest.mark.parametrize("parser", PARSERS)
@pytest.mark.parametrize(
    "text", ["a: b: c\n", "a: [1\n", "a:\n  b: 1\n c: 2\n", "a: \x01\n", "{", "]", "a: *x\n"]
)
def test_a_yaml_error_never_shows_the_parser_s_name_for_a_string(parser: str, text: str) -> None:
    said = _problem(PARSERS[parser], text)
    assert "<unicode string>" not in said
    assert "\n" not in said


def test_a_document_s_error_is_placed_in_the_stream_it_came_from() -> None:
    with pytest.raises(yaml.YAMLError) as raised:
        yaml.safe_load("a: [1\n")
    problem = yaml_problem("f.yaml", raised.value, "a: [1\n", lambda line, col: (line + 10, col))
    assert (
        str(problem)
        == "f.yaml:12:1: not valid YAML: the `[` at line 11, column 4 is never closed with `]`"
    )


@pytest.mark.parametrize(
    ("problem", "shown"),
    [
        (FileProblem("a.yaml", "why", 3, 7), "a.yaml:3:7: why"),
        (FileProblem("a.yaml", "why"), "a.yaml: why"),
    ],
)
def test_a_problem_reads_file_line_column_as_editors_jump_to_it(
    problem: FileProblem, shown: str
) -> None:
    assert str(problem) == shown


def test_read_each_reads_every_file_and_lists_the_ones_it_cannot(tmp_path: Path) -> None:
    good, latin, missing = tmp_path / "a.yaml", tmp_path / "b.yaml", tmp_path / "c.yaml"
    good.write_text("kind: Pod\n")
    latin.write_bytes(b"name: caf\xe9\n")
    texts, problems = read_each([good, latin, missing])
    assert texts == {good: "kind: Pod\n"}
    assert [str(p) for p in problems] == [
        f"{latin}: not UTF-8 text (byte 0xe9 at offset 9)",
        f"{missing}: No such file or directory",
    ]
