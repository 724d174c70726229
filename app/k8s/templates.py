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
    if not isinstance(spec, dict):
        return spec
    metadata = spec.get("metadata")
    if metadata is None or (isinstance(metadata, dict) and _empty_metadata(metadata)):
        return {key: value for key, value in spec.items() if key != "metadata"}
    return spec


def _empty_metadata(metadata: Obj) -> bool:
    return all(value is None or value == {} for value in metadata.values())
