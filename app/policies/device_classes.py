"""DeviceClass allow-lists (policy `deviceClasses`): which classes a tenant's namespaces may use.

Each entry selects namespaces by their labels and names the classes they may use (names or
shell patterns); a namespace several entries select may use what any of them allows, one no
entry selects is not restricted. Every place a class can be named is read:

- ResourceClaims and ResourceClaimTemplates: each request's `exactly`, each `firstAvailable`
  alternative (one alternative the namespace may not use is enough: the scheduler may pick it),
  and the v1beta1 request's own `deviceClassName` (the claim model, `app.k8s.claims`);
- pod specs of Pods and of every workload kind of the catalogue (`app.policies.workloads`):
  the ResourceClaims and ResourceClaimTemplates their `resourceClaims` name (read from the
  cluster view), and extended resources the scheduler serves from a DeviceClass (KEP-5004:
  `deviceclass.resource.kubernetes.io/<class>`, or a name a class's `extendedResourceName`
  maps);
- group claims (`app.policies.groups`): the ResourceClaims and ResourceClaimTemplates a
  Workload's or PodGroup's `resourceClaims` name (one claim shared by the group's pods), read
  from the cluster view, at `spec.resourceClaims[i].resourceClaimTemplateName`;
- translation (`check_translated`, on the mutating side, next to `translate`): the claims it is
  about to write, before any ResourceClaimTemplate is created; the denial names the mapping
  that chose the class. In translate namespaces a workload's templates are judged at apply
  time by the claims their pods will get.

A denial names the field, the class, the classes allowed and the entries. Namespaces in the
audit mode, and entries with `action: warn`, warn instead (counted as findings). On UPDATE only
uses the old object did not have are denied; the others are warned about.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from app.cluster.view import Kind
from app.config.policy import MappingRule
from app.errors import ObjectShapeError
from app.k8s.claims import (
    COUNTING,
    SELECTING,
    ClaimSpec,
    stored_claim_spec,
)
from app.k8s.labels import Selector
from app.k8s.objects import PodSpecRef, containers, list_field, object_name, resource_map
from app.policies.base import ALLOW, Context, Mode, Request, Result, Violation
from app.policies.builders import legacy_matcher, plan_for
from app.policies.exceptions import cover, policy_exceptions
from app.policies.groups import claims_of, is_group, named_kind, named_spec
from app.policies.parts import Parts
from app.policies.workloads import combine, old_specs, templates
from app.regex import compile_re2, glob_to_re2
from app.translation.legacy import IMPLICIT_CLASS_PREFIX
from app.translation.plan import TranslationPlan, Want


@dataclass(frozen=True, slots=True)
class AllowList:
    """One `deviceClasses` entry, compiled."""

    name: str
    namespaces: Selector
    allowed: tuple[str, ...]
    exact: frozenset[str]
    pattern: Any
    """The entry's patterns as one RE2 program (None: names only)."""
    warn: bool

    def allows(self, device_class: str) -> bool:
        return device_class in self.exact or bool(
            self.pattern is not None and self.pattern.fullmatch(device_class)
        )


@dataclass(frozen=True, slots=True)
class NamespaceClasses:
    """The entries that select one namespace: what it may use, and what a use outside gets."""

    entries: tuple[AllowList, ...]

    def allows(self, device_class: str) -> bool:
        return any(entry.allows(device_class) for entry in self.entries)

    @property
    def warn_only(self) -> bool:
        return all(entry.warn for entry in self.entries)

    @property
    def names(self) -> str:
        return ", ".join(entry.name for entry in self.entries)

    def allowed_text(self) -> str:
        """`gpu.nvidia.com, mig.* (deviceClasses entry team-a)`, per entry."""
        parts = [
            f"{', '.join(e.allowed) if e.allowed else 'none'} (deviceClasses entry {e.name})"
            for e in self.entries
        ]
        return "; ".join(parts)


class ClassAllowLists:
    """Every `deviceClasses` entry of the policy, and where each `mappings` rule applies (the
    rule a translation denial names)."""

    def __init__(self, entries: Iterable[AllowList], mappings: Iterable[MappingRule]) -> None:
        self.entries = tuple(entries)
        self._mappings = tuple(
            (index, rule, compile_re2(rule.resource) if rule.pattern else None)
            for index, rule in enumerate(mappings)
        )

    def __bool__(self) -> bool:
        return bool(self.entries)

    def for_namespace(self, labels: Mapping[str, str]) -> NamespaceClasses | None:
        """The entries that select a namespace with `labels`; None when none does."""
        found = tuple(e for e in self.entries if e.namespaces.matches(labels))
        return NamespaceClasses(found) if found else None

    def mapping_rule(self, resource: str) -> str:
        """`mappings[0] (nvidia.com/gpu -> gpu.nvidia.com)`: the first rule mapping `resource`."""
        for index, rule, regex in self._mappings:
            if rule.resource == resource if regex is None else regex.fullmatch(resource):
                return f"mappings[{index}] ({rule.resource} -> {rule.device_class_name})"
        return "mappings"


