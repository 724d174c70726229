"""The translation plan: what a pod spec's legacy requests become, as a pure value.

`plan(spec, namespace, rules, view)` reads a pod spec and decides everything translation does:
which legacy requests can be translated and which cannot (the problems), the pod-level claims
and the ResourceClaimTemplates they are made from, which claims each container uses, and what
leaves each container's `limits` and `requests`. It writes nothing and knows nothing of
admission: the mutating policy turns a plan into a JSONPatch (`app.translation.patch`), quota
adds up the devices of its claims, dra-only prints its claim names as the fix.

The rules (docs/translation.md writes them out for users):

- Regular containers and sidecars (init containers with `restartPolicy: Always`) each get a claim
  of their own with their N devices, as a device plugin gives each container its own devices.
- Init containers share: each gets the smallest claim of a container that does not run
  alongside it (regular containers, sidecars started after it) holding at least its N devices.
  Those with no such claim share one top-up claim per legacy name, sized for the largest of
  them. With `translation.initContainers: separate` init containers get claims of their own.
- A pod whose translation would add more than `translation.maxClaimsPerPod` claims or need more
  than `translation.maxTemplatesPerPod` templates (or a new template in a namespace at
  `maxTemplatesPerNamespace`) is over a cap: the first cap reached is the plan's `over_cap`.
  Planning goes on past it without naming claims or building templates, so the device counts
  stay whole and the cost per claim stays constant.
- A count of zero (`nvidia.com/gpu: 0`) asks for no device: it leaves the container with a
  warning and never becomes a claim (`count: 0` is not a valid count), mapped or not (dra-only,
  which finds no offence in it, reads `legacy_requests` without zeros).
- With `leave` (translate namespaces, `migrate`), a whole-device request the policy leaves to
  the scheduler where a DeviceClass maps its name (`translation.leaveMapped`, a rule's
  `leaveToScheduler`; app.translation.leave says when) stays as written: it is in `left`, not
  in the claims.
- A legacy name with no mapping, a count that is not a whole number, limits and requests that
  disagree, a count over the 32 devices a claim can hold (the scheduler's
  AllocationResultsMaxSize: such a claim is never allocated), or a DeviceClass the pod already
  asks for through DRA: a problem each.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from app.allocation import ALLOCATION_RESULTS_MAX_SIZE
from app.cluster.templates import ManagedTemplates
from app.cluster.view import ClusterReader, Kind
from app.k8s.objects import ContainerRef, PodSpecRef
from app.translation.existing import dra_classes, existing_claim_names, own_entries
from app.translation.leave import Left, choose
from app.translation.legacy import DeviceMapping, LegacyRequest, is_resource_name, legacy_requests
from app.translation.naming import ClaimNames, tail, who
from app.translation.rules import TranslationRules
from app.translation.templates import ClaimTemplate
from app.translation.wants import Key, Problem, Want, request_key
from app.translation.wants import count as count_of

__all__ = [
    "Key",
    "Left",
    "PlannedClaim",
    "Problem",
    "TranslationPlan",
    "TranslationRules",
    "Want",
    "plan",
]

Obj = dict[str, Any]


@dataclass(frozen=True, slots=True)
class PlannedClaim:
    """A pod-level claim translation adds."""

    name: str
    """Empty for a claim planned past a cap (never written)."""
    count: int
    mapping: DeviceMapping
    template: ClaimTemplate | None
    """None for a claim planned past a cap."""
    owner: ContainerRef | None
    """The container it was made for; None for an init top-up claim."""

    @property
    def device_class(self) -> str:
        return self.mapping.device_class_name


@dataclass(slots=True)
class TranslationPlan:
    """Everything translating one pod spec means; built by `plan`, read by its callers."""

    spec: PodSpecRef
    wants: list[Want] = field(default_factory=list)
    """The translatable legacy requests, in container order."""
    problems: list[Problem] = field(default_factory=list)
    over_cap: Problem | None = None
    """The first per-pod or per-namespace cap the claims below go over."""
    notes: list[str] = field(default_factory=list)
    """Warnings that do not stop translation (a DRA claim the view does not know)."""
    stale: dict[int, str] = field(default_factory=dict)
    """Index -> name of pod-level entries from an earlier translation, to be replaced."""
    claims: list[PlannedClaim] = field(default_factory=list)
    """Pod-level claims, in the order they are added."""
    claims_of: dict[str, list[str]] = field(default_factory=dict)
    """Container pointer -> names of the claims it uses."""
    claim_for: dict[Key, str] = field(default_factory=dict)
    """Legacy request -> the claim that replaces it (not for a zero count)."""
    templates: dict[str, Obj] = field(default_factory=dict)
    """Template name -> the ResourceClaimTemplate to create, in first-use order."""
    warnings: list[str] = field(default_factory=list)
    """What was translated into what, one line per legacy request."""
    left: list[Left] = field(default_factory=list)
    """Requests left as written for the scheduler to serve from a DeviceClass (`leave`)."""

    @property
    def all_problems(self) -> list[Problem]:
        return self.problems + ([self.over_cap] if self.over_cap is not None else [])

    def removed(self) -> dict[str, tuple[ContainerRef, set[str]]]:
        """Container pointer -> (container, legacy names leaving its limits and requests)."""
        found: dict[str, tuple[ContainerRef, set[str]]] = {}
        for want in self.wants:
            ref = want.legacy.container
            found.setdefault(ref.pointer, (ref, set()))[1].update(
                legacy.resource for legacy in want.requests
            )
        return found

    def devices(self) -> dict[str, int]:
        """DeviceClass -> devices the planned claims hold."""
        found: dict[str, int] = {}
        for claim in self.claims:
            found[claim.device_class] = found.get(claim.device_class, 0) + claim.count
        return found


def plan(
    spec: PodSpecRef,
    namespace: str,
    rules: TranslationRules,
    view: ClusterReader,
    *,
    replace_own: bool = False,
    leave: bool = False,
) -> TranslationPlan:
    """Parse counts, resolve mappings, look for DRA conflicts, then plan claims and templates.

    With `replace_own`, claims an earlier translation added are not conflicts but output to
    redo: `kubectl apply` (client-side) of a workload translated before sends the legacy
    request back from its manifest while keeping the claims the webhook added. With `leave`
    (translate namespaces, `migrate`), the requests the policy leaves to the scheduler
    (`translation.leaveMapped`, `leaveToScheduler`: app.translation.leave) are not translated.
    """
    result = TranslationPlan(spec)
    found = legacy_requests(spec, rules.legacy, zeros=True)  # zeros are removed, not claimed
    if not found:
        return result
    if replace_own:
        problems, result.stale = own_entries(spec, namespace, rules.templates.is_own_name, view)
        result.problems += problems
    _analyse(found, spec, namespace=namespace, rules=rules, view=view, result=result, leave=leave)
    if result.wants:
        _Planner(spec, namespace, rules, view, result).add(result.wants)
    return result


def _analyse(
    found: list[LegacyRequest],
    spec: PodSpecRef,
    *,
    namespace: str,
    rules: TranslationRules,
    view: ClusterReader,
    result: TranslationPlan,
    leave: bool,
) -> None:
    found = [r for r in found if r.container.field != "ephemeralContainers"]
    # ephemeral containers may not have resources at all: the API server rejects them, not us
    groups, found = rules.sharing.split(found)
    for group in groups:
        shared = rules.sharing.want(group, view)
        result.problems += shared.problems
        result.notes += shared.notes
        if shared.want is not None:
            _add(result, shared.want)
    plain: list[Want] = []
    leaving = leave and rules.leaves
    for legacy in found:
        key = request_key(legacy)
        if not is_resource_name(legacy.resource):
            result.problems.append(_bad_name(legacy))
            continue
        count, bad = count_of(legacy)
        if bad is not None:
            result.problems.append(bad)
            continue
        mapping = rules.mappings.resolve(legacy.resource, view)
        if mapping is None and count == 0:
            mapping = _NOTHING  # asks for no device: removed, whatever serves the name
        if mapping is None:
            result.problems.append(
                Problem(
                    key,
                    legacy.path,
                    f"no DeviceClass is known for {legacy.resource}: "
                    + rules.mappings.missing_hint(legacy.resource),
                )
            )
            continue
        if leaving:
            plain.append(Want(legacy, count, mapping))  # chosen from below, pod by pod
        else:
            _add(result, Want(legacy, count, mapping))
    if plain:
        chosen = choose(plain, groups, rules, view)
        result.left = chosen.left
        result.notes += chosen.notes
        for want in chosen.keep:
            _add(result, want)
    if not result.wants and not result.left:
        return
    in_use, unknown = dra_classes(spec, namespace, view, skip=result.stale)
    asked = [(w.legacy, w.count, w.mapping.device_class_name) for w in result.wants]
    asked += [(left.legacy, left.count, left.device_class) for left in result.left]
    for legacy, count, device_class in asked:
        where = in_use.get(device_class)
        if where is not None and count > 0:
            result.problems.append(
                Problem(
                    request_key(legacy),
                    legacy.path,
                    f"{legacy.resource} maps to DeviceClass {device_class}, which "
                    f"this pod already requests through DRA ({where}); ask for all "
                    f"{device_class} devices through resourceClaims, not both ways",
                )
            )
    result.notes += [
        f"{where}: not in dra-webhook's cluster view; could not check that it asks for "
        "another device type than the translated requests"
        for where in unknown
    ]


def _add(result: TranslationPlan, want: Want) -> None:
    """A translatable want, unless its claim would hold more devices than a claim can: the
    scheduler fails such a claim with an error on every attempt (API validation lets it
    through), so it is a problem, not a claim written for nothing."""
    if want.count <= ALLOCATION_RESULTS_MAX_SIZE:
        result.wants.append(want)
        return
    result.problems.append(
        Problem(
            request_key(want.legacy),
            want.legacy.path,
            f"{_translated(want)} would become one claim for {want.count} devices, but a "
            f"ResourceClaim holds at most {ALLOCATION_RESULTS_MAX_SIZE} "
            "(AllocationResultsMaxSize): the scheduler fails such a claim with an error and "
            "never allocates it, so it is not translated; ask for at most "
            f"{ALLOCATION_RESULTS_MAX_SIZE} per container",
        )
    )


_NOTHING = DeviceMapping("", (), "zero")
"""The mapping of a zero request no rule maps: it only leaves the container."""


# -- claims and templates --------------------------------------------------------------------


def _cap_problem(spec: PodSpecRef, what: str, key: str, cap: int) -> Problem:
    return Problem(
        ("", "", key),
        spec.path,
        f"translating this pod needs more than {cap} {what}, the limit set by "
        f"translation.{key} in the dra-webhook policy: ask for devices in fewer "
        f"containers or with fewer different counts, or raise translation.{key}",
    )


class _Planner:
    """Fills a plan's claims, templates and container references."""

    def __init__(
        self,
        spec: PodSpecRef,
        namespace: str,
        rules: TranslationRules,
        view: ClusterReader,
        result: TranslationPlan,
    ) -> None:
        self.spec = spec
        self.namespace = namespace
        self.rules = rules
        self.view = view
        self.result = result
        config = rules.config
        self.share = config.init_containers == "share"
        taken = existing_claim_names(spec) - set(result.stale.values())
        self.names = ClaimNames(taken, config.claim_name_prefix)

    def add(self, wants: list[Want]) -> None:
        app_claims: dict[tuple[str, DeviceMapping], list[PlannedClaim]] = {}
        inits: dict[tuple[str, DeviceMapping], list[Want]] = {}
        for want in wants:
            ref = want.legacy.container
            if self.share and not ref.runs_with_app:
                inits.setdefault(_kind(want), []).append(want)
                continue
            if want.count == 0:
                self._warn(_removed(want))
                continue
            claim = self._new_claim(want.mapping, want.count, _tail(want), ref.name, owner=ref)
            self._use(want, claim)
            app_claims.setdefault(_kind(want), []).append(claim)
            if claim.template is not None:
                self._warn(
                    f"{_translated(want)} -> claim {claim.name} (template {claim.template.name}, "
                    f"class {claim.template.device_class}{_capacity(want.mapping)})"
                )
        for kind, group in inits.items():
            self._share(group, app_claims.get(kind, []))

    def _share(self, inits: list[Want], app_claims: list[PlannedClaim]) -> None:
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
        top: PlannedClaim | None = None
        if need:
            first = inits[0]
            top = self._new_claim(first.mapping, need, _tail(first), "init", owner=None)
        for want, pick in zip(inits, picks, strict=True):
            if want.count == 0:
                self._warn(_removed(want))
                continue
            shared = pick
            if (
                top is not None
                and top.count >= want.count
                and (pick is None or pick.count > top.count)
            ):
                shared = top
            assert shared is not None  # the top-up is made for every init container without one
            self._use(want, shared)
            if shared.template is not None:
                self._warn(
                    f"{_translated(want)} -> shares claim {shared.name} (template "
                    f"{shared.template.name}, class {want.mapping.device_class_name})"
                )

    def _warn(self, text: str) -> None:
        if self.result.over_cap is None:
            self.result.warnings.append(text)

    def _new_claim(
        self, mapping: DeviceMapping, count: int, tail: str, who: str, owner: ContainerRef | None
    ) -> PlannedClaim:
        result = self.result
        template: ClaimTemplate | None = None
        if result.over_cap is None:
            config = self.rules.config
            if len(result.claims) >= config.max_claims_per_pod:
                result.over_cap = _cap_problem(
                    self.spec, "resource claims", "maxClaimsPerPod", config.max_claims_per_pod
                )
            else:
                template = self.rules.templates.get(self.namespace, mapping, count)
                if template.name not in result.templates:
                    result.over_cap = self._template_cap(template.name)
        if result.over_cap is not None or template is None:
            claim = PlannedClaim("", count, mapping, None, owner)
        else:
            claim = PlannedClaim(self.names.new(tail, who), count, mapping, template, owner)
            result.templates.setdefault(template.name, template.template)
        result.claims.append(claim)
        return claim

    def _template_cap(self, name: str) -> Problem | None:
        """A new template must fit under maxTemplatesPerPod and maxTemplatesPerNamespace."""
        cap = self.rules.config.max_templates_per_pod
        if len(self.result.templates) >= cap:
            return _cap_problem(self.spec, "ResourceClaimTemplates", "maxTemplatesPerPod", cap)
        return self._namespace_cap(name)

    def _namespace_cap(self, name: str) -> Problem | None:
        """A new template must fit under translation.maxTemplatesPerNamespace (templates the view
        holds cost nothing: only a create is capped)."""
        view = self.view
        if view.get(Kind.RESOURCE_CLAIM_TEMPLATE, name, self.namespace) is not None:
            return None
        cap = self.rules.config.max_templates_per_namespace
        held = view.index(ManagedTemplates).count(self.namespace)
        new = sum(
            1
            for other in self.result.templates
            if view.get(Kind.RESOURCE_CLAIM_TEMPLATE, other, self.namespace) is None
        )
        if held + new < cap:
            return None
        key = "maxTemplatesPerNamespace"
        return Problem(
            ("", "", key),
            self.spec.path,
            f"translating this pod needs a new ResourceClaimTemplate ({name}), but "
            f"namespace {self.namespace} already holds {held} made by dra-webhook, the "
            f"limit set by translation.{key} in the dra-webhook policy: ask for a device "
            "count or type that pods here already use, wait until unused templates are "
            f"removed, or raise translation.{key}",
        )

    def _use(self, want: Want, claim: PlannedClaim) -> None:
        if not claim.name:
            return
        self.result.claim_for[request_key(want.legacy)] = claim.name
        names = self.result.claims_of.setdefault(want.legacy.container.pointer, [])
        if claim.name not in names:
            names.append(claim.name)


