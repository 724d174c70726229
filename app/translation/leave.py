"""Leaving a legacy request to the scheduler's own path instead of translating it (KEP-5004).

Since Kubernetes 1.36 a DeviceClass with `spec.extendedResourceName: nvidia.com/gpu` makes the
scheduler serve a plain `nvidia.com/gpu: N` from its devices: one claim per pod, one ExactCount
request per (container, name) of the init and regular containers, whole devices, no selectors,
no capacity (`app.policies.mapped` models it for the checks). Every class also answers to
`deviceclass.resource.kubernetes.io/<class>`. With `translation.leaveMapped` (or a `mappings`
rule's `leaveToScheduler`) translation leaves such a request as written, but only where that
path gives the pod what translation would:

- a DeviceClass maps the name (the newest, as the scheduler picks it: the view's
  `device_class_for_extended_resource`), or the name is the implicit one of a class;
- the policy's mapping for the name, if a rule matches it, is that same class with no selectors
  (a rule with selectors, MIG's profile pattern, is never left; its `leaveToScheduler: false`
  keeps it translated);
- the container asks for no GPU share (a `sharing` rule's names: capacity the in-tree path lacks);
- the policy's DeviceClass defaults add nothing to a claim of the class (`defaults.deviceClasses`:
  selectors, tolerations, opaque config the scheduler's claim would lack);
- with `translation.initContainers: share`, no init container asks for the name (translation
  gives it a share of the app containers' devices, the scheduler devices of its own for the
  pod's whole life);
- the devices the pod's one claim would hold stay within the 32 a claim can hold (translation
  makes one claim per container).

Otherwise the request is translated, and a note says why it was not left (only for a name the
switch covers and a class maps). Decided per pod spec, before claims are planned: the plan
(`app.translation.plan`) keeps what is left in `TranslationPlan.left`, so its four readers
(admission, quota, dra-only's fix, `migrate`) see one answer, and `app.policies.mapped` judges
what is left as the scheduler's claim.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from app.allocation import ALLOCATION_RESULTS_MAX_SIZE
from app.cluster.view import ClusterReader
from app.k8s.objects import PodSpecRef
from app.translation.legacy import (
    IMPLICIT_CLASS_PREFIX,
    DeviceMapping,
    LegacyRequest,
    is_resource_name,
    legacy_requests,
)
from app.translation.naming import who
from app.translation.rules import TranslationRules
from app.translation.sharing import Group
from app.translation.wants import Want
from app.translation.wants import count as count_of

LEFT_RULES = ("left:deviceclass", "left:implicit")
"""The metric `rule` of a request left to the scheduler: through a DeviceClass's
extendedResourceName, or the implicit `deviceclass.resource.kubernetes.io/<class>` name."""


@dataclass(frozen=True, slots=True)
class Left:
    """A legacy request translation leaves as written: the scheduler serves it from a class."""

    legacy: LegacyRequest
    count: int
    device_class: str
    implicit: bool

    @property
    def rule(self) -> str:
        return LEFT_RULES[1] if self.implicit else LEFT_RULES[0]

    @property
    def why(self) -> str:
        """`DeviceClass gpu.nvidia.com maps it (extendedResourceName)`."""
        if self.implicit:
            return f"it names DeviceClass {self.device_class} ({IMPLICIT_CLASS_PREFIX}<class>)"
        return f"DeviceClass {self.device_class} maps it (extendedResourceName)"

    @property
    def asked(self) -> str:
        """`nvidia.com/gpu: 2`."""
        return f"{self.legacy.resource}: {self.legacy.amount}"

    def warning(self) -> str:
        """`container cuda: left nvidia.com/gpu: 2 to the scheduler: DeviceClass gpu.nvidia.com
        maps it (extendedResourceName)`."""
        return f"{who(self.legacy.container)}: left {self.asked} to the scheduler: {self.why}"


@dataclass(slots=True)
class Leaving:
    """What `choose` decided: the requests left, the wants still translated, and why some the
    switch covers are not left."""

    left: list[Left] = field(default_factory=list)
    keep: list[Want] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def scheduler_class(resource: str, view: ClusterReader) -> tuple[str, bool] | None:
    """(the DeviceClass the scheduler serves `resource` from, whether through the implicit
    `deviceclass.resource.kubernetes.io/<class>` name), or None when no class maps it.

    An implicit name is mapped whether or not its class exists: no device plugin can advertise
    a name under kubernetes.io, so a pod asking for one of a missing class fits no node.
    """
    found = view.device_class_for_extended_resource(resource)
    if found is not None:
        return found, False
    if resource.startswith(IMPLICIT_CLASS_PREFIX):
        return resource.removeprefix(IMPLICIT_CLASS_PREFIX), True
    return None


def switched_on(mapping: DeviceMapping, leave_mapped: bool) -> bool:
    """Whether the policy asks for a request of this mapping to be left: its rule's
    `leaveToScheduler`, else `translation.leaveMapped`; never for a rule with selectors."""
    if mapping.source == "config" and (mapping.selectors or mapping.capacity):
        return False
    return leave_mapped if mapping.leave is None else mapping.leave


def sharing_containers(groups: Iterable[Group]) -> frozenset[str]:
    """The pointers of the containers that ask for a GPU share."""
    return frozenset(m.container.pointer for g in groups for m in g.members.values())


def left_of(spec: PodSpecRef, rules: TranslationRules, view: ClusterReader) -> list[Left]:
    """The requests of a pod spec translation leaves to the scheduler (what `plan` puts in
    `TranslationPlan.left`, without planning the rest: `app.policies.mapped` reads it)."""
    if not rules.leaves:
        return []
    found = [  # zeros too, as the plan reads them: a zero share name still makes a share
        r
        for r in legacy_requests(spec, rules.legacy, zeros=True)
        if r.container.field != "ephemeralContainers"
    ]
    if not found:
        return []
    groups, rest = rules.sharing.split(found)
    wants = []
    for legacy in rest:
        if not is_resource_name(legacy.resource):
            continue
        count, bad = count_of(legacy)
        mapping = rules.mappings.resolve(legacy.resource, view) if bad is None else None
        if mapping is not None and count > 0:
            wants.append(Want(legacy, count, mapping))
    return choose(wants, groups, rules, view).left


def choose(
    wants: list[Want], groups: Iterable[Group], rules: TranslationRules, view: ClusterReader
) -> Leaving:
    """Which of a pod spec's whole-device wants (`wants`, in container order; not shares) to
    leave; `groups`: the pod's GPU shares (their containers, and their names)."""
    groups = list(groups)
    shared = sharing_containers(groups)
    out = Leaving()
    candidates: list[Left] = []
    for want in wants:
        if want.count <= 0 or not switched_on(want.mapping, rules.config.leave_mapped):
            out.keep.append(want)
            continue
        served = scheduler_class(want.legacy.resource, view)
        if served is None:
            out.keep.append(want)  # nothing but translation serves it: nothing to say
            continue
        left = Left(want.legacy, want.count, *served)
        reason = _not_alike(want, left, shared, rules)
        if reason is None:
            candidates.append(left)
        else:
            out.keep.append(want)
            out.notes.append(_note(left, reason))
    if not candidates:
        return out
    shares = [m for g in groups for m in g.members.values()]
    vetoes = _pod_vetoes(candidates, wants, shares, rules)
    for left in candidates:
        reason = vetoes.get(left.legacy.resource) or vetoes.get("")
        if reason is None:
            out.left.append(left)
        else:
            out.keep.append(next(w for w in wants if w.legacy is left.legacy))
            out.notes.append(_note(left, reason))
    order = {id(w.legacy): i for i, w in enumerate(wants)}
    out.keep.sort(key=lambda w: order[id(w.legacy)])
    return out


