"""One manifest object through translation: the object it becomes, its templates, or why not.

This is the webhook's translation as it is (`app.translation.plan` and `manifest.write`), with
two differences that come from Git rather than from admission: templates get readable names
(`TemplateBuilder.readable()`), and an object that names no namespace is translated in none —
its templates name none either, so they land wherever the object is applied.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from app.cluster.templates import ManagedTemplates
from app.cluster.view import ClusterView
from app.config import Policy
from app.errors import ObjectShapeError
from app.k8s.objects import POD_SPEC_PATHS, pod_spec
from app.policies.parts import Parts
from app.policies.translate import translation_rules
from app.translation import TranslationRules, plan
from app.translation.manifest import write

Obj = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Rules:
    """What migrating an object needs: translation's rules with readable template names."""

    translation: TranslationRules
    view: ClusterView

    @classmethod
    def build(cls, policy: Policy, view: ClusterView) -> Rules:
        """The webhook's translation rules for `policy`, built as its pipeline builds them."""
        translation = Parts(policy).build(translation_rules)
        view.derived(ManagedTemplates)  # what plan() reads of templates the cluster file holds
        return cls(replace(translation, templates=translation.templates.readable()), view)


@dataclass(slots=True)
class Outcome:
    """What one object becomes: `rewritten` is None when nothing changes or it cannot."""

    rewritten: Obj | None = None
    templates: list[Obj] = field(default_factory=list)
    problems: list[tuple[str, str]] = field(default_factory=list)
    """(field path, message) for each request that cannot be translated."""


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


def is_pod_bearing(obj: Any) -> bool:
    return isinstance(obj, dict) and obj.get("kind") in POD_SPEC_PATHS


def namespace_of(obj: Obj) -> str:
    meta = obj.get("metadata")
    namespace = meta.get("namespace") if isinstance(meta, dict) else None
    return namespace if isinstance(namespace, str) else ""


def name_of(obj: Obj) -> str:
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    return name if isinstance(name, str) else ""


def translate(obj: Obj, rules: Rules) -> Outcome:
    """Translate the pod spec of a pod-bearing object (a plain value, left unchanged)."""
    kind = str(obj.get("kind"))
    outcome = Outcome()
    try:
        spec = pod_spec(kind, obj)
        if spec is None:
            return outcome
        planned = plan(spec, namespace_of(obj), rules.translation, rules.view)
    except ObjectShapeError as exc:
        outcome.problems.append((exc.path, exc.message))
        return outcome
    outcome.problems = [(p.path, p.message) for p in planned.all_problems]
    if outcome.problems or not planned.wants:
        return outcome
    outcome.rewritten = write(kind, obj, planned)
    outcome.templates = list(planned.templates.values())
    return outcome
