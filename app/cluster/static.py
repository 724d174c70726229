"""The static source: cluster objects from a YAML file, as `kubectl get ... -o yaml` writes them.

The file may be a `List` (`kind: List` with `items`), a multi-document stream, or a mix. Objects
of kinds the view does not hold are skipped. A `kubectl version -o yaml` document in it names the
release: the view then keeps to that release's default DRA features (app.cluster.release).
The embedded demo cluster is the default for development and tests: no cluster needed; never
for `report` on a dump (`load_dump`), which reads the dump's own cluster objects instead.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from app.cluster.release import ServedRelease, parse_minor
from app.cluster.view import ClusterView, Kind, object_key
from app.config.files import read_text, yaml_problem
from app.errors import ClusterFileError

logger = logging.getLogger(__name__)

DEMO_CLUSTER_RESOURCE = "demo-cluster.yaml"


def read_cluster_text(path: Path | None) -> tuple[str, str]:
    """The file's text and a name for messages; None reads the embedded demo cluster."""
    if path is None:
        text = resources.files("app.cluster").joinpath(DEMO_CLUSTER_RESOURCE).read_text()
        return text, "embedded demo cluster"
    return read_text(path, ClusterFileError, "cluster file"), str(path)


def parse_cluster_objects(text: str, source: str) -> dict[Kind, list[dict[str, Any]]]:
    """Objects of the kinds the view holds, grouped by kind; validates names."""
    return _parse(text, source)[0]


def _parse(text: str, source: str) -> tuple[dict[Kind, list[dict[str, Any]]], str | None]:
    """The objects, and the release of a `kubectl version -o yaml` document (`serverVersion`)
    in the file, if it has one."""
    try:
        documents = list(yaml.safe_load_all(text))
    except yaml.YAMLError as exc:
        raise ClusterFileError(str(yaml_problem(source, exc, text))) from None
    release = next(
        (d["serverVersion"].get("gitVersion") for d in documents
         if isinstance(d, dict) and isinstance(d.get("serverVersion"), dict)),
        None,
    )  # fmt: skip
    if release is not None and (not isinstance(release, str) or parse_minor(release) is None):
        raise ClusterFileError(f"{source}: serverVersion.gitVersion {release!r} is no release")
    documents = [d for d in documents if not (isinstance(d, dict) and "serverVersion" in d)]
    grouped, skipped = _group(
        (f"{source}: item {index}", obj) for index, obj in enumerate(_flatten(documents))
    )
    if skipped:
        logger.info(
            "cluster file: skipped kinds the view does not hold", extra={"skipped": skipped}
        )
    return grouped, release


def _group(
    items: Iterable[tuple[str, Any]],
) -> tuple[dict[Kind, list[dict[str, Any]]], dict[str, int]]:
    """(where, object) pairs grouped by the kinds the view holds, names validated; and how many
    of each other kind were skipped."""
    known = {kind.value: kind for kind in Kind}
    grouped: dict[Kind, list[dict[str, Any]]] = {kind: [] for kind in Kind}
    skipped: dict[str, int] = {}
    for where, obj in items:
        if not isinstance(obj, dict):
            raise ClusterFileError(f"{where} is not a mapping")
        kind_name = obj.get("kind")
        kind = known.get(kind_name) if isinstance(kind_name, str) else None
        if kind is None:
            skipped[str(kind_name)] = skipped.get(str(kind_name), 0) + 1
            continue
        try:
            namespace, _ = object_key(obj)
        except ValueError as exc:
            raise ClusterFileError(f"{where} ({kind_name}): {exc}") from exc
        if kind.namespaced and not namespace:
            raise ClusterFileError(f"{where} ({kind_name}) has no namespace")
        grouped[kind].append(obj)
    return grouped, skipped


def _flatten(documents: list[Any]) -> Iterator[Any]:
    for doc in documents:
        if doc is None:
            continue
        if (isinstance(doc, dict) and doc.get("kind") == "List") or (
            isinstance(doc, dict)
            and isinstance(doc.get("items"), list)
            and "kind" in doc
            and str(doc["kind"]).endswith("List")
        ):
            yield from doc.get("items") or []
        else:
            yield doc


class StaticSource:
    """A cluster view filled once from a file; template creates are recorded in the view."""

    def __init__(
        self,
        view: ClusterView,
        path: Path | None = None,
        objects: list[dict[str, Any]] | None = None,
    ) -> None:
        """Objects come from `objects` when given (tests), else from `path` or the demo file."""
        self.view = view
        self._path = path
        self._objects = objects
        self.created_templates: list[dict[str, Any]] = []

    def load(self) -> None:
        """Read the file into the view and mark every kind synced (raises ClusterFileError)."""
        if self._objects is not None:
            source = "objects"
            grouped, release = _parse(yaml.safe_dump_all(self._objects), source)
        else:
            text, source = read_cluster_text(self._path)
            grouped, release = _parse(text, source)
        for kind, objs in grouped.items():
            self.view.replace(kind, objs)
        if release is not None:
            self.view.set_release(ServedRelease.from_defaults(release, f"{source}: defaults"))
        logger.info(
            "cluster view loaded",
            extra={"source": source, "counts": {k.value: len(v) for k, v in grouped.items()}},
        )

    async def start(self) -> None:
        self.load()

    async def stop(self) -> None:
        return None

    async def lookup_namespace(self, name: str) -> dict[str, Any] | None:
        """The file is all the static source knows: a namespace missing from it stays unknown."""
        return None

    async def create_claim_template(self, template: dict[str, Any]) -> None:
        """Record the template in the view, as the live source would after its create."""
        self.created_templates.append(template)
        self.view.apply(Kind.RESOURCE_CLAIM_TEMPLATE, template)

    async def touch_claim_template(self, namespace: str, name: str) -> bool:
        """Nothing deletes a static view's templates: there is nothing to protect them from."""
        return self.view.get(Kind.RESOURCE_CLAIM_TEMPLATE, name, namespace) is not None


def named_release(view: ClusterView, version: str | None) -> None:
    """`--kubernetes-version`: judge as that release's defaults would (over the cluster file's
    own `serverVersion`). Raises ClusterFileError for a name that is no release."""
    if version is None:
        return
    try:
        view.set_release(ServedRelease.from_defaults(version, "--kubernetes-version: defaults"))
    except ValueError as exc:
        raise ClusterFileError(str(exc)) from None


def load_dump(
    view: ClusterView, path: Path | None, dump: Iterable[tuple[str, dict[str, Any]]]
) -> None:
    """`report` on a dump: the view holds the dump's own Namespaces, Nodes, DeviceClasses,
    ResourceSlices, claims and quotas, over those of the cluster file when one is given (an
    object in both is the dump's). Never the embedded demo cluster: its namespaces' labels
    would give a real cluster's namespaces modes nobody set. Raises ClusterFileError."""
    grouped: dict[Kind, list[dict[str, Any]]] = {kind: [] for kind in Kind}
    release = None
    source = "dump"
    if path is not None:
        text, source = read_cluster_text(path)
        grouped, release = _parse(text, source)
    dumped, _ = _group(dump)
    for kind in Kind:
        merged = {object_key(obj): obj for obj in (*grouped[kind], *dumped[kind])}
        view.replace(kind, merged.values())
    if release is not None:
        view.set_release(ServedRelease.from_defaults(release, f"{source}: defaults"))
    logger.info(
        "cluster view loaded from the dump",
        extra={"source": source, "counts": {k.value: len(v) for k, v in dumped.items()}},
    )
