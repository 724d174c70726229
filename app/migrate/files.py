"""One manifest file rewritten: YAML document by document, JSON as a whole.

A YAML document with nothing to translate keeps its text exactly (`documents.split`); one with
something to translate is loaded round-trip, brought to what translation writes
(`edit.sync`: only the differing nodes change), checked against it, and dumped again. Its
templates follow it as new documents, or join a `List` right after the object that uses them,
or go to `--templates-out`. JSON has no comments to keep: a changed JSON file is written again
with the indentation it had.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from app.config.files import FileProblem
from app.errors import ObjectShapeError
from app.migrate import version_edits, versions
from app.migrate.documents import Document, DocumentError, Loaded, split
from app.migrate.edit import fresh, merges_hold, plain, shared_nodes, sync
from app.migrate.objects import (
    Outcome,
    Rules,
    is_object,
    name_of,
    namespace_of,
    objects_of,
    translate,
)
from app.translation.legacy import legacy_requests
from app.workloads import group_kind

Obj = dict[str, Any]
_FAST_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_JSON_INDENT = re.compile(r"\n([ \t]+)\S")
_HINTS = ("containers", "limits", "requests", "gpu")
"""A document holding none of these asks for no device: every pod spec has `containers`, every
resources map `limits` or `requests`, and an operator's GPU field names a `gpu`."""
_OLD_DRA_HINTS = ("resource.k8s.io/v1alpha", "resource.k8s.io/v1beta", "source")
"""Nor is it a DRA object of an older version, or a pod claim in the shape before 1.31."""


@dataclass(frozen=True, slots=True)
class Problem:
    """An object (or file) left untouched, and why: file, document index and field path."""

    file: str
    document: int | None
    """Index of the document in the file, from 0 (as `check` numbers them: file#index)."""
    path: str
    message: str
    what: str = ""
    """The object: kind namespace/name."""
    line: int | None = None
    """Where in the file, from 1, when that is what names the place (text that is no YAML)."""
    column: int | None = None

    @classmethod
    def of_file(cls, problem: FileProblem) -> Problem:
        return cls(
            problem.file, None, "", problem.message, line=problem.line, column=problem.column
        )

    def __str__(self) -> str:
        if self.line is not None:
            return str(FileProblem(self.file, self.message, self.line, self.column))
        where = self.file if self.document is None else f"{self.file}#{self.document}"
        if self.what:
            where += f" ({self.what})"
        return f"{where}: {self.path}: {self.message}" if self.path else f"{where}: {self.message}"


def describe(obj: Any) -> str:
    """kind namespace/name of an object, for messages."""
    if not isinstance(obj, dict):
        return ""
    name = name_of(obj)
    if namespace_of(obj):
        name = f"{namespace_of(obj)}/{name}"
    return f"{obj.get('kind')} {name}".strip()


class Templates:
    """Every template a run emits, once per (namespace, name), and the ones already there."""

    def __init__(self, rules: Rules) -> None:
        self._rules = rules
        self._present: set[tuple[str, str]] = set()

    def found(self, obj: Any) -> None:
        """A ResourceClaimTemplate among the inputs: its name is taken, for its content (as
        resource.k8s.io/v1 has it, once `migrate` has moved an older one)."""
        if not isinstance(obj, dict) or obj.get("kind") != "ResourceClaimTemplate":
            return
        upgrade = versions.plan(obj)
        if upgrade.edits:
            obj = version_edits.apply(obj, upgrade.edits)
        meta = obj.get("metadata")
        name = meta.get("name") if isinstance(meta, dict) else None
        spec = obj.get("spec")
        if isinstance(name, str) and isinstance(spec, dict):
            namespace = namespace_of(obj)
            self._rules.translation.templates.reserve(namespace, name, plain(spec.get("spec")))
            self._present.add((namespace, name))

    def new(self, templates: list[Obj]) -> list[Obj]:
        """Those of `templates` not emitted yet nor already in the inputs."""
        fresh_ones = []
        for template in templates:
            key = (namespace_of(template), template["metadata"]["name"])
            if key not in self._present:
                self._present.add(key)
                fresh_ones.append(template)
        return fresh_ones


@dataclass(slots=True)
class Rewritten:
    """A file's text before and after, and what could not be translated in it."""

    path: Path
    before: str
    after: str
    problems: list[Problem] = field(default_factory=list)
    left: list[Problem] = field(default_factory=list)
    """Requests left as written for the scheduler (`--leave-mapped`), where and why."""
    notes: list[str] = field(default_factory=list)
    """Caps and quotas on legacy names (no request): what they become under DRA; workloads
    migrated whose pods may preempt today, which on claims they will not."""
    templates_elsewhere: list[Obj] = field(default_factory=list)
    """Templates for `--templates-out` (or, for a single JSON object, a file next to it)."""


def scan(path: Path, text: str, templates: Templates) -> None:
    """Note the ResourceClaimTemplates a file already holds (before anything is rewritten)."""
    try:
        data = [json.loads(text)] if _is_json(path) else _documents(text)
    except (yaml.YAMLError, ValueError):
        return  # reported when the file itself is rewritten
    for document in data:
        for _, obj in objects_of(document):
            templates.found(obj)


