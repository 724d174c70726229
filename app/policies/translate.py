"""gpu-mode=translate namespaces: legacy extended-resource requests become DRA resource claims.

A container asking for `nvidia.com/gpu: 2` is rewritten to ask for two devices of the mapped
DeviceClass through a pod-level claim made from a ResourceClaimTemplate; nothing else about the
pod changes. The rules (docs/translation.md writes them out for users):

- The name goes from `limits` *and* `requests` (the API server copied limits into requests before
  admission; leaving either side makes the pod invalid); an emptied map is removed.
- Regular containers and sidecars (init containers with `restartPolicy: Always`) each get a claim
  of their own with their N devices, as a device plugin gives each container its own devices.
- Init containers share: each gets the smallest claim of a container that does not run
  alongside it (regular containers, sidecars started after it) holding at least its N devices.
  Those with no such claim share one top-up claim per legacy name, sized for the largest of
  them. An init container so references one claim per name, and the pod holds at least what the
  kubelet's device manager would have given it (max(app containers + sidecars, max over init
  containers of (its N + sidecars started before))), at most the top-up more.
  With `translation.initContainers: separate` init containers get claims of their own instead.
- A pod whose translation would add more than `translation.maxClaimsPerPod` claims or need more
  than `translation.maxTemplatesPerPod` templates is denied: one pod's cost stays bounded.
- A legacy name with no mapping, a count that is not a whole number, limits and requests that
  disagree, or a DeviceClass the pod already asks for through DRA: denied, every problem listed.
- Running on its own output changes nothing: no legacy name is left to translate.

Pods are translated on CREATE; workload pod templates only with `translation.translateWorkloads`,
and otherwise validated at apply time (`validate`), so an untranslatable Deployment is refused
when it is applied rather than when its ReplicaSet silently fails to create pods.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from app.cluster.templates import ManagedTemplates
from app.cluster.view import ClusterView, Kind
from app.config.policy import Translation
from app.errors import ObjectShapeError
from app.k8s import patch as jsonpatch
from app.k8s.objects import (
    ContainerRef,
    PodSpecRef,
    containers,
    list_field,
    pod_spec,
)
from app.k8s.patch import PatchOp
from app.k8s.quantity import QuantityError, parse_quantity
from app.k8s.templates import MANAGED_BY, MANAGED_BY_LABEL
from app.policies.base import ALLOW, Context, Mode, Obj, Request, Result, Violation
from app.policies.legacy import DeviceMapping, LegacyRequest, is_resource_name, legacy_requests
from app.policies.translate_templates import MAX_NAME, ClaimTemplate, slug

Key = tuple[str, str, str]
"""(container field, container name, resource): one legacy request, comparable across objects."""


@dataclass(frozen=True, slots=True)
class Want:
    """A legacy request that can be translated: its whole-number count and its mapping."""

    legacy: LegacyRequest
    count: int
    mapping: DeviceMapping


@dataclass(frozen=True, slots=True)
class Problem:
    """Why one legacy request cannot be translated."""

    key: Key
    violation: Violation


@dataclass(slots=True)
class Analysis:
    """The legacy requests of a pod spec, sorted into translatable ones and problems."""

    wants: list[Want] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """Warnings that do not stop translation (a DRA claim the view does not know)."""
    stale: dict[int, str] = field(default_factory=dict)
    """Index -> name of pod-level entries from an earlier translation, to be replaced."""


def check_pod(request: Request, ctx: Context) -> Result:
    """Mutating, Pods on CREATE."""
    if ctx.mode is not Mode.TRANSLATE or request.object is None:
        return ALLOW
    return _translate(request, ctx)


def check_workload(request: Request, ctx: Context) -> Result:
    """Mutating, workloads on CREATE and UPDATE: only with `translation.translateWorkloads`."""
    if (
        ctx.mode is not Mode.TRANSLATE
        or request.object is None
        or not ctx.policy.translation.translate_workloads
    ):
        return ALLOW
    return _translate(request, ctx)


def validate(request: Request, ctx: Context) -> Result:
    """Validating, workloads: would their pods translate? Denied at apply time if not.

    On UPDATE only problems the old object did not have are denied, so a workload that predates
    the label can still be scaled, relabelled or deleted; the old problems are warned about.
    """
    if ctx.mode is not Mode.TRANSLATE or request.object is None or request.kind == "Pod":
        return ALLOW
    spec = pod_spec(request.kind, request.object)
    if spec is None:
        return ALLOW
    analysis = analyse(spec, request.namespace, ctx)
    _check_caps(spec, request.namespace, ctx, analysis)
    label = _mode_label(ctx)
    old_keys: frozenset[Key] = frozenset()
    if analysis.problems and request.operation == "UPDATE" and request.old_object is not None:
        old_spec = pod_spec(request.kind, request.old_object)
        if old_spec is not None:
            old = analyse(old_spec, request.namespace, ctx)
            _check_caps(old_spec, request.namespace, ctx, old)
            old_keys = frozenset(p.key for p in old.problems)
    new = [p for p in analysis.problems if p.key not in old_keys]
    warnings = [
        f"predates this change, pods of this {request.kind} will be denied: {p.violation}"
        for p in analysis.problems
        if p.key in old_keys
    ]
    if new:
        return _denial(request, label, new, warnings)
    warnings += analysis.notes
    warnings += [
        f"{_who(w.legacy.container)}: {w.legacy.resource}: {w.legacy.amount} becomes a DRA claim "
        f"on DeviceClass {w.mapping.device_class_name} when its pods are created ({label})"
        for w in analysis.wants
    ]
    return Result(warnings=tuple(warnings))


def analyse(
    spec: PodSpecRef, namespace: str, ctx: Context, *, replace_own: bool = False
) -> Analysis:
    """Parse counts, resolve mappings and look for DRA conflicts; decides nothing yet.

    With `replace_own`, claims an earlier translation added are not conflicts but output to
    redo: `kubectl apply` (client-side) of a workload translated before sends the legacy
    request back from its manifest while keeping the claims the webhook added.
    """
    found = legacy_requests(spec, ctx.compiled.legacy)
    analysis = Analysis()
    if not found:
        return analysis
    if replace_own:
        _own_entries(spec, namespace, ctx, analysis)
    for legacy in found:
        if legacy.container.field == "ephemeralContainers":
            continue  # may not have resources at all: the API server rejects it, not us
        key = _key(legacy)
        if not is_resource_name(legacy.resource):
            analysis.problems.append(Problem(key, _bad_name(legacy)))
            continue
        count, bad = _count(legacy)
        if bad is not None:
            analysis.problems.append(Problem(key, bad))
            continue
        mapping = ctx.compiled.mappings.resolve(legacy.resource, ctx.view)
        if mapping is None:
            analysis.problems.append(
                Problem(
                    key,
                    Violation(
                        legacy.path,
                        f"no DeviceClass is known for {legacy.resource}: "
                        + ctx.compiled.mappings.missing_hint(legacy.resource),
                    ),
                )
            )
            continue
        analysis.wants.append(Want(legacy, count, mapping))
    if analysis.wants:
        in_use, unknown = _dra_classes(spec, namespace, ctx.view, skip=analysis.stale)
        for want in analysis.wants:
            device_class = want.mapping.device_class_name
            where = in_use.get(device_class)
            if where is not None:
                analysis.problems.append(
                    Problem(
                        _key(want.legacy),
                        Violation(
                            want.legacy.path,
                            f"{want.legacy.resource} maps to DeviceClass {device_class}, which "
                            f"this pod already requests through DRA ({where}); ask for all "
                            f"{device_class} devices through resourceClaims, not both ways",
                        ),
                    )
                )
        analysis.notes += [
            f"{where}: not in dra-webhook's cluster view; could not check that it asks for "
            "another device type than the translated requests"
            for where in unknown
        ]
    return analysis


# -- translation ---------------------------------------------------------------------------


def _translate(request: Request, ctx: Context) -> Result:
    assert request.object is not None
    spec = pod_spec(request.kind, request.object)
    if spec is None:
        return ALLOW
    analysis = analyse(spec, request.namespace, ctx, replace_own=request.operation == "UPDATE")
    if analysis.problems:
        return _denial(request, _mode_label(ctx), analysis.problems, analysis.notes)
    if not analysis.wants:
        return ALLOW
    plan = _Plan(spec, request.namespace, ctx, analysis.stale)
    try:
        plan.add(analysis.wants)
    except _OverCapError as over:
        return _denial(request, _mode_label(ctx), [over.problem], analysis.notes)
    return Result(
        patch=tuple(plan.patch(analysis.wants)),
        warnings=tuple(analysis.notes + plan.warnings),
        templates=tuple(plan.templates.values()),
    )


def _check_caps(spec: PodSpecRef, namespace: str, ctx: Context, analysis: Analysis) -> None:
    """Add a problem to `analysis` when its pods' translation would be over a per-pod cap."""
    if not analysis.wants:
        return
    try:
        _Plan(spec, namespace, ctx, analysis.stale).add(analysis.wants)
    except _OverCapError as over:
        analysis.problems.append(over.problem)