def class_allow_lists(parts: Parts) -> ClassAllowLists:
    """Builder: the policy's `deviceClasses` entries and its `mappings` rules."""
    compiled = []
    for entry in parts.policy.device_classes:
        globs = [glob_to_re2(p) for p in entry.allowed if "*" in p or "?" in p]
        compiled.append(
            AllowList(
                entry.name,
                Selector.from_policy(entry.namespace_selector),
                entry.allowed,
                frozenset(p for p in entry.allowed if "*" not in p and "?" not in p),
                compile_re2("|".join(f"(?:{g})" for g in globs)) if globs else None,
                entry.action == "warn",
            )
        )
    return ClassAllowLists(compiled, parts.policy.mappings)


@dataclass(frozen=True, slots=True)
class Use:
    """One place an object uses a DeviceClass the namespace may not use."""

    path: str
    device_class: str
    what: str
    """What uses it, before "DeviceClass <class>": `asks for`, `alternative b asks for`..."""
    fix: str = ""
    """What to change besides the class (a translation's mapping)."""

    @property
    def key(self) -> tuple[str, str]:
        return self.path, self.device_class


# -- the checks ------------------------------------------------------------------------------


def check_classes(request: Request, ctx: Context) -> Result:
    """Validating: ResourceClaims and templates on CREATE; Pods and workloads on CREATE and
    UPDATE (their pod specs' claims and DRA-served extended resources)."""
    allow_lists = ctx.parts[class_allow_lists]
    if not allow_lists or request.object is None:
        return ALLOW
    classes = allow_lists.for_namespace(ctx.namespace_labels)
    if classes is None:
        return ALLOW
    if request.kind in ("ResourceClaim", "ResourceClaimTemplate"):
        uses = claim_uses(request.claim_spec(), classes)
        had = _claim_before(request, classes) if uses else set()
        return answer(request, ctx, classes, uses, had)
    if is_group(request):
        if request.operation != "CREATE":
            return ALLOW  # group claims are immutable: judged when the object was created
        return answer(request, ctx, classes, group_uses(request, ctx, classes), set())
    found = templates(request, ctx)
    if not found:
        return ALLOW
    old = old_specs(request, ctx)
    results = []
    for template in found:
        uses = spec_uses(request, ctx, template.spec, classes)
        before: set[tuple[str, str]] = set()
        previous = old.get(template.spec.path)
        if uses and previous is not None:
            try:
                before = {u.key for u in spec_uses(request, ctx, previous, classes)}
            except ObjectShapeError:
                before = set()
        results.append(answer(request, ctx, classes, uses, before))
    return combine(results)


def check_translated(request: Request, ctx: Context) -> Result:
    """Mutating, next to translation: the claims it is about to write, before any template is
    created (merged with translation's answer, a denial keeps them from being made)."""
    if ctx.mode is not Mode.TRANSLATE or request.object is None:
        return ALLOW
    if request.kind == "Pod":
        if request.operation != "CREATE":
            return ALLOW  # a pod is translated once, when it is created
    elif not ctx.policy.translation.translate_workloads:
        return ALLOW
    allow_lists = ctx.parts[class_allow_lists]
    classes = allow_lists.for_namespace(ctx.namespace_labels) if allow_lists else None
    if classes is None:
        return ALLOW
    replace_own = request.operation == "UPDATE"
    return combine(
        answer(
            request,
            ctx,
            classes,
            translated_uses(request, ctx, t.spec, classes, replace_own=replace_own),
            set(),
        )
        for t in templates(request, ctx)
    )


def _claim_before(request: Request, classes: NamespaceClasses) -> set[tuple[str, str]]:
    """On UPDATE, the uses the old claim or template already had (its spec is immutable: an
    UPDATE changes its metadata or status, never what it asks for)."""
    if request.operation != "UPDATE" or not isinstance(request.old_object, dict):
        return set()
    kind = Kind(request.kind)
    parsed = _stored_spec(request.old_object, kind)
    return {u.key for u in claim_uses(parsed, classes)} if parsed is not None else set()


# -- where classes are named -----------------------------------------------------------------


def claim_uses(spec: ClaimSpec, classes: NamespaceClasses) -> list[Use]:
    """Every request and firstAvailable alternative of a claim spec naming a class the
    namespace may not use. A malformed spec raises its first error (the API server validated
    what it sends: only another client sends one)."""
    spec.check(COUNTING | SELECTING)
    uses = []
    for request in spec.requests:
        for branch in (request.exactly, request.first_available, request.flat):
            if branch is None:
                continue
            for alt in branch.alternatives:
                if not alt.device_class or classes.allows(alt.device_class):
                    continue
                what = f"alternative {alt.name} asks for" if alt.name else "asks for"
                uses.append(Use(f"{alt.path}.deviceClassName", alt.device_class, what))
    return uses


