"""ClusterView: the read model policies use, fed by a static file or a live watch.

Policies only read: every lookup they make is a dict access on an index kept current by the
writer methods (`apply`, `remove`, `replace`), which the sources call. Nothing here does I/O.
The view lives on the event loop thread; sources and admissions take turns on that one thread,
so no locking is needed.

Derived indexes (claim totals per namespace, templates in use) are subscribed once, at load,
with `derived()` (the pipeline does it for the indexes its checks' registrations declare) and
are told of every change, so they are updated incrementally rather than rebuilt per request.

Policies see the view through `ClusterReader`, the read-only protocol of what they read: they
cannot write objects, subscribe listeners or create a derived index on the request path
(`index()` only returns one subscribed at load).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from enum import StrEnum
from types import MappingProxyType
from typing import Any, Protocol, TypeVar, cast

from app.cluster.release import ServedRelease
from app.cluster.slim import SharedValues, slim

Obj = dict[str, Any]
Key = tuple[str, str]
"""(namespace, name); namespace is "" for cluster-scoped kinds."""


class Kind(StrEnum):
    """The kinds the view holds. The value is the Kubernetes `kind`."""

    NAMESPACE = "Namespace"
    DEVICE_CLASS = "DeviceClass"
    RESOURCE_SLICE = "ResourceSlice"
    RESOURCE_CLAIM = "ResourceClaim"
    RESOURCE_CLAIM_TEMPLATE = "ResourceClaimTemplate"
    RESOURCE_QUOTA = "ResourceQuota"
    NODE = "Node"
    """Names and labels only (a metadata-only watch): which nodes a slice's nodeSelector
    reaches. Optional: without permission to list Nodes the view holds none."""
    PRIORITY_CLASS = "PriorityClass"
    """Value, globalDefault and preemptionPolicy only: whether the pods of a workload template
    that names a class (or none, under a globalDefault) may preempt (app.k8s.priority). A Pod
    needs none: the Priority admission plugin has set its priority before any webhook sees it.
    Optional: without permission the policy's `preemption.priorityClasses` are all it knows."""
    POD = "Pod"
    """Only pods that reference resource claims, with their priority (app.cluster.slim): who
    holds an allocated claim's devices and whether a preemptor outranks them. Bounded by the
    number of DRA pods, not all pods; never read on a hot path except by key. Optional: without
    permission the holders are named by their claims."""
    POD_GROUP = "PodGroup"
    """`scheduling.k8s.io` PodGroups, for their group claims (`app.k8s.groups`): which of a
    pod's claims is its group's. Optional: a release that does not serve them has none."""

    @property
    def namespaced(self) -> bool:
        return self in _NAMESPACED


_NAMESPACED = frozenset(
    {
        Kind.RESOURCE_CLAIM,
        Kind.RESOURCE_CLAIM_TEMPLATE,
        Kind.RESOURCE_QUOTA,
        Kind.POD,
        Kind.POD_GROUP,
    }
)

Listener = Callable[[Kind, Obj | None, Obj | None], None]
"""Called as listener(kind, old, new) after a change: (None, new) added, (old, None) removed."""

_EMPTY: Mapping[str, Obj] = MappingProxyType({})


class DerivedIndex(Protocol):
    """An index computed from the view's objects and updated by its change events."""

    def on_change(self, kind: Kind, old: Obj | None, new: Obj | None) -> None: ...


D = TypeVar("D", bound=DerivedIndex)


