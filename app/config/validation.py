"""The policy file's validation errors in our words, each at its place in the file.

pydantic says `namespaceModes.lable: Extra inputs are not permitted`. An admin reading why a
rollout failed wants the line, and for a key the policy does not know, the one it probably
meant: `policy.yaml:3:3: unknown key `lable` under `namespaceModes` (did you mean `label`?)`,
found among the keys of that section with difflib, then among those of the sections around it
(a key written one level too deep). Other errors keep pydantic's text after the key's path.
"""

from __future__ import annotations

import difflib
import types
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Annotated, Any, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ValidationError

from app.config.files import FileProblem, Place

Loc = tuple[int | str, ...]


def problems(
    exc: ValidationError,
    model: type[BaseModel],
    file: str,
    text: str,
    loader: type[yaml.SafeLoader],
) -> list[FileProblem]:
    """One problem per pydantic error of validating `text` (YAML, read with `loader`) as
    `model`, placed at the key it concerns."""
    try:
        root: yaml.Node | None = yaml.compose(text, Loader=loader)
    except yaml.YAMLError:
        root = None  # it loaded a moment ago; no place then, the words still hold
    found = []
    for error in exc.errors():
        loc: Loc = tuple(error["loc"])
        mark = _mark(root, loc)
        words = _words(error["type"], error["msg"], loc, model)
        if mark is None:
            found.append(FileProblem(file, words))
        else:
            found.append(FileProblem(file, words, mark.line + 1, mark.column + 1))
    return found


def moved(problem: FileProblem, place: Place | None) -> FileProblem:
    """The problem at its place in the file, when the text parsed was a part of it."""
    if place is None or problem.line is None:
        return problem
    line, column = place(problem.line, problem.column or 1)
    return replace(problem, line=line, column=column)


def literal_block(text: str, path: tuple[str, ...], loader: type[yaml.SafeLoader]) -> Place | None:
    """Where the lines of the string at `path` are in `text`, when it is a literal block
    (`policy.yaml: |`, as kubectl writes a multi-line value): each of its lines is a line of
    the file, indented. None for any other style (the string's own lines are named then)."""
    node: Any = yaml.compose(text, Loader=loader)
    for key in path:
        if not isinstance(node, yaml.MappingNode):
            return None
        node = next((v for k, v in node.value if getattr(k, "value", None) == key), None)
    if not isinstance(node, yaml.ScalarNode) or node.style != "|":
        return None
    first = node.start_mark.line + 1  # the line after `|`, from 0
    content = next((line for line in text.splitlines()[first:] if line.strip()), "")
    indent = len(content) - len(content.lstrip(" "))
    if not str(node.value).lstrip("\n").startswith(content[indent:]):
        return None  # an indentation indicator (`|2`): the first line is indented further
    return lambda line, column: (first + line, indent + column)


def _words(kind: str, message: str, loc: Loc, model: type[BaseModel]) -> str:
    if kind == "extra_forbidden" and loc:
        *parent, key = loc
        return f"unknown key `{key}` {_under(tuple(parent))}{_hint(str(key), tuple(parent), model)}"
    return f"{_dotted(loc) or '<root>'}: {message}"


def _dotted(loc: Loc) -> str:
    return ".".join(str(part) for part in loc)


def _under(parent: Loc) -> str:
    return f"under `{_dotted(parent)}`" if parent else "at the top level"


def _hint(key: str, parent: Loc, model: type[BaseModel]) -> str:
    """` (did you mean `x`?)`: the nearest key of this section, else a near one of an
    enclosing section (a key written one level too deep is usually spelled right); else the
    section's keys, when they are few."""
    here = keys_at(model, parent)
    close = difflib.get_close_matches(key, here, n=1)
    if close:
        return f" (did you mean `{close[0]}`?)"
    for depth in range(len(parent) - 1, -1, -1):
        outer = parent[:depth]
        close = difflib.get_close_matches(key, keys_at(model, outer), n=1, cutoff=0.8)
        if close:
            where = _under(outer)
            if close[0] == key:
                return f" (`{key}` is a key {where})"
            return f" (did you mean `{close[0]}`, {where}?)"
    if 0 < len(here) <= 12:
        return f" (the keys there: {', '.join(here)})"
    return ""


def keys_at(model: type[BaseModel], path: Loc) -> list[str]:
    """The keys a mapping at `path` of `model` takes (by their YAML alias), in model order."""
    keys: list[str] = []
    for tp in _types_at(model, path):
        for one in _flatten(tp):
            if isinstance(one, type) and issubclass(one, BaseModel):
                keys += [info.alias or name for name, info in one.model_fields.items()]
    return list(dict.fromkeys(keys))


def _types_at(model: type[BaseModel], path: Loc) -> list[Any]:
    current: list[Any] = [model]
    for part in path:
        following = [step for tp in current for one in _flatten(tp) for step in _step(one, part)]
        current = following or current  # a part that is no key (a union's tag) is passed over
    return current


def _flatten(tp: Any) -> list[Any]:
    """The types a value of `tp` may be: Annotated and Optional unwrapped, unions split."""
    origin = get_origin(tp)
    if origin is Annotated:
        return _flatten(get_args(tp)[0])
    if origin is Union or origin is types.UnionType:
        return [one for arg in get_args(tp) for one in _flatten(arg)]
    return [tp]


def _step(tp: Any, part: int | str) -> list[Any]:
    """The type one loc part further into `tp`: a model's field, a sequence's item, a
    mapping's value."""
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return [
            info.annotation
            for name, info in tp.model_fields.items()
            if isinstance(part, str) and part in (name, info.alias)
        ]
    origin, args = get_origin(tp), get_args(tp)
    if isinstance(part, int) and isinstance(origin, type) and issubclass(origin, Sequence):
        if origin is tuple and args and args[-1] is not Ellipsis:
            return [args[part]] if part < len(args) else []
        return list(args[:1])
    if isinstance(part, str) and isinstance(origin, type) and issubclass(origin, Mapping):
        return list(args[1:2])
    return []


def _mark(root: yaml.Node | None, loc: Loc) -> yaml.Mark | None:
    """Where the key `loc` names starts in the file (the value, for a sequence's item), or,
    for a key that is not there (one missing), the mapping that lacks it."""
    node = root
    if node is None:
        return None
    at = node.start_mark
    for part in loc:
        if isinstance(node, yaml.MappingNode) and isinstance(part, str):
            for key, value in node.value:
                if isinstance(key, yaml.ScalarNode) and key.value == part:
                    at, node = key.start_mark, value
                    break
        elif (
            isinstance(node, yaml.SequenceNode)
            and isinstance(part, int)
            and 0 <= part < len(node.value)
        ):
            node = node.value[part]
            at = node.start_mark
    return at
