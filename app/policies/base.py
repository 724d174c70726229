"""The values policies take and return.

A policy is `check(request, context) -> Result`. A denial is a returned value listing every
violation with its field path, never an exception; the pipeline merges the results of all
policies that apply into one decision.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, NamedTuple

from app.cel.cost import Budget
from app.cluster.view import ClusterReader
from app.config import Policy
from app.config.policy import Cel
from app.errors import ObjectShapeError
from app.k8s.claims import ClaimSpec, parse_claim_spec, template_claim_spec
from app.k8s.objects import object_name
from app.k8s.patch import PatchOp
from app.policies.parts import Parts
from app.workloads import Catalogue, Template

Obj = dict[str, Any]


class Mode(StrEnum):
    """What a namespace opted into through its mode label."""

    DRA_ONLY = "dra-only"
    TRANSLATE = "translate"
    AUDIT = "audit"


class Body(NamedTuple):
    """What the policies read of a request's object, decoded once at the pipeline's edge
    (`decode`): a claim's spec, the pod templates of a pod or workload. Nothing is parsed
    later on the way down: every check reads these values.

    A malformed object is kept as its error (`ObjectShapeError`, with the field path) and
    raised to the check that reads the part, which the pipeline answers as it always has: a
    denial naming the path on the validating side."""

    claim: ClaimSpec | None = None
    """A ResourceClaim's `spec`, a ResourceClaimTemplate's `spec.spec` (claim kinds only)."""
    claim_error: ObjectShapeError | None = None
    templates: tuple[Template, ...] = ()
    """The object's pod templates, by the workload catalogue (pod-bearing kinds only)."""
    templates_error: ObjectShapeError | None = None
    old_templates: tuple[Template, ...] = ()
    """On UPDATE, the pod templates of the object it replaces (none when that is malformed:
    then everything is judged as new)."""
    cel_budget: Budget | None = None
    """The review's CEL budget (`cel.reviewBudget`, `cel.compileBudget`), for the kinds whose
    selectors are compiled (claims and DeviceClasses): the selector check spends it, and so does
    the compiling the server has done for it ahead of the check
    (`app.policies.selectors.compile_ahead`). A mutable meter held by the immutable request."""


RAW = Body()
"""The body of a request not decoded yet (`decode`)."""


class Request(NamedTuple):
    """One admission request, as the policies see it: the envelope built from the wire by the
    transport (or from files by `check`, `migrate` and `report`), and its object decoded once
    by `decode` (the pipeline does it before any check runs). Immutable: nothing is filled in
    after it is built.

    A named tuple, as `Body` and `Context` are: built for every review (twice: the envelope,
    then decoded), it costs a tuple, where a frozen dataclass pays an `object.__setattr__`
    per field (~3 µs for these 17, docs/benchmarks.md)."""

    uid: str
    group: str
    version: str
    kind: str
    resource: str
    sub_resource: str
    operation: str
    namespace: str
    name: str
    object: Obj | None
    old_object: Obj | None
    dry_run: bool
    username: str
    request_version: str
    """The version the client used (a v1beta2 ResourceClaim arrives converted to v1)."""
    groups: tuple[str, ...] = ()
    """The groups of the requesting user (`userInfo.groups`): who may change what the
    admin-access guard keeps (`app.policies.admin_access`)."""
    body: Body = RAW
    decoded: bool = False

    def claim_spec(self) -> ClaimSpec:
        """The object's claim spec as decoded; raises its ObjectShapeError when malformed."""
        body = self.body
        if body.claim is not None:
            return body.claim
        if body.claim_error is not None:
            raise body.claim_error
        raise LookupError(f"{self.kind}: no claim spec decoded (not a claim kind, or not decoded)")

    def templates(self) -> tuple[Template, ...]:
        """The object's pod templates as decoded; raises its ObjectShapeError when malformed."""
        if self.body.templates_error is not None:
            raise self.body.templates_error
        return self.body.templates

    def cel_budget(self) -> Budget:
        """The review's CEL budget (`Body.cel_budget`)."""
        budget = self.body.cel_budget
        if budget is None:
            raise LookupError(f"{self.kind}: no CEL budget (not a kind whose selectors compile)")
        return budget