class ClusterReader(Protocol):
    """What a policy reads from the cluster view (`ClusterView` is the one implementation)."""

    @property
    def stale_kinds(self) -> frozenset[Kind]: ...

    @property
    def release(self) -> ServedRelease: ...

    def synced_kinds(self) -> frozenset[Kind]: ...

    def generation(self, kind: Kind) -> int: ...

    def get(self, kind: Kind, name: str, namespace: str = "") -> Obj | None: ...

    def objects(self, kind: Kind) -> Mapping[Key, Obj]: ...

    def in_namespace(self, kind: Kind, namespace: str) -> Mapping[str, Obj]: ...

    def namespace_labels(self, name: str) -> Mapping[str, str] | None: ...

    def device_class(self, name: str) -> Obj | None: ...

    def device_classes(self) -> Mapping[str, Obj]: ...

    def device_class_for_extended_resource(self, resource: str) -> str | None: ...

    def resource_slices(self) -> Mapping[str, Obj]: ...

    def index(self, index_type: type[D]) -> D: ...


def object_key(obj: Obj) -> Key:
    """The (namespace, name) of a raw object; raises ValueError when it has no name."""
    meta = obj.get("metadata")
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not meta["name"]:
        raise ValueError("object has no metadata.name")
    namespace = meta.get("namespace") or ""
    if not isinstance(namespace, str):
        raise ValueError("metadata.namespace is not a string")
    return namespace, meta["name"]