def _after(owner: ContainerRef | None, init: ContainerRef) -> bool:
    """True when `owner` does not run alongside `init`: a regular container or a later sidecar."""
    return owner is not None and (owner.field == "containers" or owner.index > init.index)


def _smallest(claims: list[PlannedClaim], init: Want) -> PlannedClaim | None:
    """The smallest claim (first on a tie) `init` may share that holds its N devices."""
    found: PlannedClaim | None = None
    for claim in claims:
        if (
            claim.count >= init.count
            and (found is None or claim.count < found.count)
            and _after(claim.owner, init.legacy.container)
        ):
            found = claim
    return found


def _capacity(mapping: DeviceMapping) -> str:
    if not mapping.capacity:
        return ""
    return ", capacity " + ", ".join(f"{name}={amount}" for name, amount in mapping.capacity)


def _kind(want: Want) -> tuple[str, DeviceMapping]:
    """What an init container's want may share: a claim of the same name and mapping (for a
    share, the same capacity requests)."""
    return want.legacy.resource, want.mapping


def _tail(want: Want) -> str:
    return tail(want.legacy.resource)


def _translated(want: Want) -> str:
    asked = ", ".join(f"{r.resource}: {r.amount}" for r in want.requests)
    return f"{who(want.legacy.container)}: {asked}"


def _removed(want: Want) -> str:
    return f"{_translated(want)} -> removed (no devices asked for)"


def _bad_name(legacy: LegacyRequest) -> Problem:
    return Problem(
        request_key(legacy),
        legacy.path,
        f"{legacy.resource!r} is not a valid resource name (an optional DNS-subdomain prefix and "
        "'/', then at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter "
        "or digit): it is not translated",
    )
