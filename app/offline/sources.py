"""Where each pod's GPUs come from, and which nodes still need a device plugin.

A pod asking for GPUs is served one or more of three ways:

- `device-plugin`: a legacy extended resource (`nvidia.com/gpu: 2`) on a node whose device plugin
  advertises it (the node's `status.allocatable`);
- `dra-claim`: a ResourceClaim named in `spec.resourceClaims` (written by hand, or by
  translation);
- `dra-extended-resource`: the scheduler's own path (KEP-5004, beta in 1.36, GA in 1.37): a
  legacy name, or `deviceclass.resource.kubernetes.io/<class>`, served from DRA devices of the
  DeviceClass whose `spec.extendedResourceName` maps it, through a claim the scheduler made; the
  pod's `status.extendedResourceClaimStatus.requestMappings` names each container and resource
  it served so.

A legacy request the scheduler did not map is the device plugin's once the pod is bound to a node
(`spec.nodeName`); before that it is `unscheduled` (either may serve it). Per node, the legacy
names its device plugin advertises and the running pods (bound, not finished) it serves them
to: a node whose device plugin serves no pod can lose it, which is what decides when the
migration is over. Node capacity is read here, in `report`, never on the admission path.

What is kept grows with namespaces and nodes, never with pods: counts, and at most
`EXAMPLES` pod names per node and name.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from app.errors import ObjectShapeError
from app.k8s.objects import PodSpecRef, containers, resource_map
from app.k8s.policyreports import GPU_SOURCES
from app.k8s.quantity import QuantityError, parse_quantity
from app.translation.legacy import IMPLICIT_CLASS_PREFIX, LegacyMatcher, legacy_requests
from app.workloads import Catalogue

Obj = dict[str, Any]

DEVICE_PLUGIN, DRA_CLAIM, DRA_EXTENDED, UNSCHEDULED = GPU_SOURCES
EXAMPLES = 3
"""Pod names kept per node and legacy name, to say which pods still hold a device plugin."""
FINISHED = frozenset({"Succeeded", "Failed"})
UNKNOWN_CLASS = "<not in the cluster view>"
"""The class of a name the scheduler served from DRA when no DeviceClass in the view maps it
(a dump read without the cluster's DeviceClasses)."""


@dataclass
class NodeServing:
    """One node's device plugin: the legacy names it advertises, and the running pods it
    serves each to."""

    name: str
    advertised: dict[str, str] = field(default_factory=dict)
    """Legacy name -> allocatable quantity, as the node's status says."""
    pods: Counter[str] = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=dict)

    @property
    def removable(self) -> bool:
        """Its device plugin serves no running pod."""
        return not any(self.pods[name] for name in self.advertised)

    def line(self) -> str:
        names = ", ".join(f"{n} ({q})" for n, q in sorted(self.advertised.items()))
        count = sum(self.pods[n] for n in self.advertised)
        if self.removable:
            return (
                f"node {self.name}: device plugin serves {names} to 0 running pods: "
                "its device plugin can be removed"
            )
        held = [f"{n}: {', '.join(self.examples.get(n, []))}" for n in sorted(self.advertised)]
        held = [h for h in held if not h.endswith(": ")]
        return (
            f"node {self.name}: device plugin serves {names} to {count} running pod"
            f"{'s' if count != 1 else ''} ({'; '.join(held)}{', ...' if count > EXAMPLES else ''})"
        )

    def row(self) -> Obj:
        return {
            "node": self.name,
            "devicePlugin": {
                name: {"allocatable": quantity, "runningPods": self.pods[name]}
                for name, quantity in sorted(self.advertised.items())
            },
            "removable": self.removable,
        }


@dataclass(frozen=True, slots=True)
class PodSources:
    """How one pod's GPUs are served."""

    sources: frozenset[str]
    device_plugin: tuple[str, ...] = ()
    """Legacy names a device plugin serves it."""
    extended: tuple[tuple[str, str], ...] = ()
    """(resource, DeviceClass) the scheduler serves it from DRA devices."""


