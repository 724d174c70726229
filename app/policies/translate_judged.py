"""The mark a mutating answer leaves on a pod it judged whole: `dra-webhook/judged-claims`.

In a translate namespace a pod's mutating call does what its validating call would have done
(`app.pipeline`: every validating check of pods but the admin's CEL rules, on the pod as the
translation leaves it), so the chart's validating entry need not call again. What tells the API
server that it need not is this annotation, set by the mutating answer to the pod's claims as
judged: one `t:<template>` or `c:<claim>` per `spec.resourceClaims` entry, in order, joined by
`,`. The validating entry's matchCondition (charts/dra-webhook/templates/webhooks.yaml) builds
the same text from the pod as it finally is, after every mutating webhook and policy, and skips
the call only when the two are equal and no container asks for an extended resource.

Why a pod's author cannot use it to skip validation:

- The mutating entry sends every pod of a translate namespace that uses devices or carries the
  annotation (failurePolicy Fail: no answer, no pod). Its answer sets the annotation to what it
  judged, or removes one it does not vouch for (a check skipped on a stale view or failed, a
  malformed object): a value the author wrote never survives the mutating call.
- What the validating checks read of a pod with no extended resources is its claims (which
  claims and templates it names; their content is the cluster's, and a template's spec is
  immutable). A webhook or policy that changes them after the mutating call makes the text
  differ, and the pod is validated as before. Any extended resource added after it sends the pod
  to validation, where a judged pod asking for legacy names again (changed after its
  translation) is refused (`app.policies.translate.validate_pod`; the chart's
  ValidatingAdmissionPolicy refuses it where the validating entry fails open).

What it does not cover, and the chart keeps the validating call for: admin CEL rules on Pods (they
read any field), and a mutating entry that may be skipped (failurePolicy Ignore, or disabled).
It trusts the cluster's own mutating webhooks not to write this annotation themselves.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from app.k8s import patch as jsonpatch
from app.k8s.patch import PatchOp

JUDGED_ANNOTATION = "dra-webhook/judged-claims"

_SPEC_CLAIMS = "/spec/resourceClaims"
_ANNOTATIONS = "/metadata/annotations"
_POINTER = _ANNOTATIONS + jsonpatch.pointer(JUDGED_ANNOTATION)


def judged_text(entries: Iterable[Any]) -> str:
    """The annotation's value for a pod's `spec.resourceClaims` entries: what the chart's CEL
    builds from the final pod (`has()` on a key is its presence, as for untyped JSON)."""
    parts = []
    for entry in entries:
        if isinstance(entry, dict) and "resourceClaimTemplateName" in entry:
            parts.append(f"t:{entry['resourceClaimTemplateName']}")
        elif isinstance(entry, dict) and "resourceClaimName" in entry:
            parts.append(f"c:{entry['resourceClaimName']}")
        else:
            parts.append("-")
    return ",".join(parts)


def claims_after(obj: dict[str, Any], patch: Sequence[PatchOp]) -> list[Any]:
    """The pod's `spec.resourceClaims` once `patch` is applied (translation's ops on that list:
    the list added or replaced whole, entries appended, removed or inserted by index)."""
    spec = obj.get("spec")
    found = spec.get("resourceClaims") if isinstance(spec, dict) else None
    entries = list(found) if isinstance(found, list) else []
    for op in patch:
        path = op.get("path", "")
        if path == _SPEC_CLAIMS:
            entries = [] if op["op"] == "remove" else list(op["value"])
        elif path.startswith(_SPEC_CLAIMS + "/"):
            index = path[len(_SPEC_CLAIMS) + 1 :]
            if op["op"] == "remove":
                del entries[int(index)]
            elif op["op"] == "add":
                entries.insert(len(entries) if index == "-" else int(index), op["value"])
            elif op["op"] == "replace":
                entries[int(index)] = op["value"]
    return entries


def vouch(
    obj: dict[str, Any], claims: Sequence[Any], patch: Sequence[PatchOp]
) -> tuple[PatchOp, ...]:
    """`patch` with the annotation set to `claims`, the pod's once `patch` is applied
    (`claims_after`). Folded into an op of `patch` that adds the annotations map (translation's
    own annotation), so the patch grows by the value alone; none when the pod carries it."""
    text = judged_text(claims)
    ops = list(patch)
    for index, op in enumerate(ops):
        if op["op"] == "add" and op.get("path") == _ANNOTATIONS and isinstance(op["value"], dict):
            ops[index] = jsonpatch.add(_ANNOTATIONS, {**op["value"], JUDGED_ANNOTATION: text})
            return tuple(ops)
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        ops.append(jsonpatch.add("/metadata", {"annotations": {JUDGED_ANNOTATION: text}}))
    elif not isinstance(meta.get("annotations"), dict):
        ops.append(jsonpatch.add(_ANNOTATIONS, {JUDGED_ANNOTATION: text}))
    elif meta["annotations"].get(JUDGED_ANNOTATION) != text or _rewrites_annotations(ops):
        ops.append(jsonpatch.add(_POINTER, text))
    return tuple(ops)


def carried(obj: dict[str, Any] | None) -> bool:
    """Whether a pod arrives with the annotation (its author's, or a copy of a stored pod)."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    annotations = meta.get("annotations") if isinstance(meta, dict) else None
    return isinstance(annotations, dict) and JUDGED_ANNOTATION in annotations


def strip(obj: dict[str, Any] | None, patch: Sequence[PatchOp]) -> tuple[PatchOp, ...]:
    """`patch` with an op removing the annotation the pod arrived with, if it did: a mutating
    answer that does not vouch for the pod leaves no value that would let it skip validation."""
    if not carried(obj) or _rewrites_annotations(patch):
        return tuple(patch)
    return (*patch, jsonpatch.remove(_POINTER))


def _rewrites_annotations(patch: Iterable[PatchOp]) -> bool:
    """Whether an op of `patch` replaces the annotations map whole (then it holds no value of
    the pod's own: nothing to remove, and nothing to keep)."""
    return any(op.get("path") == _ANNOTATIONS for op in patch)
