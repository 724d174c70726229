"""`dra-webhook migrate`: which files, in what order, and what is printed, written and returned.

Files are read in path order (folders walked, hidden ones skipped), so a template shared by two
workloads is written once, next to the first that uses it, and a second run finds it there.
Folders that are kustomize overlays or Helm charts are not walked: they get patches
(`patches.py`). Exit codes: 2 when something could not be translated or read (it is listed on
stderr with file, document index and field path, and left untouched), else with `--diff` 1 when
something would change, else 0.

Warnings go to stderr too, one line each, and leave the exit code alone (and so do the requests
left as written for the scheduler to serve, `--leave-mapped`): what translation removes
without a claim (a compute limit no device of the class has a capacity for), as admission warns
about it; a migrated workload whose pods may preempt today (on claims they will not, as
admission warns: app.policies.preemption); and a file that references a ResourceClaimTemplate
this run wrote only into a file of another folder (a GitOps app that applies one folder would
create the workload without it).
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TextIO

import yaml

from app.config.files import MANIFEST_SUFFIXES, read_each, read_text
from app.errors import ConfigError, ObjectShapeError
from app.migrate.documents import dump
from app.migrate.edit import fresh
from app.migrate.files import Problem, Rewritten, Templates, describe, rewrite, scan
from app.migrate.objects import Rules, is_object, namespace_of, objects_of
from app.migrate.patches import Patch, patch_folder, source_kind
from app.translation import plan
from app.translation.sharing import PublishedCapacities
from app.workloads import group_kind

Obj = dict[str, Any]
SUFFIXES = MANIFEST_SUFFIXES
_FAST_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass(frozen=True, slots=True)
class Options:
    paths: tuple[Path, ...]
    write: bool = False
    templates_out: Path | None = None
    tools: dict[str, str] = field(default_factory=dict)
    """kubectl and helm, for overlays and charts."""
    leave_mapped: bool = False
    """`--leave-mapped`: leave a legacy name a DeviceClass of the cluster file maps as written
    where the scheduler serves it alike (as `translation.leaveMapped: true`)."""


@dataclass(slots=True)
class Outcome:
    """Everything a run found: new texts, patches and problems."""

    files: list[Rewritten] = field(default_factory=list)
    patches: list[Patch] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    """Printed on stderr; they do not change the exit code."""
    left: list[Problem] = field(default_factory=list)
    """Requests left to the scheduler; printed on stderr, the exit code left alone."""

    @property
    def changed(self) -> list[Rewritten]:
        return [f for f in self.files if f.after != f.before]


def migrate(options: Options, rules: Rules) -> Outcome:
    """Translate every file and folder of `options.paths` (nothing is written here)."""
    rules = for_migrate(rules, leave_mapped=options.leave_mapped)
    files, sources = _collect(options.paths)
    texts, unread = read_each(files)
    outcome = Outcome(problems=[Problem.of_file(problem) for problem in unread])
    templates = Templates(rules)
    out = options.templates_out
    out_text = _read_optional(out) if out is not None else ""
    if out is not None:
        scan(out, out_text, templates)
    for path, text in texts.items():
        scan(path, text, templates)
    apart: list[Obj] = []
    for path, text in texts.items():
        result = rewrite(path, text, rules, templates, apart=out is not None)
        outcome.files.append(result)
        outcome.problems += result.problems
        outcome.left += result.left
        outcome.warnings += result.notes
        if out is not None or path.suffix.lower() != ".json":
            apart += result.templates_elsewhere
        elif result.templates_elsewhere:  # one JSON object: its templates go next to it
            outcome.files.append(_json_beside(path, result.templates_elsewhere))
    for folder, what in sources:
        patched = patch_folder(folder, what, rules, templates, options.tools)
        outcome.patches += patched.patches
        outcome.problems += patched.problems
        outcome.left += patched.left
        outcome.warnings += [str(w) for w in patched.warnings]
        if out is not None:
            apart += [t for p in patched.patches for t in p.templates]
            for p in patched.patches:
                p.templates = []
    if out is not None and apart:
        outcome.files.append(Rewritten(out, out_text, _append_yaml(out_text, apart)))
    changed = [f for f in outcome.changed if f.path.suffix.lower() in SUFFIXES]
    for rewritten in changed:
        outcome.warnings += _notes(rewritten, rules)
    if out is None:
        outcome.warnings += _elsewhere(changed)
    return outcome


def for_migrate(rules: Rules, *, leave_mapped: bool = False) -> Rules:
    """The rules as `migrate` runs them: a manifest asking only for `nvidia.com/gpu: 0` is
    rewritten too (the zero removed, as admission removes it), and compute limits see which
    capacities the cluster file's devices publish. `leave_mapped`: as the policy's
    `translation.leaveMapped: true` (`--leave-mapped`)."""
    rules.view.derived(PublishedCapacities)
    translation = replace(rules.translation, legacy=rules.translation.legacy.keeping_zeros())
    if leave_mapped:
        config = translation.config.model_copy(update={"leave_mapped": True})
        translation = replace(translation, config=config)
    return replace(rules, translation=translation)


def report(outcome: Outcome, options: Options, stdout: TextIO, stderr: TextIO) -> int:
    """Print (and with --write, write) what `migrate` found; the exit code."""
    for changed in outcome.changed:
        if options.write:
            changed.path.parent.mkdir(parents=True, exist_ok=True)
            changed.path.write_text(changed.after)
            print(f"migrate: rewrote {changed.path}", file=stderr)
        else:
            stdout.writelines(unified_diff(changed))
    for patch in outcome.patches:
        stdout.write(render_patch(patch))
    for warning in outcome.warnings:
        print(f"migrate: warning: {warning}", file=stderr)
    for left in outcome.left:
        print(f"migrate: left to the scheduler: {left}", file=stderr)
    for problem in outcome.problems:
        print(f"migrate: not translated: {problem}", file=stderr)
    if outcome.problems:
        return 2
    if not options.write and (outcome.changed or outcome.patches):
        return 1
    return 0


def unified_diff(changed: Rewritten) -> list[str]:
    # as git names a path outside the repository (`git diff --no-index /tmp/x ...`): a/tmp/x,
    # not a//tmp/x
    name = changed.path.as_posix().lstrip("/")
    old = f"a/{name}" if changed.before else "/dev/null"
    lines = list(
        difflib.unified_diff(
            changed.before.splitlines(keepends=True),
            changed.after.splitlines(keepends=True),
            old,
            f"b/{name}",
        )
    )
    return [
        line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines
    ]


def render_patch(patch: Patch) -> str:
    where = f"{patch.namespace}/{patch.name}" if patch.namespace else patch.name
    head = f"# {patch.source}: strategic-merge patch for {patch.kind} {where}\n"
    text = "---\n" + head + dump(fresh(patch.patch))
    for template in patch.templates:
        text += f"---\n# {patch.source}: ResourceClaimTemplate for {patch.kind} {where}\n"
        text += dump(fresh(template))
    return text


def _collect(paths: tuple[Path, ...]) -> tuple[list[Path], list[tuple[Path, str]]]:
    """Manifest files in path order, and the overlay and chart folders among the paths."""
    files: list[Path] = []
    sources: list[tuple[Path, str]] = []
    for path in paths:
        if not path.is_dir():
            files.append(path)
            continue
        _walk(path, files, sources)
    return sorted(dict.fromkeys(files)), sources


def _walk(folder: Path, files: list[Path], sources: list[tuple[Path, str]]) -> None:
    what = source_kind(folder)
    if what is not None:
        sources.append((folder, what))
        return
    for entry in sorted(folder.iterdir()):
        if entry.name.startswith("."):
            continue
        if entry.is_dir():
            _walk(entry, files, sources)
        elif entry.suffix.lower() in SUFFIXES:
            files.append(entry)


def _read_optional(path: Path) -> str:
    if not path.exists():
        return ""
    return read_text(path, ConfigError, "--templates-out")


def _append_yaml(text: str, templates: list[Obj]) -> str:
    docs = "---\n".join(dump(fresh(t)) for t in templates)
    if not text.strip():
        return docs
    return text + ("" if text.endswith("\n") else "\n") + "---\n" + docs


def _json_beside(path: Path, templates: list[Obj]) -> Rewritten:
    """A List of templates next to a JSON file that holds one object."""
    beside = path.with_name(f"{path.stem}.claimtemplates.json")
    before = _read_optional(beside)
    data: Obj = {"apiVersion": "v1", "kind": "List", "items": []}
    if before.strip():
        try:
            data = json.loads(before)
        except ValueError:
            data = {"apiVersion": "v1", "kind": "List", "items": []}
    data.setdefault("items", []).extend(templates)
    return Rewritten(beside, before, json.dumps(data, indent=2) + "\n")


def _loaded(path: Path, text: str) -> list[Any]:
    """Every document of a file, read fast (None for one that does not parse)."""
    try:
        if path.suffix.lower() == ".json":
            return [json.loads(text)]
        return list(yaml.load_all(text, Loader=_FAST_LOADER))
    except (yaml.YAMLError, ValueError):
        return []


def _notes(rewritten: Rewritten, rules: Rules) -> list[str]:
    """What translating the file's objects warned about (the notes admission sends back as
    warnings: a compute limit removed, a claim the view does not know), one line each."""
    found: list[str] = []
    for index, document in enumerate(_loaded(rewritten.path, rewritten.before)):
        for prefix, obj in objects_of(document):
            if not is_object(obj):
                continue
            group, kind = group_kind(obj)
            try:
                specs = rules.catalogue.specs(group, kind, obj)
                plans = [
                    plan(s, namespace_of(obj), rules.translation, rules.view, leave=True)
                    for s in specs
                ]
            except ObjectShapeError:
                continue  # reported as not translated
            where = Problem(str(rewritten.path), index, "", "", describe(obj))
            found += [f"{where}{prefix.rstrip('.')} {note}" for p in plans for note in p.notes]
    return [line.replace(":  ", ": ", 1) for line in found]


def _elsewhere(changed: list[Rewritten]) -> list[str]:
    """Files that reference a template this run wrote only into a file of another folder."""
    written: dict[tuple[str, str], list[Path]] = {}
    referenced: dict[Path, set[tuple[str, str]]] = {}
    for rewritten in changed:
        before = _templates_in(_loaded(rewritten.path, rewritten.before))
        after = _loaded(rewritten.path, rewritten.after)
        for key in _templates_in(after) - before:
            written.setdefault(key, []).append(rewritten.path)
        referenced[rewritten.path] = _references(after) | before | _templates_in(after)
    found: list[str] = []
    for path, names in referenced.items():
        for key in sorted(names):
            homes = written.get(key, [])
            if not homes or path in homes or any(h.parent == path.parent for h in homes):
                continue
            namespace, name = key
            found.append(
                f"{path}: references ResourceClaimTemplate {name}"
                + (f" (namespace {namespace})" if namespace else "")
                + f", which this run wrote only into {homes[0]}: a tool that applies "
                f"{path.parent} alone would not create it (copy it there, or use --templates-out)"
            )
    return found


def _templates_in(documents: list[Any]) -> set[tuple[str, str]]:
    """(namespace, name) of the ResourceClaimTemplates among the documents."""
    found: set[tuple[str, str]] = set()
    for document in documents:
        for _, obj in objects_of(document):
            if is_object(obj) and obj.get("kind") == "ResourceClaimTemplate":
                meta = obj.get("metadata")
                name = meta.get("name") if isinstance(meta, dict) else None
                if isinstance(name, str):
                    found.add((namespace_of(obj), name))
    return found


def _references(documents: list[Any]) -> set[tuple[str, str]]:
    """(namespace, name) of every `resourceClaimTemplateName` in the documents' objects."""
    found: set[tuple[str, str]] = set()
    for document in documents:
        for _, obj in objects_of(document):
            if not is_object(obj):
                continue
            namespace = namespace_of(obj)
            stack: list[Any] = [obj]
            while stack:
                node = stack.pop()
                if isinstance(node, dict):
                    name = node.get("resourceClaimTemplateName")
                    if isinstance(name, str):
                        found.add((namespace, name))
                    stack.extend(node.values())
                elif isinstance(node, list):
                    stack.extend(node)
    return found
