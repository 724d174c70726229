"""The operators' CRDs (`operators/crds/` of DRA_WEBHOOK_TEST_DATA: tests/operators.py), read
once, and what the workload tests ask of their schemas: where pod templates are, whether a catalogue path exists, and a
JSON Schema that judges an object as the API server would."""

from __future__ import annotations

import functools
import gzip
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.operators import crd_folder

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

MAP = "*"
LIST = "[]"
Steps = tuple[str, ...]
"""A path as catalogue steps: field names, `*` (every map value), `[]` (every list item)."""


@dataclass(frozen=True)
class Version:
    name: str
    served: bool
    schema: dict[str, Any]


@dataclass(frozen=True)
class Crd:
    file: str
    group: str
    kind: str
    versions: tuple[Version, ...]

    @property
    def served(self) -> tuple[Version, ...]:
        return tuple(v for v in self.versions if v.served)


def crd_files() -> list[Path]:
    return sorted(crd_folder().glob("*.yaml.gz"))


@functools.cache
def load(path: Path) -> tuple[Crd, ...]:
    """The CRDs of one file (parsing the big ones takes seconds: cached)."""
    with gzip.open(path) as raw:
        docs = [d for d in yaml.load_all(raw.read(), Loader=_LOADER) if d]
    return tuple(
        Crd(
            path.name,
            doc["spec"]["group"],
            doc["spec"]["names"]["kind"],
            tuple(
                Version(v["name"], bool(v.get("served")), v["schema"]["openAPIV3Schema"])
                for v in doc["spec"]["versions"]
            ),
        )
        for doc in docs
        if doc.get("kind") == "CustomResourceDefinition"
    )


def all_crds() -> tuple[Crd, ...]:
    return tuple(crd for path in crd_files() for crd in load(path))


def crds_of(group: str, kind: str) -> tuple[Crd, ...]:
    """Every CRD of group/kind in the test data (MPIJob has two: Training Operator v1, mpi-operator
    v2beta1). Only the files named after the group are read."""
    return tuple(
        crd
        for path in crd_files()
        if path.name.startswith(group + "_")
        for crd in load(path)
        if (crd.group, crd.kind) == (group, kind)
    )


def text(steps: Steps) -> str:
    """Steps as the catalogue writes them: `spec.workerGroupSpecs[].template.spec`."""
    out = ""
    for step in steps:
        if step == LIST:
            out += LIST
        else:
            out += f".{step}" if out else step
    return out


# -- pod template locations -----------------------------------------------------------------


@dataclass(frozen=True)
class Location:
    """Where a schema holds a pod spec, as the catalogue would write it: a PodTemplateSpec at
    `X` is the pod spec `X.spec`; an inline PodSpec (KServe) is its own path."""

    steps: Steps
    template: bool
    """Found as a PodTemplateSpec (`metadata` + `spec.containers`), not an inline PodSpec."""

    @property
    def schema_path(self) -> str:
        return text(self.steps[:-1] if self.template else self.steps)

    @property
    def path(self) -> str:
        return text(self.steps)


def _props(node: Any) -> dict[str, Any]:
    props = node.get("properties") if isinstance(node, dict) else None
    return props if isinstance(props, dict) else {}


def _is_template(node: dict[str, Any]) -> bool:
    props = _props(node)
    return "metadata" in props and "containers" in _props(props.get("spec"))


def _is_pod_spec(node: dict[str, Any]) -> bool:
    containers = _props(node).get("containers")
    if not isinstance(containers, dict) or containers.get("type") != "array":
        return False
    return "resources" in _props(containers.get("items"))


def locations(schema: dict[str, Any]) -> list[Location]:
    """Every PodTemplateSpec and inline PodSpec of an openAPIV3Schema, `status` skipped. The
    walk does not go into a PodTemplateSpec it found (its spec is the location), but goes on
    into an inline PodSpec (KServe's `predictor.workerSpec` is one inside another)."""
    found: list[Location] = []
    _locate(schema, (), found)
    return found


def _locate(node: Any, steps: Steps, found: list[Location]) -> None:
    if not isinstance(node, dict):
        return
    if _is_template(node):
        found.append(Location((*steps, "spec"), template=True))
        return
    if _is_pod_spec(node):
        found.append(Location(steps, template=False))
    for name, child in _props(node).items():
        if steps == () and name == "status":
            continue
        _locate(child, (*steps, name), found)
    if isinstance(node.get("items"), dict):
        _locate(node["items"], (*steps, LIST), found)
    if isinstance(node.get("additionalProperties"), dict):
        _locate(node["additionalProperties"], (*steps, MAP), found)
    for keyword in ("allOf", "anyOf", "oneOf"):
        for sub in node.get(keyword) or ():
            _locate(sub, steps, found)


# -- catalogue paths in a schema ------------------------------------------------------------


def resolves(schema: dict[str, Any], steps: Steps) -> bool:
    """Whether a catalogue path names a field of the schema. Below an opaque object
    (`x-kubernetes-preserve-unknown-fields` without that property: Spark's `driver.template`)
    any path is accepted, as the API server accepts any field there."""
    node: Any = schema
    for step in steps:
        if not isinstance(node, dict):
            return False
        if step == LIST:
            node = node.get("items")
        elif step == MAP:
            node = node.get("additionalProperties")
        elif step in _props(node):
            node = _props(node)[step]
        else:
            return node.get("x-kubernetes-preserve-unknown-fields") is True
        if not isinstance(node, dict):
            return False
    return True


# -- validation as the API server does it ---------------------------------------------------


def api_server_schema(node: Any) -> Any:
    """The openAPIV3Schema as JSON Schema: `x-kubernetes-*` keywords dropped, `nullable`
    allowing null, and objects closed (`additionalProperties: false`) where the API server
    would prune unknown fields: a field a rewrite adds that the CRD does not know (an old
    PodSpec without `resourceClaims`) would be silently dropped, which is as wrong as invalid."""
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key.startswith("x-kubernetes-") or key == "nullable":
            continue
        if key == "properties":
            out[key] = {name: api_server_schema(sub) for name, sub in value.items()}
        elif key in ("items", "additionalProperties", "not"):
            out[key] = api_server_schema(value)
        elif key in ("allOf", "anyOf", "oneOf"):
            out[key] = [api_server_schema(sub) for sub in value]
        else:
            out[key] = value
    if node.get("nullable") is True and "type" in out:
        out["type"] = [out["type"], "null"]
    opaque = node.get("x-kubernetes-preserve-unknown-fields") is True
    embedded = node.get("x-kubernetes-embedded-resource") is True
    if "properties" in node and "additionalProperties" not in node and not opaque:
        if embedded:  # apiVersion, kind and metadata are implied
            for name in ("apiVersion", "kind", "metadata"):
                out["properties"].setdefault(name, {})
        out["additionalProperties"] = False
    return out


def documents(text_: str) -> Iterator[Any]:
    yield from (d for d in yaml.load_all(text_, Loader=_LOADER) if d is not None)