class _OverCapError(Exception):
    """Planning stopped: the pod needs more claims or templates than the policy allows."""

    def __init__(
        self, spec: PodSpecRef, what: str, key: str, cap: int, message: str | None = None
    ) -> None:
        super().__init__(key)
        self.problem = Problem(
            ("", "", key),
            Violation(
                spec.path,
                message
                or f"translating this pod needs more than {cap} {what}, the limit set by "
                f"translation.{key} in the dra-webhook policy: ask for devices in fewer "
                f"containers or with fewer different counts, or raise translation.{key}",
            ),
        )


@dataclass(frozen=True, slots=True)
class _Claim:
    """A pod-level claim translation adds."""

    name: str
    count: int
    template: ClaimTemplate
    owner: ContainerRef | None
    """The container it was made for; None for an init top-up claim."""


class _Plan:
    """The claims, templates and container references one pod spec gets."""

    def __init__(
        self, spec: PodSpecRef, namespace: str, ctx: Context, stale: Mapping[int, str]
    ) -> None:
        self.spec = spec
        self.namespace = namespace
        self.ctx = ctx
        self.stale = stale
        self.share = ctx.policy.translation.init_containers == "share"
        self.max_claims = ctx.policy.translation.max_claims_per_pod
        self.max_templates = ctx.policy.translation.max_templates_per_pod
        taken = _existing_claim_names(spec) - set(stale.values())
        self.names = _ClaimNames(taken, ctx.policy.translation)
        self.entries: list[Obj] = []
        self.templates: dict[str, Obj] = {}
        self.claims_of: dict[str, list[str]] = {}
        """Container pointer -> claim names it gets."""
        self.warnings: list[str] = []

    def add(self, wants: list[Want]) -> None:
        app_claims: dict[str, list[_Claim]] = {}
        inits: dict[str, list[Want]] = {}
        for want in wants:
            ref = want.legacy.container
            if self.share and not ref.runs_with_app:
                inits.setdefault(want.legacy.resource, []).append(want)
                continue
            if want.count == 0:
                self.warnings.append(_removed(want))
                continue
            claim = self._new_claim(want.mapping, want.count, _tail(want), ref.name, owner=ref)
            self._use(ref, [claim])
            app_claims.setdefault(want.legacy.resource, []).append(claim)
            self.warnings.append(
                f"{_translated(want)} -> claim {claim.name} (template {claim.template.name}, "
                f"class {claim.template.device_class})"
            )
        for resource, group in inits.items():
            self._share(group, app_claims.get(resource, []))

    def _share(self, inits: list[Want], app_claims: list[_Claim]) -> None:
        """Init containers of one resource: one claim each, the smallest big enough to share.

        Each init container shares the smallest claim (first on a tie) of a container that does
        not run alongside it and holds at least its N devices. Those with none share one top-up
        claim, sized for the largest of them. So every init container references one claim, and
        the work is init containers x app claims, both bounded (app claims by maxClaimsPerPod).
        """
        picks = [_smallest(app_claims, w) if w.count else None for w in inits]
        need = max(
            (w.count for w, pick in zip(inits, picks, strict=True) if w.count and pick is None),
            default=0,
        )
        top: _Claim | None = None
        if need:
            first = inits[0]
            top = self._new_claim(first.mapping, need, _tail(first), "init", owner=None)
        for want, pick in zip(inits, picks, strict=True):
            if want.count == 0:
                self.warnings.append(_removed(want))
                continue
            shared = pick
            if (
                top is not None
                and top.count >= want.count
                and (pick is None or pick.count > top.count)
            ):
                shared = top
            assert shared is not None  # the top-up is made for every init container without one
            self._use(want.legacy.container, (shared,))
            self.warnings.append(
                f"{_translated(want)} -> shares claim {shared.name} (template "
                f"{shared.template.name}, class {want.mapping.device_class_name})"
            )

    def _new_claim(
        self, mapping: DeviceMapping, count: int, tail: str, who: str, owner: ContainerRef | None
    ) -> _Claim:
        if len(self.entries) >= self.max_claims:
            raise _OverCapError(self.spec, "resource claims", "maxClaimsPerPod", self.max_claims)
        template = self.ctx.compiled.templates.get(self.namespace, mapping, count)
        if template.name not in self.templates:
            if len(self.templates) >= self.max_templates:
                raise _OverCapError(
                    self.spec, "ResourceClaimTemplates", "maxTemplatesPerPod", self.max_templates
                )
            self._check_namespace_cap(template.name)
        name = self.names.new(tail, who)
        self.entries.append({"name": name, "resourceClaimTemplateName": template.name})
        self.templates.setdefault(template.name, template.template)
        return _Claim(name, count, template, owner)

    def _check_namespace_cap(self, name: str) -> None:
        """A new template must fit under translation.maxTemplatesPerNamespace (templates the view
        holds cost nothing: only a create is capped)."""
        view = self.ctx.view
        if view.get(Kind.RESOURCE_CLAIM_TEMPLATE, name, self.namespace) is not None:
            return
        cap = self.ctx.policy.translation.max_templates_per_namespace
        held = view.derived(ManagedTemplates).count(self.namespace)
        new = sum(
            1
            for other in self.templates
            if view.get(Kind.RESOURCE_CLAIM_TEMPLATE, other, self.namespace) is None
        )
        if held + new >= cap:
            key = "maxTemplatesPerNamespace"
            raise _OverCapError(
                self.spec,
                "ResourceClaimTemplates",
                key,
                cap,
                message=(
                    f"translating this pod needs a new ResourceClaimTemplate ({name}), but "
                    f"namespace {self.namespace} already holds {held} made by dra-webhook, the "
                    f"limit set by translation.{key} in the dra-webhook policy: ask for a device "
                    "count or type that pods here already use, wait until unused templates are "
                    f"removed, or raise translation.{key}"
                ),
            )

    def _use(self, ref: ContainerRef, claims: Iterable[_Claim]) -> None:
        names = self.claims_of.setdefault(ref.pointer, [])
        names += [c.name for c in claims if c.name not in names]

    def patch(self, wants: list[Want]) -> list[PatchOp]:
        """Removals and claim references per container (in pod order), then pod-level entries."""
        ops = self._unpatch() if self.stale else []
        by_container: dict[str, tuple[ContainerRef, set[str]]] = {}
        for want in wants:
            ref = want.legacy.container
            by_container.setdefault(ref.pointer, (ref, set()))[1].add(want.legacy.resource)
        for pointer, (ref, names) in by_container.items():
            resources = ref.container["resources"]  # read and checked by legacy_requests
            for which in ("limits", "requests"):
                values = resources.get(which) or {}
                gone = [n for n in values if n in names]
                if not gone:
                    continue
                base = f"{pointer}/resources/{which}"
                if len(gone) == len(values):
                    ops.append(jsonpatch.remove(base))  # an emptied map disappears
                else:
                    ops += [jsonpatch.remove(base + jsonpatch.pointer(n)) for n in gone]
            claims = self.claims_of.get(pointer)
            if claims:
                ops += _add_items(
                    ref.container, "resources", f"{ref.path}.resources", pointer, claims
                )
        if self.entries:
            ops += _add_list(
                self.spec.spec, "resourceClaims", self.spec.path, self.spec.pointer, self.entries
            )
        return ops

    def _unpatch(self) -> list[PatchOp]:
        """Remove an earlier translation's entries and references (highest index first)."""
        ops = [
            jsonpatch.remove(f"{self.spec.pointer}/resourceClaims/{index}")
            for index in sorted(self.stale, reverse=True)
        ]
        names = set(self.stale.values())
        for ref in containers(self.spec):
            resources = ref.container.get("resources")
            refs = resources.get("claims") if isinstance(resources, dict) else None
            if not isinstance(refs, list):
                continue
            ops += [
                jsonpatch.remove(f"{ref.pointer}/resources/claims/{index}")
                for index in reversed(range(len(refs)))
                if isinstance(refs[index], dict) and refs[index].get("name") in names
            ]
        return ops


