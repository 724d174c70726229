"""Reading containers out of a pod spec of any pod-bearing kind (where a kind keeps its pod
specs is the workload catalogue's, `app/workloads`).

Every accessor checks the type of what it reads and raises ObjectShapeError with the field path,
so a malformed object is answered with a precise denial instead of a crash.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import Any, NamedTuple

from app.errors import ObjectShapeError

Obj = dict[str, Any]

CONTAINER_FIELDS = ("initContainers", "containers", "ephemeralContainers")
"""Every list of containers in a pod spec, in the order the kubelet starts them."""


_EMPTY: Mapping[str, Any] = MappingProxyType({})


class ContainerRef(NamedTuple):
    """One container of a pod spec, with where it is, and its resources read once when it is
    made (every check that asks for GPUs reads them: `resource_map`). A named tuple: made for
    every container of every pod review, it costs a tuple, not a frozen dataclass's per-field
    `object.__setattr__`."""

    field: str
    index: int  # type: ignore[assignment]  # (the position in its list; tuple.index unused)
    name: str
    container: Obj
    path: str
    """Dotted field path for messages: spec.containers[0]."""
    pointer: str
    """JSON pointer for patches: /spec/containers/0."""
    limits: Mapping[str, Any]
    requests: Mapping[str, Any]
    error: ObjectShapeError | None
    """Why `resources` cannot be read (raised by `resource_map`)."""

    @property
    def is_sidecar(self) -> bool:
        """An init container that keeps running (restartPolicy: Always) alongside the app."""
        return self.field == "initContainers" and self.container.get("restartPolicy") == "Always"

    @property
    def runs_with_app(self) -> bool:
        """Regular containers and sidecars: they hold devices while the pod runs."""
        return self.field == "containers" or self.is_sidecar


class PodSpecRef(NamedTuple):
    """The pod spec inside an object, with its field path and JSON pointer; its containers are
    read once, when it is made (`PodSpecRef.of`: the pipeline makes it once per review, at its
    edge), and every check walks the same ones (`containers`). A named tuple, as ContainerRef."""

    spec: Obj
    path: str
    pointer: str
    meta: Mapping[str, Any]
    """The metadata of the pods it makes (a template's, or a Pod's own): their labels select
    policy exceptions, their annotations can ask a scheduler for GPU shares."""
    read: tuple[ContainerRef, ...]
    error: ObjectShapeError | None
    """Why the containers after `read` cannot be read (raised by `containers`)."""

    @classmethod
    def of(cls, spec: Obj, path: str, pointer: str, meta: Mapping[str, Any] = _EMPTY) -> PodSpecRef:
        """The pod spec `spec` at `path` / `pointer`, its containers read."""
        read: list[ContainerRef] = []
        error: ObjectShapeError | None = None
        try:
            _read_containers(spec, path, pointer, read)
        except ObjectShapeError as exc:
            error = exc
        return cls(spec, path, pointer, meta, tuple(read), error)


def field_path(parts: tuple[str, ...]) -> str:
    return ".".join(parts)


def containers(ref: PodSpecRef) -> Iterator[ContainerRef]:
    """Every container of every kind in the pod spec (read when `ref` was made); a malformed
    one raises ObjectShapeError with its path, after those before it."""
    yield from ref.read
    if ref.error is not None:
        raise ref.error


def _read_containers(
    spec: Obj, spec_path: str, spec_pointer: str, read: list[ContainerRef]
) -> None:
    """Append the containers of `spec` to `read`, up to a malformed one (raised)."""
    for field in CONTAINER_FIELDS:
        items = spec.get(field)
        if items is None:
            continue
        if not isinstance(items, list):
            raise ObjectShapeError(f"{spec_path}.{field}", "must be a list")
        for index, container in enumerate(items):
            path = f"{spec_path}.{field}[{index}]"
            if not isinstance(container, dict):
                raise ObjectShapeError(path, "must be an object")
            name = container.get("name", "")
            if not isinstance(name, str):
                raise ObjectShapeError(f"{path}.name", "must be a string")
            limits: Mapping[str, Any] = _EMPTY
            requests: Mapping[str, Any] = _EMPTY
            error: ObjectShapeError | None = None
            try:
                limits = _read_resources(container, path, "limits")
                requests = _read_resources(container, path, "requests")
            except ObjectShapeError as exc:
                error = exc
            pointer = f"{spec_pointer}/{field}/{index}"
            read.append(
                ContainerRef(field, index, name, container, path, pointer, limits, requests, error)
            )


def resource_map(ref: ContainerRef, which: str) -> Mapping[str, Any]:
    """`limits` or `requests` of a container: name -> raw quantity ({} when absent); read when
    `ref` was made, a malformed `resources` raising ObjectShapeError with its path."""
    if ref.error is not None:
        raise ref.error
    return ref.limits if which == "limits" else ref.requests


def _read_resources(container: Obj, path: str, which: str) -> Mapping[str, Any]:
    resources = container.get("resources")
    if resources is None:
        return _EMPTY
    if not isinstance(resources, dict):
        raise ObjectShapeError(f"{path}.resources", "must be an object")
    values = resources.get(which)
    if values is None:
        return _EMPTY
    if not isinstance(values, dict):
        raise ObjectShapeError(f"{path}.resources.{which}", "must be an object")
    for name, value in values.items():
        if not isinstance(value, _QUANTITY) or type(value) is bool:
            raise ObjectShapeError(
                f"{path}.resources.{which}[{name}]", "must be a quantity string or number"
            )
    return values


_QUANTITY = (str, int, float)


def list_field(obj: Obj, key: str, path: str) -> list[Any]:
    """A list-valued field ([] when absent)."""
    value = obj.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise ObjectShapeError(f"{path}.{key}" if path else key, "must be a list")
    return value


def object_name(obj: Obj) -> str:
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        name = meta.get("name") or meta.get("generateName") or ""
        return name if isinstance(name, str) else ""
    return ""
