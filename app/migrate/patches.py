"""Kustomize overlays and Helm charts: a strategic-merge patch per workload, not a rewrite.

Their files are sources (an overlay patches a base it does not hold; a chart's templates are
not YAML until rendered), so `migrate` renders them (`kubectl kustomize`, `helm template`),
translates each rendered workload, and prints what to drop into the overlay: a strategic-merge
patch that removes the legacy names and adds the claims, and the ResourceClaimTemplates to add
as resources. The patch is computed from the object translation writes, so it says exactly what
a rewrite would have.

Strategic merge: `containers`, `initContainers`, `ephemeralContainers` and `resourceClaims` are
merged by `name` (their patchMergeKey in the Kubernetes API); a map key set to null is removed;
every other list (a container's `resources.claims`) is replaced whole.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.migrate import version_edits, versions
from app.migrate.documents import DocumentError, Loaded, split
from app.migrate.edit import plain
from app.migrate.files import Problem, Templates, describe
from app.migrate.objects import Rules, is_object, name_of, namespace_of, objects_of, translate

Obj = dict[str, Any]

KUSTOMIZATIONS = ("kustomization.yaml", "kustomization.yml", "Kustomization")
CHART = "Chart.yaml"
MERGED_BY_NAME = frozenset(
    {"containers", "initContainers", "ephemeralContainers", "resourceClaims"}
)
RENDER_TIMEOUT = 120


def source_kind(folder: Path) -> str | None:
    """ "kustomize" or "helm" for a folder that is an overlay or a chart, else None."""
    if any((folder / name).is_file() for name in KUSTOMIZATIONS):
        return "kustomize"
    if (folder / CHART).is_file():
        return "helm"
    return None


@dataclass(slots=True)
class Patch:
    """What one rendered workload needs: its patch and the templates it references."""

    source: Path
    kind: str
    name: str
    namespace: str
    patch: Obj
    templates: list[Obj] = field(default_factory=list)


@dataclass(slots=True)
class Patched:
    patches: list[Patch] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    left: list[Problem] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)
    """Patched workloads whose pods may preempt today, which on claims they will not."""


def patch_folder(
    folder: Path, what: str, rules: Rules, templates: Templates, tools: dict[str, str]
) -> Patched:
    """Render `folder` and patch each workload that asks for legacy devices."""
    result = Patched()
    rendered, error = _render(folder, what, tools)
    if rendered is None:
        result.problems.append(Problem(str(folder), None, "", error))
        return result
    try:
        documents = [Loaded(d.body).data for d in split(rendered) if d.body.strip()]
    except DocumentError as exc:
        at = "" if exc.line is None else f", line {exc.line}, column {exc.column}"
        result.problems.append(Problem(str(folder), None, "", f"rendered output{at}: {exc}"))
        return result
    for index, document in enumerate(documents):
        for prefix, obj in objects_of(document):
            if not is_object(obj):
                continue
            before = plain(obj)
            where = f"{folder} (rendered)"
            upgrade = versions.plan(before, rules.catalogue)
            if upgrade.problems or (versions.is_old(before) and upgrade.edits):
                result.problems += [
                    Problem(where, index, prefix + p, m, describe(before))
                    for p, m in upgrade.problems or [_not_patchable(before)]
                ]
                continue
            upgraded = version_edits.apply(before, upgrade.edits)
            outcome = translate(upgraded, rules)
            if outcome.problems:
                result.problems += [
                    Problem(where, index, prefix + p, m) for p, m in outcome.problems
                ]
                continue
            result.left += [
                Problem(where, index, prefix + p, m, describe(before)) for p, m in outcome.left
            ]
            if outcome.rewritten is None and not upgrade.edits:
                continue
            result.warnings += [
                Problem(where, index, prefix + p, m, describe(before))
                for p, m in outcome.preemption
            ]
            result.patches.append(
                Patch(
                    folder,
                    str(before["kind"]),
                    name_of(before),
                    namespace_of(before),
                    workload_patch(before, outcome.rewritten or upgraded),
                    templates.new(outcome.templates),
                )
            )
    return result


def _not_patchable(obj: Obj) -> tuple[str, str]:
    return (
        "apiVersion",
        f"written for {obj.get('apiVersion')}, which Kubernetes 1.34 and later do not serve by "
        f"default: a patch cannot change an apiVersion; edit the source that renders it "
        f"(`dra-webhook migrate` on that file, or on the rendered output, writes its "
        f"{versions.TARGET} form)",
    )


def workload_patch(before: Obj, after: Obj) -> Obj:
    """The strategic-merge patch that turns `before` into `after` (a workload translated).

    It names no namespace: kustomize matches patches before its namespace transformer runs,
    so the rendered namespace would not match the base's object (the header comment says it).
    """
    meta: Obj = {"name": name_of(before)}
    head: Obj = {
        "apiVersion": before.get("apiVersion"),
        "kind": before.get("kind"),
        "metadata": meta,
    }
    body = strategic_diff(before, after)
    body.pop("metadata", None)
    return {**head, **body}


def strategic_diff(before: Obj, after: Obj) -> Obj:
    """A strategic-merge patch from `before` to `after` (see the module docstring)."""
    patch: Obj = {key: None for key in before if key not in after}
    for key, value in after.items():
        old = before.get(key)
        if key in before and old == value:
            continue
        if isinstance(old, dict) and isinstance(value, dict):
            patch[key] = strategic_diff(old, value)
        elif key in MERGED_BY_NAME and isinstance(old, list) and isinstance(value, list):
            patch[key] = _merge_by_name(old, value)
        else:
            patch[key] = value
    return patch


def _merge_by_name(before: list[Any], after: list[Any]) -> list[Any]:
    old = {item.get("name"): item for item in before if isinstance(item, dict)}
    new_names = {item.get("name") for item in after if isinstance(item, dict)}
    items: list[Any] = []
    for item in after:
        previous = old.get(item.get("name"))
        if previous == item:
            continue
        items.append(
            item if previous is None else {"name": item["name"], **strategic_diff(previous, item)}
        )
    items += [{"name": name, "$patch": "delete"} for name in old if name not in new_names]
    return items


def _render(folder: Path, what: str, tools: dict[str, str]) -> tuple[str | None, str]:
    """The folder rendered, or why not."""
    if what == "kustomize":
        tool, argv = tools.get("kubectl", "kubectl"), ["kustomize", str(folder)]
        label = "a kustomize overlay: rendering it needs kubectl (--kubectl PATH)"
    else:
        tool, argv = tools.get("helm", "helm"), ["template", str(folder)]
        label = "a Helm chart: rendering it needs helm (--helm PATH)"
    found = shutil.which(tool)
    if found is None:
        return None, f"{label}, not found"
    try:
        done = subprocess.run(
            [found, *argv], capture_output=True, text=True, timeout=RENDER_TIMEOUT, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"{label}: {exc}"
    if done.returncode != 0:
        return None, f"{' '.join([tool, *argv])} failed: {done.stderr.strip()}"
    return done.stdout, ""