def _add_items(
    container: Obj, key: str, path: str, pointer: str, claims: list[str]
) -> list[PatchOp]:
    """Add `resources.claims` references, creating `resources` when the container has none."""
    refs: list[Obj] = [{"name": name} for name in claims]
    resources = container.get(key)
    if resources is None:
        return [jsonpatch.add(f"{pointer}/{key}", {"claims": refs})]
    if not isinstance(resources, dict):
        raise ObjectShapeError(path, "must be an object")
    return _add_list(resources, "claims", path, f"{pointer}/{key}", refs)


def _add_list(parent: Obj, key: str, path: str, pointer: str, items: list[Obj]) -> list[PatchOp]:
    existing = list_field(parent, key, path)
    if not existing and key not in parent:
        return [jsonpatch.add(f"{pointer}/{key}", items)]
    if not existing:
        return [jsonpatch.replace(f"{pointer}/{key}", items)]
    return [jsonpatch.add(f"{pointer}/{key}/-", item) for item in items]


class _ClaimNames:
    """Readable pod-level claim names (<resource>-<container>) that never reuse a taken name."""

    def __init__(self, taken: set[str], translation: Translation) -> None:
        self._taken = taken
        self._prefix = translation.claim_name_prefix

    def new(self, tail: str, who: str) -> str:
        base = _claim_base(self._prefix, tail, who)
        name, n = base, 1
        while name in self._taken:
            n += 1
            suffix = f"-{n}"
            name = slug(base, MAX_NAME - len(suffix)) + suffix
        self._taken.add(name)
        return name