class ClusterView:
    """Objects by kind and key, with the indexes the policies need."""

    def __init__(self) -> None:
        self._objects: dict[Kind, dict[Key, Obj]] = {kind: {} for kind in Kind}
        self._by_namespace: dict[Kind, dict[str, dict[str, Obj]]] = {
            kind: {} for kind in _NAMESPACED
        }
        self._by_name: dict[Kind, dict[str, Obj]] = {
            kind: {} for kind in Kind if kind not in _NAMESPACED
        }
        self._namespace_labels: dict[str, Mapping[str, str]] = {}
        self._class_by_extended_resource: dict[str, str] = {}
        self._generation: dict[Kind, int] = dict.fromkeys(Kind, 0)
        self._synced: set[Kind] = set()
        self._stale: frozenset[Kind] = frozenset()
        self._listeners: list[Listener] = []
        self._on_synced: list[Callable[[], None]] = []
        self._shared_values = SharedValues()
        self._derived: dict[type[Any], DerivedIndex] = {}
        self._release = ServedRelease.assumed()

    # -- reads -----------------------------------------------------------------------------

    @property
    def release(self) -> ServedRelease:
        """The release the API server runs and the DRA fields it keeps (app.cluster.release):
        what the checks may write. Set by the source (probed live, named offline)."""
        return self._release

    def set_release(self, release: ServedRelease) -> None:
        self._release = release

    @property
    def synced(self) -> bool:
        """True once every kind has been listed at least once."""
        return len(self._synced) == len(Kind)

    def synced_kinds(self) -> frozenset[Kind]:
        return frozenset(self._synced)

    @property
    def stale_kinds(self) -> frozenset[Kind]:
        """Kinds whose source cannot vouch for them now: not listed yet, or out of sync with the
        API server for longer than the configured bound. Always empty for a static view.

        The pipeline reads this on every review (one attribute read), to apply each check's
        staleView failure mode; /readyz is false while it is not empty.
        """
        return self._stale

    def generation(self, kind: Kind) -> int:
        """A number that changes whenever any object of `kind` changes (for memoization)."""
        return self._generation[kind]

    def get(self, kind: Kind, name: str, namespace: str = "") -> Obj | None:
        return self._objects[kind].get((namespace, name))

    def objects(self, kind: Kind) -> Mapping[Key, Obj]:
        return MappingProxyType(self._objects[kind])

    def in_namespace(self, kind: Kind, namespace: str) -> Mapping[str, Obj]:
        """Objects of a namespaced kind in one namespace, by name."""
        found = self._by_namespace[kind].get(namespace)
        return MappingProxyType(found) if found is not None else _EMPTY

    def namespace_labels(self, name: str) -> Mapping[str, str] | None:
        """The labels of a namespace, or None when the view does not know it."""
        return self._namespace_labels.get(name)

    def device_class(self, name: str) -> Obj | None:
        return self._by_name[Kind.DEVICE_CLASS].get(name)

    def device_classes(self) -> Mapping[str, Obj]:
        """DeviceClasses by name."""
        return MappingProxyType(self._by_name[Kind.DEVICE_CLASS])

    def device_class_for_extended_resource(self, resource: str) -> str | None:
        """The DeviceClass whose spec.extendedResourceName is `resource` (KEP-5004), if any;
        of several, the one the scheduler uses (`newest_class`)."""
        return self._class_by_extended_resource.get(resource)

    def _map_extended_resource(self, resource: str) -> None:
        """Which class serves `resource` now, after a DeviceClass mapping it changed (classes
        are few: they are scanned)."""
        mapping = [
            c
            for c in self._by_name[Kind.DEVICE_CLASS].values()
            if _extended_resource_name(c) == resource
        ]
        if mapping:
            self._class_by_extended_resource[resource] = newest_class(mapping)["metadata"]["name"]
        else:
            self._class_by_extended_resource.pop(resource, None)

    def resource_slices(self) -> Mapping[str, Obj]:
        """ResourceSlices by name."""
        return MappingProxyType(self._by_name[Kind.RESOURCE_SLICE])

    def index(self, index_type: type[D]) -> D:
        """The derived index of `index_type` subscribed at load; raises LookupError when none
        was (the reading check's registration must declare it, see `app/pipeline.py`)."""
        found = self._derived.get(index_type)
        if found is None:
            raise LookupError(
                f"derived index {index_type.__name__} is not subscribed: declare it in the "
                "registration of the check that reads it"
            )
        return cast(D, found)

    # -- writes (sources, and the pipeline at load) ----------------------------------------

    def derived(self, index_type: type[D]) -> D:
        """The view's one instance of a derived index: built (no-argument constructor) and
        subscribed on first use, so it is replayed the current objects once and then kept
        current by events. Called at load (the pipeline, for its registrations' indexes; the
        template collector), which keeps that replay off the request path."""
        found = self._derived.get(index_type)
        if found is None:
            found = index_type()
            self.subscribe(found.on_change)
            self._derived[index_type] = found
        return cast(D, found)

    def subscribe(self, listener: Listener) -> None:
        """Be told of every change; the listener is first replayed the current objects."""
        self._listeners.append(listener)
        for kind in Kind:
            for obj in self._objects[kind].values():
                listener(kind, None, obj)

    def when_synced(self, callback: Callable[[], None]) -> None:
        """Call `callback` once, when every kind has been listed (now, if that is so already),
        before `synced` turns true: what is built there (the pipeline's warm indexes) is ready
        when /readyz says so. Callbacks run in the order they were given."""
        if self.synced:
            callback()
        else:
            self._on_synced.append(callback)

    def apply(self, kind: Kind, obj: Obj) -> None:
        """Add or replace one object (watch ADDED/MODIFIED, or our own create). One the view
        does not hold (`held`: a pod without resource claims) is not added."""
        obj = slim(kind, obj, self._shared_values)
        key = object_key(obj)
        if not held(kind, obj):
            return  # (a pod's resourceClaims cannot change: it never was held either)
        old = self._objects[kind].get(key)
        if old is not None and _same_version(old, obj):
            return  # e.g. the watch event of a template we created and applied already
        self._objects[kind][key] = obj
        self._index(kind, key, old, obj)

    def remove(self, kind: Kind, obj: Obj) -> None:
        """Remove one object (watch DELETED); unknown objects are ignored."""
        key = object_key(obj)
        old = self._objects[kind].pop(key, None)
        if old is not None:
            self._index(kind, key, old, None)

    def replace(self, kind: Kind, objs: Iterable[Obj]) -> None:
        """Make the view of `kind` exactly `objs` (a list or relist), and mark it synced."""
        fresh: dict[Key, Obj] = {}
        current = self._objects[kind]
        for raw in objs:
            key = object_key(raw)
            if not held(kind, raw):
                continue
            previous = current.get(key)
            if previous is not None and _same_version(previous, raw):
                fresh[key] = previous  # unchanged since we last saw it: keep, do not re-slim
            else:
                fresh[key] = slim(kind, raw, self._shared_values)
        for key, old in list(self._objects[kind].items()):
            if key not in fresh:
                del self._objects[kind][key]
                self._index(kind, key, old, None)
        for key, obj in fresh.items():
            previous = self._objects[kind].get(key)
            if previous is None or not _same_version(previous, obj):
                self._objects[kind][key] = obj
                self._index(kind, key, previous, obj)
        if kind not in self._synced and len(self._synced) == len(Kind) - 1:
            callbacks, self._on_synced = self._on_synced, []
            for callback in callbacks:
                callback()
        self._synced.add(kind)

    def mark_unsynced(self, kind: Kind) -> None:
        self._synced.discard(kind)

    def mark_stale(self, kind: Kind) -> None:
        """The source lost track of `kind`; the objects stay (the last good state)."""
        self._stale = self._stale | {kind}

    def mark_fresh(self, kind: Kind) -> None:
        """The source is in sync with the API server for `kind` again."""
        self._stale = self._stale - {kind}

    def _index(self, kind: Kind, key: Key, old: Obj | None, new: Obj | None) -> None:
        namespace, name = key
        self._generation[kind] += 1
        if kind.namespaced:
            bucket = self._by_namespace[kind].setdefault(namespace, {})
            if new is None:
                bucket.pop(name, None)
                if not bucket:
                    del self._by_namespace[kind][namespace]
            else:
                bucket[name] = new
        elif new is None:
            self._by_name[kind].pop(name, None)
        else:
            self._by_name[kind][name] = new
        if kind is Kind.NAMESPACE:
            if new is None:
                self._namespace_labels.pop(name, None)
            else:
                labels = new.get("metadata", {}).get("labels")
                self._namespace_labels[name] = MappingProxyType(
                    {k: v for k, v in labels.items() if isinstance(v, str)}
                    if isinstance(labels, dict)
                    else {}
                )
        elif kind is Kind.DEVICE_CLASS:
            names = {_extended_resource_name(o) for o in (old, new) if o is not None} - {None}
            for resource in names:
                self._map_extended_resource(str(resource))
        for listener in self._listeners:
            listener(kind, old, new)


