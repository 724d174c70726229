"""`dra-webhook check`: the admission pipeline over YAML manifests, no cluster needed.

Manifests go through the mutating then the validating pipeline, as the API server would (the
validating side sees the patched object), and each decision, warning and patch is printed: a
pre-merge gate like `kyverno apply` or `gator test`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonpatch
import yaml

from app.cluster.view import Kind
from app.config import Policy
from app.config.files import FileProblem, manifest_files, read_each, read_text, yaml_problem
from app.errors import ConfigError
from app.pipeline import Decision, Endpoint, Pipeline
from app.policies.base import Request
from app.policies.builders import legacy_matcher
from app.workloads import scan_values

Obj = dict[str, Any]

NO_KIND = "(YAML without a kind)"
"""The kind `check` gives a document that is no Kubernetes object but asks for GPUs."""
VALUES_KEY = "values"


class ManifestError(ConfigError):
    """A manifest file cannot be read or holds something that is not a Kubernetes object."""


Found = list[tuple[str, Obj]]
"""(where, object): `file#index` and the object."""


def read_objects(paths: Iterable[Path]) -> Iterator[tuple[str, Obj]]:
    """(where, object) for every object in YAML/JSON files: documents, `List`s, `*List`s. The
    first file that cannot be used raises ManifestError (a cluster dump is whole or useless)."""
    for path in manifest_files(paths):
        found, problem = _objects(path, read_text(path, ManifestError))
        if problem is not None:
            raise ManifestError(str(problem))
        yield from found


def read_manifests(
    paths: Iterable[Path], is_legacy: Callable[[str], bool] | None = None
) -> tuple[Found, list[FileProblem]]:
    """The objects of every file that can be used, and a problem for each file that cannot
    (unreadable, not YAML, an object without a kind), in file order: `check` judges the first
    and lists the second, as `migrate` translates what it can. With `is_legacy`, a document
    without a kind that asks for GPUs (Helm values, a kustomize patch: `scan_values`) is one
    of the objects, kind and all (`check` warns of its requests), not a problem."""
    files = manifest_files(paths)
    texts, unread = read_each(files)
    problems = {problem.file: problem for problem in unread}
    objects: Found = []
    for path, text in texts.items():
        found, problem = _objects(path, text, is_legacy)
        if problem is None:
            objects += found
        else:
            problems[str(path)] = problem
    return objects, [problems[str(path)] for path in files if str(path) in problems]


def _objects(
    path: Path, text: str, is_legacy: Callable[[str], bool] | None = None
) -> tuple[Found, FileProblem | None]:
    """A file's objects; or none, and why, when any of it is not YAML or not an object."""
    try:
        documents = list(yaml.safe_load_all(text))
    except yaml.YAMLError as exc:
        return [], yaml_problem(str(path), exc, text)
    found: Found = []
    index = 0
    for document in documents:
        if document is None:
            continue
        doc = document
        if isinstance(doc, dict) and doc.get("kind") == "AdmissionReview":
            request = doc.get("request")
            doc = request.get("object") if isinstance(request, dict) else None
        items = doc.get("items") if isinstance(doc, dict) else None
        for obj in items if isinstance(items, list) else [doc]:
            if not isinstance(obj, dict) or not isinstance(obj.get("kind"), str):
                if is_legacy is None or not scan_values(obj, is_legacy):
                    return [], FileProblem(str(path), f"object {index} has no kind")
                found.append((f"{path}#{index}", {"kind": NO_KIND, VALUES_KEY: obj}))
            else:
                found.append((f"{path}#{index}", obj))
            index += 1
    return found, None


def as_request(obj: Obj, namespace: str, uid: str) -> Request:
    group, _, version = str(obj.get("apiVersion", "v1")).rpartition("/")
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    assert isinstance(meta, dict)
    kind = str(obj["kind"])
    return Request(
        uid=uid,
        group=group,
        version=version,
        kind=kind,
        resource=kind.lower() + "s",
        sub_resource="",
        operation="CREATE",
        namespace=str(meta.get("namespace") or namespace),
        name=str(meta.get("name") or meta.get("generateName") or ""),
        object=obj,
        old_object=None,
        dry_run=False,
        username="dra-webhook-check",
        request_version=version,
    )