@functools.lru_cache(maxsize=4096)
def _claim_base(prefix: str, tail: str, who: str) -> str:
    """<prefix>-<tail>-<who> as a DNS label; memoized (container names repeat across pods)."""
    return slug("-".join(p for p in (prefix, tail, who) if p), MAX_NAME) or "claim"


def _existing_claim_names(spec: PodSpecRef) -> set[str]:
    names: set[str] = set()
    for index, entry in enumerate(list_field(spec.spec, "resourceClaims", spec.path)):
        if not isinstance(entry, dict):
            raise ObjectShapeError(f"{spec.path}.resourceClaims[{index}]", "must be an object")
        name = entry.get("name")
        if isinstance(name, str):
            names.add(name)
    return names


def _after(owner: ContainerRef | None, init: ContainerRef) -> bool:
    """True when `owner` does not run alongside `init`: a regular container or a later sidecar."""
    return owner is not None and (owner.field == "containers" or owner.index > init.index)


def _smallest(claims: list[_Claim], init: Want) -> _Claim | None:
    """The smallest claim (first on a tie) `init` may share that holds its N devices."""
    found: _Claim | None = None
    for claim in claims:
        if (
            claim.count >= init.count
            and (found is None or claim.count < found.count)
            and _after(claim.owner, init.legacy.container)
        ):
            found = claim
    return found