def held(kind: Kind, obj: Obj) -> bool:
    """Whether the view keeps `obj` (raw or slimmed): every object, but of Pods only those
    that reference resource claims (the holders of claims; most pods reference none)."""
    if kind is not Kind.POD:
        return True
    spec = obj.get("spec")
    return isinstance(spec, dict) and bool(spec.get("resourceClaims"))


def _same_version(old: Obj, new: Obj) -> bool:
    """Both are the same stored version of one object (a relist or a repeated event).

    Objects without a resourceVersion (static files) are never the same: they are re-indexed.
    """
    old_meta, new_meta = old.get("metadata") or {}, new.get("metadata") or {}
    version = new_meta.get("resourceVersion")
    return (
        bool(version)
        and old_meta.get("resourceVersion") == version
        and old_meta.get("uid") == new_meta.get("uid")
    )


def newest_class(classes: list[Obj]) -> Obj:
    """Of DeviceClasses mapping one extended resource name, the one the scheduler uses: created
    last, then the name sorted first (`DeviceClassSpec.extendedResourceName`). A class without
    a timestamp (being created, or from a file) counts as the newest."""
    by_name = sorted(classes, key=lambda c: str(c.get("metadata", {}).get("name", "")))
    return max(by_name, key=lambda c: str(c.get("metadata", {}).get("creationTimestamp") or "~"))


def _extended_resource_name(device_class: Obj) -> str | None:
    spec = device_class.get("spec")
    if isinstance(spec, dict):
        value = spec.get("extendedResourceName")
        if isinstance(value, str) and value:
            return value
    return None