def group_uses(request: Request, ctx: Context, classes: NamespaceClasses) -> list[Use]:
    """Classes the claims and templates of a Workload's or PodGroup's group claims use that the
    namespace may not. Raises ObjectShapeError for a malformed `resourceClaims`."""
    uses = []
    for claim in claims_of(request):
        found = named_spec(claim, request.namespace, ctx.view)
        if found is None:
            continue  # not in the view (yet): its own admission judged it
        kind = named_kind(claim).value
        name = claim.claim_name or claim.template_name
        for use in claim_uses(found[1], classes):
            what = f"group claim {claim.name}: {kind} {name} ({use.path}) {use.what}"
            uses.append(Use(claim.field, use.device_class, what))
    return uses


def spec_uses(
    request: Request, ctx: Context, spec: PodSpecRef, classes: NamespaceClasses
) -> list[Use]:
    """Classes a pod spec uses that the namespace may not: through the claims and templates
    its `resourceClaims` name, DRA-served extended resources of its containers, and (in
    translate namespaces, for a workload's templates) the claims its pods will be given."""
    uses = []
    for index, entry in enumerate(list_field(spec.spec, "resourceClaims", spec.path)):
        where = f"{spec.path}.resourceClaims[{index}]"
        if not isinstance(entry, dict):
            raise ObjectShapeError(where, "must be an object")
        for key, kind in (
            ("resourceClaimName", Kind.RESOURCE_CLAIM),
            ("resourceClaimTemplateName", Kind.RESOURCE_CLAIM_TEMPLATE),
        ):
            name = entry.get(key)
            if name is None or name == "":
                continue
            if not isinstance(name, str):
                raise ObjectShapeError(f"{where}.{key}", "must be a string")
            obj = ctx.view.get(kind, name, request.namespace)
            if obj is None:
                continue  # not in the view (yet): its own admission judged it
            parsed = _stored_spec(obj, kind)
            if parsed is None:
                continue
            for use in claim_uses(parsed, classes):
                what = f"{kind.value} {name} ({use.path}) {use.what}"
                uses.append(Use(f"{where}.{key}", use.device_class, what))
    translating = ctx.mode is Mode.TRANSLATE
    legacy = ctx.parts[legacy_matcher] if translating else None
    for ref in containers(spec):
        for which in ("limits", "requests"):
            amounts = resource_map(ref, which)
            for resource in amounts:
                if which == "requests" and resource in resource_map(ref, "limits"):
                    continue
                if legacy is not None and legacy(resource):
                    continue  # translated: judged as the claims translation writes
                served = _served_by(resource, ctx)
                if served is None or classes.allows(served[0]):
                    continue
                uses.append(
                    Use(
                        f"{ref.path}.resources.{which}[{resource}]",
                        served[0],
                        f"container {ref.name} asks for {resource}: {amounts[resource]}, "
                        f"{served[1]}",
                    )
                )
    if translating and request.kind != "Pod":
        uses += translated_uses(request, ctx, spec, classes)
    return uses


def _stored_spec(obj: Mapping[str, Any], kind: Kind) -> ClaimSpec | None:
    """The claim spec of a stored claim or template (None when it cannot be read: its own
    admission answered for it)."""
    return stored_claim_spec(obj, kind is Kind.RESOURCE_CLAIM_TEMPLATE)


def _served_by(resource: str, ctx: Context) -> tuple[str, str] | None:
    """(class, how) when the scheduler serves an extended resource from a DeviceClass."""
    if resource.startswith(IMPLICIT_CLASS_PREFIX):
        return resource.removeprefix(IMPLICIT_CLASS_PREFIX), "which names"
    mapped = ctx.view.device_class_for_extended_resource(resource)
    if mapped is not None:
        return mapped, "which the scheduler serves (spec.extendedResourceName) from"
    return None


def translated_uses(
    request: Request,
    ctx: Context,
    spec: PodSpecRef,
    classes: NamespaceClasses,
    *,
    replace_own: bool = False,
) -> list[Use]:
    """The claims translation would write for a pod spec (as `translate` plans them), on
    classes the namespace may not use."""
    planned = plan_for(spec, request.namespace, ctx, replace_own=replace_own)
    if not (planned.wants or planned.left) or _excepted(request, ctx, spec, planned):
        return []
    allow_lists = ctx.parts[class_allow_lists]
    uses = [
        Use(
            left.legacy.path,
            left.device_class,
            f"container {left.legacy.container.name} asks for {left.legacy.resource}: "
            f"{left.legacy.amount}, which translation leaves to the scheduler to serve from",
        )
        for left in planned.left
        if not classes.allows(left.device_class)
    ]
    for want in planned.wants:
        device_class = want.mapping.device_class_name
        if want.count <= 0 or classes.allows(device_class):
            continue
        uses.append(
            Use(
                want.legacy.path,
                device_class,
                f"container {want.legacy.container.name} asks for {want.legacy.resource}: "
                f"{want.legacy.amount}, which translation turns into a claim on",
                _mapping_fix(want, allow_lists),
            )
        )
    return uses