def _tail(want: Want) -> str:
    return want.legacy.resource.rsplit("/", 1)[-1]


def _who(ref: ContainerRef) -> str:
    if ref.is_sidecar:
        return f"sidecar container {ref.name}"
    if ref.field == "initContainers":
        return f"init container {ref.name}"
    return f"container {ref.name}"


def _translated(want: Want) -> str:
    return f"{_who(want.legacy.container)}: {want.legacy.resource}: {want.legacy.amount}"


def _removed(want: Want) -> str:
    return f"{_translated(want)} -> removed (no devices asked for)"


def _key(legacy: LegacyRequest) -> Key:
    return legacy.container.field, legacy.container.name, legacy.resource


def _mode_label(ctx: Context) -> str:
    key = ctx.policy.namespace_modes.label
    return f"{key}={ctx.namespace_labels.get(key, '')}"


def _denial(
    request: Request, label: str, problems: list[Problem], warnings: Iterable[str]
) -> Result:
    what = f"{request.kind} {request.name}".strip() if request.name else request.kind
    return Result(
        violations=tuple(p.violation for p in problems),
        warnings=tuple(warnings),
        summary=(
            f"namespace {request.namespace} translates device-plugin requests into DRA claims "
            f"({label}), but {what} cannot be translated:"
        ),
    )


