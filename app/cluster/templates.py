"""Translation's ResourceClaimTemplates in the view: how many per namespace, and which are in use.

Translation creates one template per shape (class, selectors, count) in the pod's namespace,
before the pod is admitted, so a user who may create pods can make the webhook create templates:
one per distinct GPU count, including for pods the API server then rejects. Two bounds follow:
a cap per namespace (the policy's `translation.maxTemplatesPerNamespace`, read through `count`),
and garbage collection of templates nothing uses (`app.cluster.template_gc`, through `in_use`).

"In use" is read from ResourceClaims, which the view already watches: the resource claim
controller copies a template's `spec.metadata.labels` onto each claim it makes from it, and
translation puts its template's name there (`TEMPLATE_LABEL`). A pod admitted but not yet given
its claim is covered by the collector's grace period and the admission's touch (`LAST_USED_LABEL`).

Memory: one small set per namespace with templates, one counter per template in use.
"""

from __future__ import annotations

from collections import Counter

from app.cluster.view import Kind, Obj
from app.k8s.templates import MANAGED_BY, MANAGED_BY_LABEL, TEMPLATE_LABEL


def is_managed(template: Obj) -> bool:
    labels = (template.get("metadata") or {}).get("labels")
    return isinstance(labels, dict) and labels.get(MANAGED_BY_LABEL) == MANAGED_BY


class ManagedTemplates:
    """A derived index of the view (`view.derived(ManagedTemplates)`)."""

    def __init__(self) -> None:
        self._by_namespace: dict[str, set[str]] = {}
        self._claims: Counter[tuple[str, str]] = Counter()

    def count(self, namespace: str) -> int:
        """Templates labelled as managed by dra-webhook in `namespace`."""
        found = self._by_namespace.get(namespace)
        return len(found) if found is not None else 0

    def names(self) -> list[tuple[str, str]]:
        """(namespace, name) of every managed template."""
        return [(ns, name) for ns, names in self._by_namespace.items() for name in names]

    def in_use(self, namespace: str, name: str) -> bool:
        """Some ResourceClaim in `namespace` was made from template `name`."""
        return self._claims.get((namespace, name), 0) > 0

    def on_change(self, kind: Kind, old: Obj | None, new: Obj | None) -> None:
        if kind is Kind.RESOURCE_CLAIM_TEMPLATE:
            for obj, add in ((old, False), (new, True)):
                if obj is not None and is_managed(obj):
                    self._template(obj, add)
        elif kind is Kind.RESOURCE_CLAIM:
            for obj, step in ((old, -1), (new, 1)):
                source = _made_from(obj) if obj is not None else None
                if source is not None:
                    self._claims[source] += step
                    if self._claims[source] <= 0:
                        del self._claims[source]

    def _template(self, obj: Obj, add: bool) -> None:
        meta = obj["metadata"]
        namespace, name = meta.get("namespace") or "", meta["name"]
        if add:
            self._by_namespace.setdefault(namespace, set()).add(name)
            return
        names = self._by_namespace.get(namespace)
        if names is not None:
            names.discard(name)
            if not names:
                del self._by_namespace[namespace]


def _made_from(claim: Obj) -> tuple[str, str] | None:
    meta = claim.get("metadata") or {}
    labels = meta.get("labels")
    template = labels.get(TEMPLATE_LABEL) if isinstance(labels, dict) else None
    if not isinstance(template, str) or not template:
        return None
    return meta.get("namespace") or "", template
