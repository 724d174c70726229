"""One manifest object through translation: the object it becomes, its templates, or why not.

This is the webhook's translation as it is (`app.translation.plan` and `manifest.write`: the
requests the policy leaves to the scheduler are left in the manifest too), with two differences
that come from Git rather than from admission: templates get readable names
(`TemplateBuilder.readable()`), and an object that names no namespace is translated in none —
its templates name none either, so they land wherever the object is applied.

A workload whose pods may preempt (app.policies.preemption) is migrated all the same, with the
warning admission gives: on claims its pods will no longer evict lower-priority ones for GPUs.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from app.cluster.templates import ManagedTemplates
from app.cluster.view import ClusterView
from app.config import Policy
from app.errors import ObjectShapeError
from app.k8s.objects import PodSpecRef
from app.k8s.priority import Classes
from app.policies.builders import near_miss_names, translation_rules
from app.policies.parts import Parts
from app.policies.preemption import known_classes, loses, preempting
from app.policies.workloads import workload_catalogue
from app.translation import TranslationRules, plan
from app.translation.manifest import write
from app.translation.near_miss import NearMiss, NearMisses, near_misses
from app.workloads import (
    Catalogue,
    Finding,
    Template,
    builtin,
    counted,
    group_kind,
    scan,
    scan_values,
)

Obj = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Rules:
    """What migrating an object needs: translation's rules with readable template names."""

    translation: TranslationRules
    view: ClusterView
    catalogue: Catalogue = field(default_factory=builtin)
    annotations: tuple[str, ...] = ()
    """Scheduler share annotations reported like legacy requests."""
    near: NearMisses | None = None
    """Names that are probably typos of a legacy name (none: not looked for)."""
    classes: Classes | None = None
    """The PriorityClasses known (the cluster file's, then the policy's
    `preemption.priorityClasses`), to say what a migrated workload that may preempt loses;
    None where nothing is said (`preemption.warn: false`, a release that preempts for DRA)."""

    @classmethod
    def build(cls, policy: Policy, view: ClusterView) -> Rules:
        """The webhook's translation rules for `policy`, built as its pipeline builds them."""
        parts = Parts(policy)
        translation = parts.build(translation_rules)
        view.derived(ManagedTemplates)  # what plan() reads of templates the cluster file holds
        warn = policy.preemption.warn and not view.release.preempts_for_dra
        return cls(
            replace(translation, templates=translation.templates.readable()),
            view,
            parts.build(workload_catalogue),
            policy.legacy_resources.annotations,
            parts.build(near_miss_names),
            parts.build(known_classes).classes(view) if warn else None,
        )

    def findings(self, obj: Obj) -> tuple[Finding, ...]:
        """GPU requests of `obj` that translation cannot rewrite (`app/workloads/scan.py`)."""
        group, kind = group_kind(obj)
        legacy = self.translation.legacy
        return scan(group, kind, obj, self.catalogue, legacy, annotations=self.annotations)

    def values(self, data: Any) -> tuple[Finding, ...]:
        """GPU requests of YAML that is no object (Helm values, a patch without a kind)."""
        return scan_values(data, self.translation.legacy)

    def near_misses(self, specs: Iterable[PodSpecRef]) -> list[NearMiss]:
        """Requests for names that are probably typos of a legacy name, no DeviceClass
        mapping them (`app/translation/near_miss.py`)."""
        if self.near is None:
            return []
        mapped = self.view.device_class_for_extended_resource
        return [m for spec in specs for m in near_misses(spec, self.near, mapped)]

    def preemption(self, obj: Obj, migrated: Iterable[Template]) -> list[tuple[str, str]]:
        """(field path, warning) for each migrated template whose pods may preempt for the
        legacy GPUs it asked for: the path of the `priorityClassName` (or `priority`) that
        says so, the template's own where the cluster's global default class does."""
        if self.classes is None:
            return []
        name = name_of(obj) or "(no name)"
        kind = str(obj.get("kind"))
        who = f"{kind} {name}" if kind == "Pod" else f"the pods of {kind} {name}"
        found: list[tuple[str, str]] = []
        for template in migrated:
            spec = template.spec
            judged = preempting(spec, self.translation.legacy, self.classes)
            if judged is None:
                continue
            how = "migrated to DRA claims"
            text = loses(who, judged.priority, judged.resources, self.view.release, how)
            found.append((_priority_field(spec), text))
        return found

    def counted(self, obj: Obj) -> tuple[str, ...]:
        """Caps and quotas on legacy names (a NodePool's limits): no request, said as such."""
        group, kind = group_kind(obj)
        return counted(group, kind, obj, self.translation.legacy)