# -- DRA already in the pod ----------------------------------------------------------------


def _own_entries(spec: PodSpecRef, namespace: str, ctx: Context, analysis: Analysis) -> None:
    """Pod-level entries an earlier translation added, into `analysis.stale`.

    An entry is ours only when the view holds its template and the template carries our
    managed-by label: anything else is the user's and is never removed. An entry whose template
    is named like ours but is not in the view cannot be told apart: a problem, rather than
    removing what may be the user's or doubling the devices by translating next to it.
    """
    for index, entry in enumerate(list_field(spec.spec, "resourceClaims", spec.path)):
        if not isinstance(entry, dict):
            continue
        name, template = entry.get("name"), entry.get("resourceClaimTemplateName")
        if not isinstance(name, str) or not isinstance(template, str):
            continue
        obj = ctx.view.get(Kind.RESOURCE_CLAIM_TEMPLATE, template, namespace)
        if obj is None:
            if ctx.compiled.templates.is_own_name(template):
                analysis.problems.append(_unknown_own(spec, index, name, template))
            continue
        labels = obj.get("metadata", {}).get("labels")
        if isinstance(labels, dict) and labels.get(MANAGED_BY_LABEL) == MANAGED_BY:
            analysis.stale[index] = name


def _unknown_own(spec: PodSpecRef, index: int, name: str, template: str) -> Problem:
    return Problem(
        ("resourceClaims", name, template),
        Violation(
            f"{spec.path}.resourceClaims[{index}]",
            f"{name}: ResourceClaimTemplate {template} is named like the ones dra-webhook "
            "creates, but is not in its cluster view (not synced yet, or deleted), so this entry "
            "cannot be told apart from one of your own; retry once the template exists, or "
            "rename the entry's template",
        ),
    )