@dataclass
class Checked:
    """What the API server would have done with one object."""

    where: str
    kind: str
    namespace: str
    name: str
    allowed: bool
    message: str = ""
    warnings: list[str] = field(default_factory=list)
    patch: list[Obj] = field(default_factory=list)
    templates: list[str] = field(default_factory=list)
    note: str = ""
    """Why nothing was checked, where that is the namespace (no mode label, not in the view)."""


def _namespace_note(pipeline: Pipeline, namespace: str, unknown: set[str]) -> str:
    """What `check` says of a namespace the mode rules do not apply to.

    A namespace the cluster file does not hold is judged as one without labels, and put into
    the view as such (its name added to `unknown`, so its later objects get the same note).
    The webhook answers such a namespace per `failure.unknownNamespace` (closed by default)
    because there the API server only sends labelled namespaces, and one missing from the view
    is an opted-in one the view has not caught up with; offline the cluster file is all there
    is, and "denied (fail closed)" would blame a webhook failure that never happened.
    """
    if not namespace:
        return ""
    label = pipeline.policy.namespace_modes.label
    if namespace in unknown or pipeline.view.namespace_labels(namespace) is None:
        if namespace not in unknown:
            unknown.add(namespace)
            pipeline.view.apply(
                Kind.NAMESPACE,
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
            )
        return (
            f"namespace {namespace} is not in the cluster file: no mode applies, judged as a "
            f"namespace without a {label} label (pass --cluster-file with its Namespace, or "
            "--namespace)"
        )
    labels = pipeline.view.namespace_labels(namespace) or {}
    if label not in labels:
        return f"namespace {namespace} has no {label} label: only quotas and admin rules apply"
    return ""


def offline_policy(policy: Policy) -> Policy:
    """The policy as `check` and `report` run it: audit findings warned by the pipeline itself.

    `draOnly.auditWarnedByAdmissionPolicy` (which the chart's ConfigMap sets when its
    ValidatingAdmissionPolicy enforces the rule) stops the live webhook from repeating that
    admission policy's warning in audit namespaces. Offline no admission policy runs, so
    honouring it would print a bare "allowed" for a legacy pod in an audit namespace.
    """
    if not policy.dra_only.audit_warned_by_admission_policy:
        return policy
    dra_only = policy.dra_only.model_copy(update={"audit_warned_by_admission_policy": False})
    return policy.model_copy(update={"dra_only": dra_only})


Served = Callable[[Obj], "str | None"]
"""Why the target cluster does not serve an object's apiVersion and kind, or None
(`app.migrate.served.Target.verdict`: the command line picks the target)."""


def check(
    pipeline: Pipeline,
    objects: Iterable[tuple[str, Obj]],
    namespace: str,
    served: Served | None = None,
) -> list[Checked]:
    """Mutate, apply the patch, then validate each object; templates go into the view. An
    object of an apiVersion the target does not serve is denied whatever the webhook says:
    the API server would not take it."""
    results = []
    unknown: set[str] = set()
    for number, (where, obj) in enumerate(objects):
        if obj.get("kind") == NO_KIND and VALUES_KEY in obj:
            legacy = pipeline.parts.build(legacy_matcher)
            warnings = [f"{f.path}: {f.message}" for f in scan_values(obj[VALUES_KEY], legacy)]
            results.append(Checked(where, NO_KIND, "", "", True, warnings=warnings))
            continue
        request = as_request(obj, namespace, f"check-{number}")
        note = _namespace_note(pipeline, request.namespace, unknown)
        mutated = pipeline.review(Endpoint.MUTATE, request)
        final: Decision = mutated
        patched = obj
        if mutated.allowed:
            if mutated.patch:
                patched = jsonpatch.apply_patch(obj, list(mutated.patch))
            for template in mutated.templates:
                pipeline.view.apply(Kind.RESOURCE_CLAIM_TEMPLATE, template)
            validated = pipeline.review_any_kind(as_request(patched, namespace, request.uid))
            final = validated if not validated.allowed else mutated
            warnings = list(dict.fromkeys([*mutated.warnings, *validated.warnings]))
        else:
            warnings = list(mutated.warnings)
        unserved = served(obj) if served is not None else None
        message = "\n".join(m for m in (unserved, final.message) if m)
        allowed = final.allowed and unserved is None
        results.append(
            Checked(
                where=where,
                kind=request.kind,
                namespace=request.namespace,
                name=request.name,
                allowed=allowed,
                message=message,
                warnings=warnings,
                patch=list(mutated.patch) if allowed else [],
                templates=[t["metadata"]["name"] for t in mutated.templates],
                note=note,
            )
        )
    return results