def _documents(text: str) -> list[Any]:
    """Every document's value, read fast (only templates' names and specs are needed here)."""
    return list(yaml.load_all(text, Loader=_FAST_LOADER))


def rewrite(path: Path, text: str, rules: Rules, templates: Templates, apart: bool) -> Rewritten:
    """The file with its objects translated; `apart`: templates go elsewhere, not beside."""
    if _is_json(path):
        return _rewrite_json(path, text, rules, templates, apart)
    result = Rewritten(path, text, text)
    try:
        docs = split(text)
    except DocumentError as exc:
        result.problems.append(_unreadable(str(path), exc))
        return result
    parts = [
        _rewrite_document(result, index, doc, rules, templates, apart=apart)
        for index, doc in enumerate(docs)
    ]
    result.after = "".join(parts)
    return result


def _unreadable(file: str, exc: DocumentError) -> Problem:
    """Text that is no YAML, at its line in the file."""
    return Problem(file, None, "", str(exc), line=exc.line, column=exc.column)


def _rewrite_document(
    result: Rewritten, index: int, doc: Document, rules: Rules, templates: Templates, *, apart: bool
) -> str:
    if not _may_hold_pods(doc.body, rules):
        return doc.text
    try:
        loaded = Loaded(doc.body, doc.line)
    except DocumentError as exc:
        result.problems.append(_unreadable(str(result.path), exc))
        return doc.text
    file = str(result.path)
    after: list[Obj] = []
    changed = False
    for prefix, obj, set_obj, insert in _slots(loaded.data):
        if not is_object(obj):
            found = rules.values(plain(obj))
            result.problems += [Problem(file, index, prefix + f.path, f.message) for f in found]
            continue
        wanted = plain(obj)
        upgrade = versions.plan(wanted, rules.catalogue)
        if upgrade.problems:
            result.problems += [
                Problem(file, index, prefix + p, m, describe(wanted)) for p, m in upgrade.problems
            ]
            continue
        current = obj
        if upgrade.edits:
            wanted = version_edits.apply(wanted, upgrade.edits)
            current = _edit(loaded, prefix, obj, set_obj, wanted, edits=upgrade.edits)
            if current is None:
                result.problems.append(_not_expressible(file, index, prefix, wanted))
                return doc.text
            changed = True
        outcome = translate(wanted, rules)
        result.notes += [f"{file}#{index} ({describe(wanted)}): {n}" for n in outcome.notes]
        if outcome.problems:
            result.problems += [
                Problem(file, index, prefix + p, m, describe(wanted)) for p, m in outcome.problems
            ]
            continue
        result.left += [
            Problem(file, index, prefix + p, m, describe(wanted)) for p, m in outcome.left
        ]
        if outcome.rewritten is None:
            continue
        if _edit(loaded, prefix, current, set_obj, outcome.rewritten) is None:
            result.problems.append(_not_expressible(file, index, prefix, wanted))
            return doc.text  # the edit reached further than the object: keep the text
        changed = True
        result.notes += [
            str(Problem(file, index, prefix + p, m, describe(wanted)))
            for p, m in outcome.preemption
        ]
        new = templates.new(outcome.templates)
        if apart:
            result.templates_elsewhere += new
        elif insert is not None:
            insert([fresh(t) for t in new])
        else:
            after += new
    if not changed:
        return doc.text

    body = loaded.dump()
    if after:
        body = _ending(body) + "".join("---\n" + loaded.dump_new(fresh(t)) for t in after)
        if not doc.body.endswith("\n"):
            body = body.rstrip("\n")
    return doc.marker + body


def _edit(
    loaded: Loaded,
    prefix: str,
    obj: Any,
    set_obj: Any,
    wanted: Obj,
    *,
    edits: list[version_edits.Edit] | None = None,
) -> Any:
    """Bring `obj`, an object of the loaded document, to `wanted`: by moving its nodes with
    `edits` (an upgrade to resource.k8s.io/v1) when given, else, or where that falls short
    (anchors, merge keys), node by node (`edit.sync`). The object as it now is in the tree, or
    None when the document cannot be made to read so (the edit reached further than `obj`)."""
    expected = _expected(loaded.data, obj, wanted)
    if edits:
        version_edits.apply_tree(obj, edits, loaded.indent)
        if plain(loaded.data) == expected and merges_hold(loaded.data):
            return obj
    updated = sync(obj, wanted, shared_nodes(loaded.data))
    set_obj(updated)
    if not prefix:
        loaded.data = updated
    return updated if plain(loaded.data) == expected and merges_hold(loaded.data) else None