def _not_alike(
    want: Want, left: Left, shared: frozenset[str], rules: TranslationRules
) -> str | None:
    """Why the scheduler would not give this request what translation would, or None."""
    mapping = want.mapping
    if mapping.source == "config" and mapping.device_class_name != left.device_class:
        return (
            f"the policy's mappings send it to DeviceClass {mapping.device_class_name}, the "
            f"scheduler would serve it from {left.device_class}"
        )
    if want.legacy.container.pointer in shared:
        return "the container also asks for a GPU share (the policy's sharing rules)"
    if rules.templates.adds_to(DeviceMapping(left.device_class), want.count):
        return (
            f"defaults.deviceClasses[{left.device_class}] adds to its claims what the "
            "scheduler's claim would lack"
        )
    return None


def _pod_vetoes(
    candidates: list[Left], wants: list[Want], shares: list[LegacyRequest], rules: TranslationRules
) -> dict[str, str]:
    """Resource -> why none of its requests in the pod is left ("": none of any resource).
    `shares`: the requests of the pod's GPU shares (an init container's HAMi count asks for
    the name as much as a plain request does)."""
    vetoes: dict[str, str] = {}
    if rules.config.init_containers == "share":
        names = {c.legacy.resource for c in candidates}
        asked = [(w.legacy, w.count) for w in wants] + [(m, count_of(m)[0]) for m in shares]
        for legacy, count in asked:
            ref = legacy.container
            if count > 0 and not ref.runs_with_app and legacy.resource in names:
                vetoes.setdefault(
                    legacy.resource,
                    f"init container {ref.name} asks for it too: translation shares devices "
                    "with it (translation.initContainers: share), the scheduler would give it "
                    "devices of its own",
                )
    total = sum(c.count for c in candidates if c.legacy.resource not in vetoes)
    if total > ALLOCATION_RESULTS_MAX_SIZE:
        vetoes[""] = (
            f"the scheduler's one claim for the pod would hold {total} devices, more than the "
            f"{ALLOCATION_RESULTS_MAX_SIZE} a claim can"
        )
    return vetoes


def _note(left: Left, reason: str) -> str:
    return (
        f"{who(left.legacy.container)}: {left.asked} is translated, not left to the scheduler "
        f"({left.why}): {reason}"
    )
