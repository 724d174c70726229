"""Mapped names: the extended resources of a pod the scheduler serves from a DeviceClass itself.

Since Kubernetes 1.36 (KEP-5004, gate DRAExtendedResource, beta and on) a DeviceClass with
`spec.extendedResourceName: nvidia.com/gpu` makes kube-scheduler serve a pod's plain
`nvidia.com/gpu: N` from that class's devices, and every class answers to
`deviceclass.resource.kubernetes.io/<class>` too. The scheduler writes one ResourceClaim per pod
(annotation `resource.kubernetes.io/extended-resource-claim`, owned by the pod) with one
ExactCount request per (container, resource) of the init and regular containers, named
`container-<i>-request-<j>` (i: the container's index in initContainers + containers, j: the
resource's index in its sorted requests), whole devices, no selectors; ResourceQuota charges it
to `<class>.deviceclass.resource.k8s.io/devices`. Upstream: kube-scheduler's dynamicresources
plugin, `preFilterExtendedResources`, `filterExtendedResources`, `createDeviceRequests`.

For the webhook's checks such a pod is that claim: satisfiability judges it with the pod's own
claims (:mod:`app.policies.satisfiability`), quota foresight counts it against its class
(:mod:`app.policies.quota.demand`), dra-only names the class when it lets the name through.

- :func:`mapped_requests`: every request of a pod spec that some DeviceClass maps;
- :func:`left_to_scheduler`: those the namespace's mode leaves as they are (translation rewrites
  legacy names in translate namespaces but those the policy leaves to the scheduler,
  `translation.leaveMapped`: app.translation.leave; dra-only denies them unless
  `draOnly.mappedNames` allows them; an active policy exception leaves them);
- :func:`special_claim`: the claim the scheduler would write, as the allocation model reads it;
- :func:`served`: how a message says where the devices come from.

Where the webhook sees less than the scheduler (said again in docs/runbook.md and quotas.md):
**nodes with a device plugin.** The scheduler serves a name from DRA only on a node whose
allocatable has none of it: where a device plugin still advertises the name, the plugin serves
it. The webhook never reads Node status on the admission path (its view holds Node labels at
most), so it judges every node as a DRA node: "never" means never from the class's devices, and
a pod may still run on a node whose device plugin has enough. So a name a class maps is only
ever warned about (`satisfiability.pod_verdict`), and quota counts its pods as claims (the
stricter reading); `deviceclass.resource.kubernetes.io/<class>` names, which no device plugin
can advertise, are judged exactly.

Of two classes mapping one name the scheduler takes the one created last (on a tie, the name
sorted first), and so does the cluster view (`ClusterReader.device_class_for_extended_resource`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from app.allocation import ClaimInput, Problem
from app.cluster.view import ClusterReader
from app.k8s.claims import parse_claim_spec
from app.k8s.objects import ContainerRef, PodSpecRef, containers, resource_map
from app.k8s.quantity import whole_count
from app.policies.base import Context, Mode
from app.policies.builders import legacy_matcher, translation_rules
from app.policies.exceptions import cover, policy_exceptions
from app.translation.leave import left_of, scheduler_class
from app.translation.legacy import LegacyRequest, legacy_requests

__all__ = [
    "MappedRequest",
    "left_to_scheduler",
    "mapped_requests",
    "reword",
    "scheduler_class",
    "served",
    "special_claim",
]


@dataclass(frozen=True, slots=True)
class MappedRequest:
    """One container's request for a name a DeviceClass maps: one request of the pod's claim."""

    container: ContainerRef
    resource: str
    count: int
    device_class: str
    implicit: bool
    """Named `deviceclass.resource.kubernetes.io/<class>` (no device plugin can serve it)."""
    request_name: str
    """The request's name in the scheduler's claim: `container-<i>-request-<j>`."""
    in_limits: bool

    @property
    def path(self) -> str:
        which = "limits" if self.in_limits else "requests"
        return f"{self.container.path}.resources.{which}[{self.resource}]"

    @property
    def asked(self) -> str:
        """`container cuda asks for nvidia.com/gpu: 2` (init and sidecar containers named so)."""
        what = "container"
        if self.container.field == "initContainers":
            what = "sidecar container" if self.container.is_sidecar else "init container"
        return f"{what} {self.container.name} asks for {self.resource}: {self.count}"

    def legacy(self) -> LegacyRequest:
        """As a legacy request (what policy exceptions cover)."""
        resources = self.container.container.get("resources") or {}
        limits, requests = resources.get("limits") or {}, resources.get("requests") or {}
        return LegacyRequest(
            self.container, self.resource, limits.get(self.resource), requests.get(self.resource)
        )


def mapped_requests(spec: PodSpecRef, view: ClusterReader) -> tuple[MappedRequest, ...]:
    """Every (container, name) of the pod spec's init and regular containers whose name some
    DeviceClass maps, with a count above zero, in the order of the scheduler's requests.

    Ephemeral containers ask for nothing the scheduler places. A container's requests are its
    `requests`, or its `limits` where it has no request (the API server copies limits into a
    Pod's requests before admission; a workload's template is not defaulted).
    """
    found: list[MappedRequest] = []
    index = -1
    for ref in containers(spec):
        if ref.field == "ephemeralContainers":
            continue
        index += 1
        limits, requests = resource_map(ref, "limits"), resource_map(ref, "requests")
        if not limits and not requests:
            continue
        mapped = {
            name: mapping
            for name in (*requests, *limits)
            # cpu, memory, hugepages-*: never an extended resource
            if "/" in name and (mapping := scheduler_class(name, view)) is not None
        }
        if not mapped:
            continue  # (most containers: nothing sorted)
        names = sorted({*requests, *limits})
        for position, name in enumerate(names):
            mapping = mapped.get(name)
            if mapping is None:
                continue
            count = whole_count(requests.get(name, limits.get(name)))
            if not count:
                continue  # zero asks for nothing; a fraction the API server refuses
            found.append(
                MappedRequest(
                    ref,
                    name,
                    count,
                    mapping[0],
                    mapping[1],
                    f"container-{index}-request-{position}",
                    name in limits,
                )
            )
    found.sort(key=lambda m: m.request_name)
    return tuple(found)


def left_to_scheduler(
    kind: str, spec: PodSpecRef, ctx: Context, found: Sequence[MappedRequest] | None = None
) -> tuple[MappedRequest, ...]:
    """The mapped requests of `spec` (an object of `kind`) that reach the scheduler as they are
    in this namespace's mode: in translate namespaces translation rewrites the legacy ones but
    those the policy leaves to the scheduler (`translation.leaveMapped`, a rule's
    `leaveToScheduler`: `app.translation.leave.left_of`, what translation's plan leaves), or
    all of them where an active policy exception covers every legacy request of the spec
    (translation then leaves the pod as written); in dra-only namespaces the legacy ones are
    denied unless `draOnly.mappedNames` allows them or an active exception covers them. Audit
    and unlabelled namespaces admit everything as written."""
    mapped = mapped_requests(spec, ctx.view) if found is None else tuple(found)
    if not mapped or ctx.mode not in (Mode.TRANSLATE, Mode.DRA_ONLY):
        return mapped
    if ctx.mode is Mode.DRA_ONLY and ctx.policy.dra_only.allows_mapped_names:
        return mapped
    is_legacy = ctx.parts[legacy_matcher]
    legacy = [m for m in mapped if is_legacy(m.resource)]
    if not legacy:
        return mapped
    exceptions = ctx.parts[policy_exceptions]
    selecting = exceptions.selecting(kind, spec, ctx.namespace_labels) if exceptions else ()
    kept: set[tuple[str, str]] = set()
    if selecting and ctx.mode is Mode.TRANSLATE:
        # translation leaves the pod as written only when exceptions cover all it would rewrite
        if not cover(selecting, legacy_requests(spec, is_legacy)).rest:
            return mapped
    elif selecting:
        coverage = cover(selecting, [m.legacy() for m in legacy])
        kept = {(r.container.path, r.resource) for r, _ in coverage.covered}
    if ctx.mode is Mode.TRANSLATE:
        left = left_of(spec, ctx.parts[translation_rules], ctx.view)
        kept = {(r.legacy.container.path, r.legacy.resource) for r in left}
    dropped = {id(m) for m in legacy if (m.container.path, m.resource) not in kept}
    return tuple(m for m in mapped if id(m) not in dropped)


def special_claim(mapped: Sequence[MappedRequest], spec_path: str) -> ClaimInput:
    """The claim the scheduler writes for the pod (`createDeviceRequests`), read by the claim
    model; its problems are put back on the containers' fields by :func:`reword`."""
    requests = [
        {
            "name": m.request_name,
            "exactly": {
                "deviceClassName": m.device_class,
                "allocationMode": "ExactCount",
                "count": m.count,
            },
        }
        for m in mapped
    ]
    parsed = parse_claim_spec({"devices": {"requests": requests}}, _PATH)
    return ClaimInput(
        f"the claim the scheduler makes for the extended resources of {spec_path}", parsed
    )


_PATH = "<extended-resources>"
"""The field path the special claim is parsed under (the scheduler's in-memory name for it):
no real field path starts with it, so its problems are told apart from the pod's claims'."""
_REQUEST = re.compile(r"^<extended-resources>\.devices\.requests\[(\d+)\]")
_ASKS = re.compile(r"^asks for [^,;:]*?(?:, |; |: )")


def served(m: MappedRequest) -> str:
    """`asks for 16 nvidia.com/gpu, which the scheduler serves from DeviceClass gpu.nvidia.com
    (extendedResourceName)` (warnings are cut at 256 characters: the field path names the
    container)."""
    how = "" if m.implicit else " (extendedResourceName)"
    return (
        f"asks for {m.count} {m.resource}, which the scheduler serves from DeviceClass "
        f"{m.device_class}{how}"
    )


def reword(
    problems: Iterable[Problem], mapped: Sequence[MappedRequest], verdict: str, spec_path: str
) -> tuple[Problem, ...]:
    """The allocation model's problems with those of the special claim put on the container
    field that asked ("spec.containers[0].resources.limits[nvidia.com/gpu]: asks for 16
    nvidia.com/gpu, which the scheduler serves from DeviceClass gpu.nvidia.com
    (extendedResourceName): never: the most on any node is 8 (node-a)"), or on the pod spec
    for the claim as a whole; `verdict`: "never" or "not now"."""
    out = []
    for problem in problems:
        match = _REQUEST.match(problem.path)
        text = _ASKS.sub("", problem.message).removeprefix(f"{verdict}: ")
        if match is not None and int(match.group(1)) < len(mapped):
            m = mapped[int(match.group(1))]
            out.append(Problem(m.path, f"{served(m)}: {verdict}: {text}"))
        elif problem.path.startswith(_PATH):
            out.append(Problem(spec_path, f"{_whole(mapped)}: {verdict}: {problem.message}"))
        else:
            out.append(problem)
    return tuple(out)


def _whole(mapped: Sequence[MappedRequest]) -> str:
    """`the scheduler's claim for nvidia.com/gpu (init 3 + cuda 6 of gpu.nvidia.com)`."""
    names = ", ".join(dict.fromkeys(m.resource for m in mapped))
    by_class: dict[str, list[str]] = {}
    for m in mapped:
        by_class.setdefault(m.device_class, []).append(f"{m.container.name} {m.count}")
    parts = "; ".join(f"{' + '.join(counts)} of {c}" for c, counts in by_class.items())
    return f"the scheduler's claim for {names} ({parts})"
