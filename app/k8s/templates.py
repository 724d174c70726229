"""Whether a stored ResourceClaimTemplate is the one translation built under that name.

Translation names its templates by a hash of their content and reuses one that already exists.
Anyone who may create templates in a namespace may also create one under such a name first, with
other content (`allocationMode: All`, a selector of their choosing): pods would then be admitted
referencing it. So an existing template is only reused when it carries translation's label and
its spec is the one translation built; the transport and the live source both ask this module.
"""

from __future__ import annotations

from typing import Any

MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "dra-webhook"
TEMPLATE_LABEL = "dra-webhook/template"
"""Set in a translation template's `spec.metadata.labels` to the template's name. The resource
claim controller copies those labels onto every ResourceClaim it makes from the template, so the
claims the view already watches say which templates are in use (template garbage collection)."""
LAST_USED_LABEL = "dra-webhook/last-used"
"""On a translation template: when an admission last relied on it while no claim of it existed
(Unix seconds, microsecond precision). Template garbage collection leaves it alone for a grace
period after; writing it also changes the resourceVersion a pending delete is conditioned on."""

Obj = dict[str, Any]


def template_mismatch(stored: Obj, wanted: Obj) -> str | None:
    """Why `stored` is not the template `wanted` (as translation built it); None if it is.

    The API server stores `spec.metadata` as `{}` when the template leaves it out (and older ones
    as `{"creationTimestamp": null}`): an empty one is the same as none. Every other field of the
    spec must be equal: translation sets every field the API server would default.
    """
    meta = stored.get("metadata")
    labels = meta.get("labels") if isinstance(meta, dict) else None
    if not isinstance(labels, dict) or labels.get(MANAGED_BY_LABEL) != MANAGED_BY:
        return f"it is not labelled {MANAGED_BY_LABEL}={MANAGED_BY}"
    if _comparable(stored.get("spec")) != _comparable(wanted.get("spec")):
        return "its spec is not the one dra-webhook builds under that name"
    return None


def _comparable(spec: Any) -> Any:
    """The spec without a `metadata` that is empty or only translation's template label: a
    template made before that label existed is still the one translation builds."""
    if not isinstance(spec, dict):
        return spec
    metadata = spec.get("metadata")
    if metadata is None or (
        isinstance(metadata, dict) and (_empty_metadata(metadata) or _only_ours(metadata))
    ):
        return {key: value for key, value in spec.items() if key != "metadata"}
    return spec


def _only_ours(metadata: Obj) -> bool:
    labels = metadata.get("labels")
    rest = {k: v for k, v in metadata.items() if k != "labels"}
    return isinstance(labels, dict) and set(labels) == {TEMPLATE_LABEL} and _empty_metadata(rest)


def _empty_metadata(metadata: Obj) -> bool:
    return all(value is None or value == {} for value in metadata.values())