class Sources:
    """Pods and Nodes in, one at a time; per namespace counts and per node lines out."""

    def __init__(
        self,
        is_legacy: LegacyMatcher,
        catalogue: Catalogue,
        mapped_class: Callable[[str], str | None],
    ) -> None:
        self._is_legacy = is_legacy
        self._catalogue = catalogue
        self._mapped_class = mapped_class
        """The DeviceClass a legacy name is mapped to by `spec.extendedResourceName`."""
        self.by_namespace: dict[str, Counter[str]] = {}
        self.nodes: dict[str, NodeServing] = {}
        self.extended: Counter[tuple[str, str]] = Counter()
        """(resource, DeviceClass) -> pods the scheduler serves through that class."""
        self.device_plugin: Counter[str] = Counter()
        """Legacy name -> running pods a device plugin serves it to."""

    def tracked(self, name: str) -> bool:
        return self._is_legacy(name) or self._mapped_class(name) is not None

    def add_node(self, node: Obj) -> None:
        """Keep the legacy names the node's device plugin advertises (allocatable > 0)."""
        meta, status = node.get("metadata"), node.get("status")
        if not isinstance(meta, dict) or not isinstance(meta.get("name"), str):
            return
        allocatable = status.get("allocatable") if isinstance(status, dict) else None
        if not isinstance(allocatable, dict):
            return
        advertised = {}
        for name, quantity in allocatable.items():
            if isinstance(name, str) and self.tracked(name) and _positive(quantity):
                advertised[name] = str(quantity)
        if advertised:
            found = self.nodes.setdefault(meta["name"], NodeServing(meta["name"]))
            found.advertised = advertised

    def add_pod(self, pod: Obj) -> PodSources:
        """Classify one pod and count it in its namespace (and its node's device plugin)."""
        found = self.classify(pod)
        meta = pod.get("metadata")
        if not found.sources or not isinstance(meta, dict):
            return found
        namespace = str(meta.get("namespace") or "")
        self.by_namespace.setdefault(namespace, Counter()).update(found.sources)
        for resource, device_class in found.extended:
            self.extended[(resource, device_class)] += 1
        spec, status = pod.get("spec"), pod.get("status")
        node = spec.get("nodeName") if isinstance(spec, dict) else None
        phase = status.get("phase") if isinstance(status, dict) else None
        if isinstance(node, str) and node and phase not in FINISHED:
            serving = self.nodes.setdefault(node, NodeServing(node))
            for name in found.device_plugin:
                self.device_plugin[name] += 1
                serving.pods[name] += 1
                examples = serving.examples.setdefault(name, [])
                if len(examples) < EXAMPLES:
                    examples.append(f"{namespace}/{meta.get('name', '?')}")
        return found

    def classify(self, pod: Obj) -> PodSources:
        """The ways a pod's GPUs are served (an empty set: it asks for none)."""
        spec, status = pod.get("spec"), pod.get("status")
        if not isinstance(spec, dict):
            return PodSources(frozenset())
        sources: set[str] = set()
        claims = spec.get("resourceClaims")
        if isinstance(claims, list) and claims:
            sources.add(DRA_CLAIM)
        mapped = _request_mappings(status)
        extended = []
        for _container, resource in sorted(mapped):
            device_class = (
                resource.removeprefix(IMPLICIT_CLASS_PREFIX)
                if resource.startswith(IMPLICIT_CLASS_PREFIX)
                else self._mapped_class(resource) or UNKNOWN_CLASS
            )
            extended.append((resource, device_class))
        if extended:
            sources.add(DRA_EXTENDED)
        plugin: list[str] = []
        try:
            refs = self._catalogue.specs("", "Pod", pod)
            requests = [r for ref in refs for r in legacy_requests(ref, self._is_legacy)]
            implicit = any(_implicit(ref) for ref in refs)
        except ObjectShapeError:
            requests, implicit = [], False  # the report names it as invalid
        node = spec.get("nodeName")
        for request in requests:
            if (request.container.name, request.resource) in mapped:
                continue
            if isinstance(node, str) and node:
                sources.add(DEVICE_PLUGIN)
                if request.resource not in plugin:
                    plugin.append(request.resource)
            else:
                sources.add(UNSCHEDULED)
        if implicit and not extended:
            sources.add(UNSCHEDULED)  # a deviceclass.resource.kubernetes.io/ name, not yet served
        return PodSources(frozenset(sources), tuple(plugin), tuple(dict.fromkeys(extended)))

    def node_lines(self) -> Iterator[str]:
        for name in sorted(self.nodes):
            if self.nodes[name].advertised:
                yield self.nodes[name].line()

    def name_lines(self) -> Iterator[str]:
        """Per legacy name the scheduler serves from DRA: whether any node still needs a
        device plugin for it."""
        for (resource, device_class), pods in sorted(self.extended.items()):
            if resource.startswith(IMPLICIT_CLASS_PREFIX):
                continue
            plugin = self.device_plugin[resource]
            nodes = sorted(n.name for n in self.nodes.values() if n.pods[resource])
            tail = (
                f"{plugin} by a device plugin on {len(nodes)} node"
                f"{'s' if len(nodes) != 1 else ''} ({', '.join(nodes[:EXAMPLES])}"
                f"{', ...' if len(nodes) > EXAMPLES else ''})"
                if plugin
                else "no node needs a device plugin for it"
            )
            yield (
                f"{resource}: {pods} pod{'s' if pods != 1 else ''} served by DRA through "
                f"DeviceClass {device_class} (extendedResourceName); {tail}"
            )

    def rows(self) -> list[Obj]:
        return [self.nodes[n].row() for n in sorted(self.nodes) if self.nodes[n].advertised]


def _request_mappings(status: Any) -> set[tuple[str, str]]:
    """(container, resource) the scheduler served from DRA devices (KEP-5004)."""
    if not isinstance(status, dict):
        return set()
    claim = status.get("extendedResourceClaimStatus")
    mappings = claim.get("requestMappings") if isinstance(claim, dict) else None
    if not isinstance(mappings, list):
        return set()
    return {
        (str(m.get("containerName", "")), str(m.get("resourceName", "")))
        for m in mappings
        if isinstance(m, dict)
    }


def _implicit(ref: PodSpecRef) -> bool:
    """Whether a container asks for a DeviceClass by its implicit extended resource name."""
    return any(
        name.startswith(IMPLICIT_CLASS_PREFIX)
        for container in containers(ref)
        for which in ("limits", "requests")
        for name in resource_map(container, which)
    )


def _positive(quantity: Any) -> bool:
    try:
        return parse_quantity(quantity).value > 0
    except QuantityError:
        return False