def _slots(root: Any) -> list[tuple[str, Any, Any, Any]]:
    """(path prefix, object, put a replacement, insert after it) for each object of a document.

    Collected before any change: a `List` grows as templates are inserted after its items.
    """
    found: list[tuple[str, Any, Any, Any]] = []
    items = root.get("items") if isinstance(root, dict) else None
    if items is not None and any(prefix for prefix, _ in objects_of(root)):
        for index, item in enumerate(list(items)):
            found.append(
                (f"items[{index}].", item, _list_setter(items, item), _list_inserter(items, item))
            )
        return found
    return [("", root, lambda new: None, None)]


def _list_setter(items: list[Any], item: Any) -> Any:
    def put(new: Any) -> None:
        if new is not item:
            items[_position(items, item)] = new

    return put


def _list_inserter(items: list[Any], item: Any) -> Any:
    def insert(new: list[Any]) -> None:
        at = _position(items, item) + 1
        items[at:at] = new

    return insert


def _position(items: list[Any], item: Any) -> int:
    return next(i for i, candidate in enumerate(items) if candidate is item)


def _expected(root: Any, obj: Any, rewritten: Obj) -> Any:
    """The whole document as it must read once `obj` (it, or one of its items) is rewritten."""
    if obj is root:
        return rewritten
    whole = plain(root)
    whole["items"][_position(root["items"], obj)] = rewritten
    return whole


def _not_expressible(file: str, index: int, prefix: str, obj: Any) -> Problem:
    return Problem(
        file,
        index,
        prefix.rstrip(".") or "(object)",
        "the fields migrate changes are shared with other places through YAML anchors or "
        "merge keys in a way that cannot be edited in place (`dra-webhook check` prints the "
        "patch to apply by hand)",
        describe(obj),
    )


def _may_hold_pods(body: str, rules: Rules) -> bool:
    """Whether a document may have something to translate or to move to resource.k8s.io/v1,
    before the round-trip load.

    ruamel.yaml's round-trip loader is pure Python and costs milliseconds a document; PyYAML's
    C loader reads the document in a tenth of that. It only decides whether a pod spec holds a
    legacy name (mapping keys, strings to both loaders); what is translated is read round-trip.
    A document it cannot read goes to the round-trip loader, which reports it.
    """
    if not any(hint in body for hint in (*_HINTS, *_OLD_DRA_HINTS, *rules.annotations)):
        return False
    try:
        data = yaml.load(body, Loader=_FAST_LOADER)
    except yaml.YAMLError:
        return True
    try:
        for _, obj in objects_of(data):
            if not is_object(obj):
                if rules.values(obj):
                    return True
                continue
            if versions.plan(obj, rules.catalogue).needed:
                return True
            group, kind = group_kind(obj)
            specs = rules.catalogue.specs(group, kind, obj)
            for spec in specs:
                if legacy_requests(spec, rules.translation.legacy):
                    return True
            if rules.findings(obj) or rules.near_misses(specs) or rules.counted(obj):
                return True
    except ObjectShapeError:
        return True
    return False


def _ending(text: str) -> str:
    return text if text.endswith("\n") or not text else text + "\n"


# -- JSON ----------------------------------------------------------------------------------


def _is_json(path: Path) -> bool:
    return path.suffix.lower() == ".json"


def _rewrite_json(
    path: Path, text: str, rules: Rules, templates: Templates, apart: bool
) -> Rewritten:
    result = Rewritten(path, text, text)
    try:
        data = json.loads(text)
    except ValueError as exc:
        result.problems.append(Problem(str(path), None, "", f"not valid JSON: {exc}"))
        return result
    changed = False
    is_list = any(prefix for prefix, _ in objects_of(data))
    entries = list(objects_of(data))
    for prefix, obj in entries:
        if not is_object(obj):
            continue
        upgrade = versions.plan(obj, rules.catalogue)
        if upgrade.problems:
            result.problems += [
                Problem(str(path), 0, prefix + p, m, describe(obj)) for p, m in upgrade.problems
            ]
            continue
        if upgrade.edits:
            version_edits.apply_tree(obj, upgrade.edits)  # a plain tree: edited in place
            changed = True
        outcome: Outcome = translate(obj, rules)
        if outcome.problems:
            result.problems += [
                Problem(str(path), 0, prefix + p, m, describe(obj)) for p, m in outcome.problems
            ]
            continue
        result.left += [
            Problem(str(path), 0, prefix + p, m, describe(obj)) for p, m in outcome.left
        ]
        if outcome.rewritten is None:
            continue
        changed = True
        result.notes += [
            str(Problem(str(path), 0, prefix + p, m, describe(obj))) for p, m in outcome.preemption
        ]
        new = templates.new(outcome.templates)
        if is_list:
            items = data["items"]
            at = next(i for i, item in enumerate(items) if item is obj)
            items[at : at + 1] = [outcome.rewritten, *([] if apart else new)]
            if apart:
                result.templates_elsewhere += new
        else:
            data = outcome.rewritten
            result.templates_elsewhere += new
    if changed:
        found = _JSON_INDENT.search(text)
        indent = found.group(1) if found else None
        after = json.dumps(data, indent=indent, ensure_ascii=False)
        result.after = after + ("\n" if text.endswith("\n") else "")
    return result