@dataclass(slots=True)
class Outcome:
    """What one object becomes: `rewritten` is None when nothing changes or it cannot."""

    rewritten: Obj | None = None
    templates: list[Obj] = field(default_factory=list)
    problems: list[tuple[str, str]] = field(default_factory=list)
    """(field path, message) for each request that cannot be translated."""
    notes: list[str] = field(default_factory=list)
    """What a cap or quota on legacy names becomes under DRA (no request, nothing to do here)."""
    left: list[tuple[str, str]] = field(default_factory=list)
    """(field path, why) for each request left to the scheduler (`--leave-mapped`, or the
    policy's `translation.leaveMapped`: app/translation/leave.py)."""
    preemption: list[tuple[str, str]] = field(default_factory=list)
    """(field path, warning) for each migrated pod template whose pods may preempt today:
    on claims they will not (app.policies.preemption)."""


def objects_of(document: Any) -> Iterator[tuple[str, Any]]:
    """(path prefix, object) of a document: itself, or the items of a `List` / `*List`."""
    if isinstance(document, dict):
        items = document.get("items")
        kind = document.get("kind")
        if isinstance(kind, str) and kind.endswith("List") and isinstance(items, list):
            for index, item in enumerate(items):
                yield f"items[{index}].", item
            return
    yield "", document


def is_object(obj: Any) -> bool:
    """A Kubernetes object (a map with a kind): every one is read, whatever its kind, so a GPU
    request in a kind the catalogue does not know is reported rather than passed."""
    return isinstance(obj, dict) and isinstance(obj.get("kind"), str)


def namespace_of(obj: Obj) -> str:
    meta = obj.get("metadata")
    namespace = meta.get("namespace") if isinstance(meta, dict) else None
    return namespace if isinstance(namespace, str) else ""


def name_of(obj: Obj) -> str:
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    return name if isinstance(name, str) else ""


def _priority_field(spec: PodSpecRef) -> str:
    """Where a pod spec says its priority: `priorityClassName`, else `priority`, else the spec
    (a pod of the global default class)."""
    for key in ("priorityClassName", "priority"):
        if spec.spec.get(key) not in (None, ""):
            return f"{spec.path}.{key}"
    return spec.path


def translate(obj: Obj, rules: Rules) -> Outcome:
    """Translate every pod spec of an object (a plain value, left unchanged); what cannot be
    rewritten (an operator's own fields, Helm values, an unknown kind) is a problem."""
    group, kind = group_kind(obj)
    outcome = Outcome()
    try:
        found = rules.catalogue.templates(group, kind, obj)
        plans = [
            plan(t.spec, namespace_of(obj), rules.translation, rules.view, leave=True)
            for t in found
        ]
        findings = rules.findings(obj)
    except ObjectShapeError as exc:
        outcome.problems.append((exc.path, exc.message))
        return outcome
    outcome.problems = [(p.path, p.message) for planned in plans for p in planned.all_problems]
    outcome.problems += [(f.path, f.message) for f in findings]
    outcome.problems += [(m.path, m.message) for m in rules.near_misses(t.spec for t in found)]
    outcome.notes = list(rules.counted(obj))
    if outcome.problems:
        return outcome
    outcome.left = [(x.legacy.path, f"{x.legacy.amount}: {x.why}") for p in plans for x in p.left]
    wanted = [planned for planned in plans if planned.wants]
    if not wanted:
        return outcome
    outcome.preemption = rules.preemption(
        obj, (t for t, p in zip(found, plans, strict=True) if p.wants)
    )
    rewritten = obj
    for planned in wanted:
        rewritten = write(rewritten, planned)
        for template in planned.templates.values():
            if template not in outcome.templates:
                outcome.templates.append(template)
    outcome.rewritten = rewritten
    return outcome