def _dra_classes(
    spec: PodSpecRef, namespace: str, view: ClusterView, skip: Mapping[int, str]
) -> tuple[dict[str, str], list[str]]:
    """DeviceClasses the pod already asks for through DRA (class -> which entry), and the
    entries whose ResourceClaim or ResourceClaimTemplate the view does not hold."""
    in_use: dict[str, str] = {}
    unknown: list[str] = []
    for index, entry in enumerate(list_field(spec.spec, "resourceClaims", spec.path)):
        where = f"{spec.path}.resourceClaims[{index}]"
        if not isinstance(entry, dict):
            raise ObjectShapeError(where, "must be an object")
        if index in skip:
            continue
        claim_name = entry.get("resourceClaimName")
        template_name = entry.get("resourceClaimTemplateName")
        claim_spec: Any = None
        if isinstance(claim_name, str) and claim_name:
            described = f"{where} {entry.get('name')}: ResourceClaim {claim_name}"
            obj = view.get(Kind.RESOURCE_CLAIM, claim_name, namespace)
            if obj is not None:
                claim_spec = obj.get("spec")
        elif isinstance(template_name, str) and template_name:
            described = f"{where} {entry.get('name')}: ResourceClaimTemplate {template_name}"
            obj = view.get(Kind.RESOURCE_CLAIM_TEMPLATE, template_name, namespace)
            if obj is not None:
                outer = obj.get("spec")
                claim_spec = outer.get("spec") if isinstance(outer, dict) else None
        else:
            continue  # neither is set: the API server rejects the pod
        if obj is None:
            unknown.append(described)
            continue
        for device_class in _classes_of(claim_spec):
            in_use.setdefault(device_class, described)
    return in_use, unknown


def _classes_of(claim_spec: Any) -> Iterable[str]:
    """Every deviceClassName a ResourceClaimSpec names (exactly and firstAvailable)."""
    devices = claim_spec.get("devices") if isinstance(claim_spec, dict) else None
    requests = devices.get("requests") if isinstance(devices, dict) else None
    for item in requests if isinstance(requests, list) else ():
        if not isinstance(item, dict):
            continue
        exactly = item.get("exactly")
        if isinstance(exactly, dict) and isinstance(exactly.get("deviceClassName"), str):
            yield exactly["deviceClassName"]
        for sub in item.get("firstAvailable") or ():
            if isinstance(sub, dict) and isinstance(sub.get("deviceClassName"), str):
                yield sub["deviceClassName"]


def _bad_name(legacy: LegacyRequest) -> Violation:
    return Violation(
        legacy.path,
        f"{legacy.resource!r} is not a valid resource name (an optional DNS-subdomain prefix and "
        "'/', then at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter "
        "or digit): it is not translated",
    )


# -- counts --------------------------------------------------------------------------------


def _count(legacy: LegacyRequest) -> tuple[int, Violation | None]:
    """The whole-number count of a request, or why it has none."""
    counts: dict[str, int] = {}
    for which, raw in (("limits", legacy.limit), ("requests", legacy.request)):
        if raw is None:
            continue
        value = _whole_number(raw)
        if value is None:
            return 0, Violation(
                f"{legacy.container.path}.resources.{which}[{legacy.resource}]",
                f"{raw!s} is not a whole number: {legacy.resource} is counted in whole devices",
            )
        counts[which] = value
    if len(counts) == 2 and counts["limits"] != counts["requests"]:
        return 0, Violation(
            f"{legacy.container.path}.resources.requests[{legacy.resource}]",
            f"requests ({legacy.request}) and limits ({legacy.limit}) of {legacy.resource} "
            "differ; they must be equal",
        )
    return next(iter(counts.values())), None


def _whole_number(raw: object) -> int | None:
    """A quantity that is a non-negative whole number (`2`, `"2"`, `"1k"`, `"2000m"`), else None."""
    if isinstance(raw, str):
        return _whole_number_text(raw)
    if not isinstance(raw, int | float):
        return None
    return _whole_number_of(raw)


@functools.lru_cache(maxsize=1024)
def _whole_number_text(raw: str) -> int | None:
    """Memoized: the same few counts ("1", "2", "8") arrive again and again."""
    return _whole_number_of(raw)


def _whole_number_of(raw: str | int | float) -> int | None:
    try:
        quantity = parse_quantity(raw)
    except QuantityError:
        return None
    if not quantity.is_integer() or quantity.sign() < 0:
        return None
    return quantity.as_int()