def decode(request: Request, catalogue: Catalogue, cel: Cel) -> Request:
    """`request` with its object decoded for the policies (`Body`), once: the claim spec of a
    claim kind, the pod templates (and on UPDATE the old ones) of a kind the catalogue knows,
    the CEL budget of a kind whose selectors compile. A request already decoded is returned
    as it is."""
    if request.decoded:
        return request
    obj = request.object
    claim: ClaimSpec | None = None
    claim_error: ObjectShapeError | None = None
    found: tuple[Template, ...] = ()
    templates_error: ObjectShapeError | None = None
    old: tuple[Template, ...] = ()
    budget: Budget | None = None
    if request.group == _RESOURCE:
        budget = Budget(cel.review_budget, cel.compile_budget)
        if request.kind in _CLAIM_KINDS and obj is not None:
            try:
                if request.kind == "ResourceClaimTemplate":
                    spec, path = template_claim_spec(obj)
                else:
                    spec, path = obj.get("spec"), "spec"
                claim = parse_claim_spec(spec, path)
            except ObjectShapeError as error:
                claim_error = error
    elif obj is not None and (request.group, request.kind) in catalogue:
        try:
            found = catalogue.templates(request.group, request.kind, obj)
        except ObjectShapeError as error:
            templates_error = error
        previous = request.old_object if request.operation == "UPDATE" else None
        if previous is not None:
            try:
                old = catalogue.templates(request.group, request.kind, previous)
            except ObjectShapeError:
                old = ()
    r = request
    return Request(  # (not dataclasses.replace: this runs once per review, replace is slower)
        r.uid,
        r.group,
        r.version,
        r.kind,
        r.resource,
        r.sub_resource,
        r.operation,
        r.namespace,
        r.name,
        r.object,
        r.old_object,
        r.dry_run,
        r.username,
        r.request_version,
        r.groups,
        Body(claim, claim_error, found, templates_error, old, budget),
        True,
    )


_RESOURCE = "resource.k8s.io"
_CLAIM_KINDS = frozenset({"ResourceClaim", "ResourceClaimTemplate"})


class Context(NamedTuple):
    """What a policy may consult besides the request: all in memory, built before it runs.

    `view` is read-only to a check (`ClusterReader`): the sources write it, and the derived
    indexes a check reads were subscribed at load by its registration. `parts` holds what the
    registrations built from the policy at load (`ctx.parts[builder]`).
    """

    view: ClusterReader
    policy: Policy
    parts: Parts
    mode: Mode | None
    namespace_labels: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class Violation:
    """One reason to deny, at one field."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


@dataclass(frozen=True, slots=True)
class Result:
    """What one policy decided. An empty Result allows without change."""

    violations: tuple[Violation, ...] = ()
    warnings: tuple[str, ...] = ()
    patch: tuple[PatchOp, ...] = ()
    templates: tuple[Obj, ...] = ()
    """ResourceClaimTemplates that must exist before the answer goes back."""
    summary: str = ""
    """First line of a denial message, before the violations."""
    details: str = ""
    """Text after the violations (how to fix it)."""
    reason: str = "Forbidden"
    code: int = 403
    findings: int = 0
    """Offences reported as warnings only (audit mode), counted in metrics."""
    excepted: tuple[str, ...] = ()
    """Policy exceptions that let legacy requests through (their names), counted in metrics."""
    translated: tuple[str, ...] = ()
    """What each request translated became, by the rule that mapped it (`mapping`,
    `deviceclass`, `implicit`, `sharing:<rule>`): counted in metrics once it is admitted."""
    kept: bool = field(default=False, compare=False)
    """A check's memo holds this Result and answers with it again (translation's, by pod
    spec): the pipeline's merge of it is worth remembering even with a patch or templates,
    which a Result made for one review carries in vain (`app.verdict.Merger`)."""

    @property
    def denied(self) -> bool:
        return bool(self.violations)


ALLOW = Result()


def failure_answer(
    mode: str,
    text: str,
    *,
    skipped: str = "not checked",
    code: int = 500,
    reason: str = "InternalError",
    retry: bool = False,
) -> Result:
    """The answer of a check that could not judge (it raised, the view it reads is stale, the
    review's CEL budget ran out), per the failure policy's ``mode``: open allows with a warning
    saying what was ``skipped``; closed denies with ``code``, and "retry later" only where a
    retry can help (``retry``)."""
    if mode == "open":
        return Result(warnings=(f"{text}; {skipped}, allowed (fail open)",))
    closed = f"{text}; denied (fail closed){', retry later' if retry else ''}"
    return Result(violations=(Violation("", closed),), reason=reason, code=code)


def subject(request: Request) -> str:
    """How an answer names the object under review: its kind and name (`Deployment trainer`;
    the name is the object's, its generateName prefix before it has one, else the request's),
    or the kind alone when there is none."""
    name = object_name(request.object) if isinstance(request.object, dict) else ""
    name = name or request.name
    return f"{request.kind} {name}" if name else request.kind


def old_object(request: Request) -> Obj | None:
    """The object an UPDATE replaces, else None. Checks judge only what an update changed or
    added against it: an offence it already had is warned about, not denied, and what it
    already held is not charged again (`workloads.old_templates` reads its pod templates)."""
    return request.old_object if request.operation == "UPDATE" else None