def _excepted(request: Request, ctx: Context, spec: PodSpecRef, planned: TranslationPlan) -> bool:
    """Whether a policy exception leaves every legacy request of the spec untranslated."""
    exceptions = ctx.parts[policy_exceptions]
    if not exceptions:
        return False
    selecting = exceptions.selecting(request.kind, spec, ctx.namespace_labels)
    legacy = [w.legacy for w in planned.wants] + [left.legacy for left in planned.left]
    return bool(selecting) and not cover(selecting, legacy).rest


def _mapping_fix(want: Want, allow_lists: ClassAllowLists) -> str:
    source = want.mapping.source
    if source == "config":
        rule = allow_lists.mapping_rule(want.legacy.resource)
        return f"change the dra-webhook policy's {rule} to a class the namespace may use"
    if source == "deviceclass":
        return (
            f"DeviceClass {want.mapping.device_class_name} maps {want.legacy.resource} "
            "(spec.extendedResourceName): add a `mappings` rule for it to a class the "
            "namespace may use"
        )
    if source.startswith("sharing:"):
        rule = source.removeprefix("sharing:")
        return f"change the deviceClassName of the dra-webhook policy's sharing rule {rule}"
    return f"{want.legacy.resource} names its class itself: ask for a class the namespace may use"


# -- the answer ------------------------------------------------------------------------------


def _line(use: Use, namespace: str, classes: NamespaceClasses) -> str:
    fix = f"; {use.fix}" if use.fix else ""
    return (
        f"{use.what} DeviceClass {use.device_class}, which namespace {namespace} may not use "
        f"(allowed: {classes.allowed_text()}){fix}"
    )


WARN_ONLY = "(warn only)"


def standing_uses(request: Request, ctx: Context) -> list[str]:
    """`report`: every use of a class the namespace may not use in a stored object (a claim, a
    template, a pod spec's claims and DRA-served extended resources), as `path: why`, with
    `(warn only)` where the entries only warn. What translation would write is judged when it
    writes it, not here. A malformed object raises ObjectShapeError."""
    allow_lists = ctx.parts[class_allow_lists]
    classes = allow_lists.for_namespace(ctx.namespace_labels) if allow_lists else None
    if classes is None or request.object is None:
        return []
    if request.kind in ("ResourceClaim", "ResourceClaimTemplate"):
        uses = claim_uses(request.claim_spec(), classes)
    elif is_group(request):
        uses = group_uses(request, ctx, classes)
    else:
        uses = [
            u for t in templates(request, ctx) for u in spec_uses(request, ctx, t.spec, classes)
        ]
    tag = f" {WARN_ONLY}" if classes.warn_only else ""
    return [f"{u.path}: {_line(u, request.namespace, classes)}{tag}" for u in uses]


def answer(
    request: Request,
    ctx: Context,
    classes: NamespaceClasses,
    uses: list[Use],
    before: set[tuple[str, str]],
) -> Result:
    """Denied for uses the old object did not have (warned in audit namespaces and for
    warn-only entries, whose uses are counted as findings)."""
    if not uses:
        return ALLOW
    ns = request.namespace

    def line(use: Use) -> str:
        return _line(use, ns, classes)

    if ctx.mode is Mode.AUDIT or classes.warn_only:
        return Result(
            warnings=tuple(f"{u.path}: {line(u)}" for u in uses),
            findings=len(uses),
        )
    new = [u for u in uses if u.key not in before]
    kept = tuple(f"{u.path}: predates this change: {line(u)}" for u in uses if u.key in before)
    if not new:
        return Result(warnings=kept)
    name = object_name(request.object) if request.object else ""
    subject = f"{request.kind} {name or request.name}".strip()
    return Result(
        violations=tuple(Violation(u.path, line(u)) for u in new),
        warnings=kept,
        summary=(
            f"namespace {ns} may use only the DeviceClasses its dra-webhook deviceClasses "
            f"entries allow ({classes.names}); {subject} asks for others:"
        ),
        details=(
            "Use an allowed class, or ask your cluster administrators to add the class to "
            f"the deviceClasses entry ({classes.names}) of the dra-webhook policy."
        ),
    )
