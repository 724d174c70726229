"""Nothing silent: GPU requests found anywhere in an object, outside the pod specs the
catalogue knows how to rewrite.

An operator's custom resource can ask for GPUs in places no pod template is: the operator's own
fields (TrainJob `trainer.resourcesPerNode`, SparkApplication `executor.gpu`), Helm values
(Flux HelmRelease `spec.values`), a manifest embedded in a string, a scheduler's share
annotation (KAI's `gpu-fraction`), or a kind the catalogue has no entry for. The scan finds
them by keys: every map under a `limits` or `requests` key, at any depth, whose keys are legacy
names; `{name, quantity}` operator fields; share annotations. A legacy name written as a value
(a device plugin's ConfigMap) is not a request, and a zero count asks for nothing.

What it finds is reported with its path and why it cannot be rewritten: dra-only denies it,
audit warns, `migrate` exits 2, `report` counts it.

YAML that is no Kubernetes object (a Helm values file, a kustomize patch without a kind) is
read by `scan_values`: legacy names under `limits`/`requests` maps and under maps whose key
ends in `_limits` (JupyterHub's `extra_resource_limits`), anchors and aliases resolved by the
loader.

Some kinds name GPUs without asking for them (`NOT_REQUESTS`): a Karpenter NodePool's
`spec.limits` caps what the pool provisions, a Kueue ClusterQueue's `coveredResources` and
`nominalQuota` are a quota. They are no request, never denied as one; `counted` says what they
become once the nodes serve GPUs through DRA.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from typing import Any

import yaml

from app.errors import ObjectShapeError
from app.k8s.objects import CONTAINER_FIELDS
from app.k8s.quantity import is_zero
from app.workloads.catalogue import Catalogue, Template
from app.workloads.entries import Entry
from app.workloads.paths import dotted, walk

_RESOURCE_MAPS = frozenset({"limits", "requests"})
MAX_EMBEDDED_CHARS = 1 << 20
"""Strings longer than this are not parsed as embedded manifests."""
MAX_EMBEDDED_DEPTH = 2
_EMBEDDED_HINTS = ("limits", "requests")
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

UNKNOWN_KIND = (
    "{kind} is not in dra-webhook's workload catalogue, so it cannot be rewritten; move the "
    "request to resourceClaims by hand, or add the kind to the policy's workloadKinds"
)
OUTSIDE = (
    "outside the pod templates dra-webhook rewrites in a {kind}; move the request to the "
    "pod template's resourceClaims by hand"
)
EMBEDDED = (
    "in a manifest embedded in a string, which dra-webhook does not rewrite; migrate the "
    "manifest where it is kept"
)
ANNOTATION = (
    "a scheduler's GPU-share annotation (KAI Scheduler); request a share through a DRA claim "
    "with capacity requests instead"
)


VALUES = (
    "in YAML that is not a Kubernetes object (Helm values, a kustomize patch without a kind), "
    "which dra-webhook does not rewrite; move the request to resourceClaims where the "
    "manifest is rendered"
)


@dataclass(frozen=True, slots=True)
class NotRequest:
    """Where a kind names legacy GPUs as a cap or a quota, not as a request."""

    group: str
    kind: str
    path: str
    """The map of names (`spec.limits`), or `*` for a list of names or `{name, ...}` items."""
    what: str


NOT_REQUESTS: tuple[NotRequest, ...] = (
    NotRequest(
        "karpenter.sh",
        "NodePool",
        "spec.limits",
        "a cap on what the NodePool provisions, not a request",
    ),
    NotRequest(
        "kueue.x-k8s.io",
        "ClusterQueue",
        "*",
        "a quota of the ClusterQueue (coveredResources, nominalQuota), not a request",
    ),
)
"""Kinds that name legacy GPUs without asking for them (origins: Karpenter's NodePool and
Kueue's ClusterQueue API references)."""
_NOT_REQUESTS = {(n.group, n.kind): n for n in NOT_REQUESTS}


@dataclass(frozen=True, slots=True)
class Finding:
    """A GPU request the tool cannot rewrite, with where it is and why."""

    path: str
    resource: str
    amount: str
    why: str

    @property
    def message(self) -> str:
        return f"{self.resource}: {self.amount} ({self.why})"


Parts = tuple[str | int, ...]


def scan(
    group: str,
    kind: str,
    obj: Any,
    catalogue: Catalogue,
    is_legacy: Callable[[str], bool],
    *,
    annotations: Collection[str] = (),
    templates: tuple[Template, ...] | None = None,
) -> tuple[Finding, ...]:
    """Every GPU request of `obj` outside the containers of the pod specs the catalogue finds.

    A core kind's schema is closed (its GPU requests can only be in containers): only its
    templates' annotations are read. Raises ObjectShapeError where a catalogue path meets a
    field of the wrong type.
    """
    if (group, kind) in _NOT_REQUESTS:
        return ()  # said by `counted`, never a request
    entry = catalogue.entry(group, kind)
    if templates is None:
        templates = catalogue.templates(group, kind, obj) if entry is not None else ()
    if entry is not None and entry.built_in:
        if not annotations:
            return ()
        for t in templates:
            if t.spec.meta.get("annotations"):
                break
        else:
            return ()  # the hot path: a Pod or a Deployment without annotations on its pods
        return tuple(
            f
            for t in templates
            for f in _annotations(t.spec.meta, _meta_parts(t.parts, obj, t.spec.meta), annotations)
        )
    skip = {(*t.parts, field) for t in templates for field in CONTAINER_FIELDS}
    reasons = _reasons(entry, obj) if entry is not None else {}
    default = (UNKNOWN_KIND if entry is None else OUTSIDE).format(kind=kind or "an object")
    found = list(_walk(obj, (), skip, is_legacy, annotations, depth=0))
    if entry is not None:
        found += _fields(entry, obj, is_legacy)
    out: list[Finding] = []
    for parts, resource, amount, known in found:
        why = known if known is not None else _reason(parts, reasons, default)
        out.append(Finding(_path(parts), resource, amount, why))
    return tuple(out)


def _path(parts: Parts) -> str:
    return dotted(parts)


def _meta_parts(spec_parts: Parts, obj: Any, meta: Any) -> Parts:
    """Where the metadata of a template's pods is: next to its spec, or the object's own."""
    if spec_parts and spec_parts[-1] == "spec" and len(spec_parts) > 1:
        return (*spec_parts[:-1], "metadata")
    return ("metadata",)


def _annotations(meta: Any, parts: Parts, names: Collection[str]) -> Iterator[Finding]:
    if not names or not isinstance(meta, dict):
        return
    annotations = meta.get("annotations")
    if not isinstance(annotations, dict):
        return
    for name in names:
        value = annotations.get(name)
        if isinstance(value, str) and not _zero(value):
            yield Finding(_path((*parts, "annotations", name)), name, value, ANNOTATION)


Found = tuple[Parts, str, str, str | None]


def _walk(
    root: Any,
    prefix: Parts,
    skip: set[Parts],
    is_legacy: Callable[[str], bool],
    annotations: Collection[str],
    *,
    depth: int,
) -> Iterator[Found]:
    """Legacy names under `limits`/`requests` maps, share annotations and embedded manifests,
    everywhere but the `skip` subtrees (iterative: a deep object cannot exhaust the stack)."""
    stack: list[tuple[Any, Parts]] = [(root, prefix)]
    while stack:
        node, parts = stack.pop()
        if isinstance(node, dict):
            for key, value in node.items():
                if not isinstance(key, str):
                    continue
                here = (*parts, key)
                if here in skip:
                    continue
                if key in _RESOURCE_MAPS and isinstance(value, dict):
                    for name, amount in value.items():
                        if isinstance(name, str) and is_legacy(name) and not _zero(amount):
                            yield (*here, name), name, str(amount), None
                    continue
                if key == "annotations" and isinstance(value, dict) and annotations:
                    for name in annotations:
                        amount = value.get(name)
                        if isinstance(amount, str) and not _zero(amount):
                            yield (*here, name), name, amount, ANNOTATION
                    continue
                stack.append((value, here))
        elif isinstance(node, list):
            stack.extend((item, (*parts, i)) for i, item in enumerate(node))
        elif isinstance(node, str) and depth < MAX_EMBEDDED_DEPTH and _may_embed(node):
            for index, document in enumerate(_documents(node)):
                for where, name, amount, _ in _walk(
                    document, (), set(), is_legacy, annotations, depth=depth + 1
                ):
                    inner = _path(where)
                    yield (*parts, f"document {index}: {inner}"), name, amount, EMBEDDED


def _may_embed(text: str) -> bool:
    return (
        len(text) <= MAX_EMBEDDED_CHARS
        and "\n" in text
        and ":" in text
        and any(hint in text for hint in _EMBEDDED_HINTS)
    )


def _documents(text: str) -> list[Any]:
    try:
        return [d for d in yaml.load_all(text, Loader=_LOADER) if isinstance(d, dict | list)]
    except yaml.YAMLError:
        return []  # not YAML: a script, a template with `{{ }}`, prose
    except RecursionError:
        return []


def _zero(amount: Any) -> bool:
    """A count of nothing (`0`, `"0"`, `0Mi`) asks for no device; an absent or unparsable amount
    is reported as written."""
    return amount is not None and is_zero(amount)


def _fields(entry: Entry, obj: Any, is_legacy: Callable[[str], bool]) -> Iterator[Found]:
    """The `nameQuantity` operator fields ({name: nvidia.com/gpu, quantity: 1}, or the keys the
    entry names); `resources` fields are maps of limits/requests, found by the walk and
    explained by `_reasons`."""
    for field in entry.fields:
        if field.form != "nameQuantity":
            continue
        try:
            matches = list(walk(obj, field.path))
        except ObjectShapeError:  # a wrongly typed field is the schema's to refuse
            continue
        for match in matches:
            value = match.value
            if not isinstance(value, dict):
                continue
            name, quantity = value.get(field.name_key), value.get(field.quantity_key, 1)
            if isinstance(name, str) and is_legacy(name) and not _zero(quantity):
                yield match.parts, name, str(quantity), field.why


def _reasons(entry: Entry, obj: Any) -> dict[Parts, str]:
    """Concrete path -> why, for the entry's operator fields and reported parts."""
    reasons: dict[Parts, str] = {}
    for path, why in [(f.path, f.why) for f in entry.fields] + [
        (r.path, r.why) for r in entry.reports
    ]:
        try:
            for match in walk(obj, path):
                reasons[match.parts] = why
        except ObjectShapeError:  # see _fields
            continue
    return reasons


def _reason(parts: Parts, reasons: dict[Parts, str], default: str) -> str:
    for end in range(len(parts), 0, -1):
        why = reasons.get(parts[:end])
        if why is not None:
            return why
    return default


def counted(group: str, kind: str, obj: Any, is_legacy: Callable[[str], bool]) -> tuple[str, ...]:
    """What a cap or a quota on legacy names (`NOT_REQUESTS`) becomes under DRA, one line per
    name: `path: name: amount: what; ...`."""
    known = _NOT_REQUESTS.get((group, kind))
    if known is None or not isinstance(obj, dict):
        return ()
    if known.path == "*":
        found = sorted({n for n in _strings(obj) if is_legacy(n)})
        return tuple(
            f"{kind} names {n}: {known.what}; once the nodes serve GPUs through DRA no node "
            f"advertises {n} and the quota counts nothing: give it a DRA quota instead"
            for n in found
        )
    node: Any = obj
    for part in known.path.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    if not isinstance(node, dict):
        return ()
    return tuple(
        f"{known.path}[{n}]: {amount}: {known.what}; once the nodes serve GPUs through DRA no "
        f"node advertises {n} and the cap counts nothing"
        for n, amount in node.items()
        if isinstance(n, str) and is_legacy(n)
    )


def _strings(root: Any) -> Iterator[str]:
    stack = [root]
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            yield node
        elif isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)


def scan_values(obj: Any, is_legacy: Callable[[str], bool]) -> tuple[Finding, ...]:
    """GPU requests in YAML that is no Kubernetes object: legacy names as keys of a
    `limits`/`requests` map, or of a map whose key ends in `_limits`, at any depth."""
    found: list[Finding] = []
    stack: list[tuple[Any, Parts]] = [(obj, ())]
    while stack:
        node, parts = stack.pop()
        if isinstance(node, dict):
            for key, value in node.items():
                if not isinstance(key, str):
                    continue
                here = (*parts, key)
                if isinstance(value, dict) and (key in _RESOURCE_MAPS or key.endswith("_limits")):
                    found += [
                        Finding(_path((*here, name)), name, str(amount), VALUES)
                        for name, amount in value.items()
                        if isinstance(name, str) and is_legacy(name) and not _zero(amount)
                    ]
                    continue
                stack.append((value, here))
        elif isinstance(node, list):
            stack.extend((item, (*parts, i)) for i, item in enumerate(node))
    return tuple(sorted(found, key=lambda f: f.path))
