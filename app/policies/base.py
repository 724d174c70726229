"""The values policies take and return.

A policy is `check(request, context) -> Result`. A denial is a returned value listing every
violation with its field path, never an exception; the pipeline merges the results of all
policies that apply into one decision.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from app.cel.cost import Budget
from app.cluster.view import ClusterReader
from app.config import Policy
from app.config.policy import Cel
from app.k8s.claims import ClaimSpec, parse_claim_spec, template_claim_spec
from app.k8s.objects import object_name
from app.k8s.patch import PatchOp
from app.policies.parts import Parts

Obj = dict[str, Any]


class Mode(StrEnum):
    """What a namespace opted into through its mode label."""

    DRA_ONLY = "dra-only"
    TRANSLATE = "translate"
    AUDIT = "audit"


@dataclass(frozen=True, slots=True)
class Request:
    """One admission request, as the policies see it (built from the wire by the transport)."""

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
    _claim_spec: ClaimSpec | None = field(default=None, init=False, repr=False, compare=False)
    _templates: tuple[Any, ...] | None = field(default=None, init=False, repr=False, compare=False)
    """The object's pod templates, read once per review (`app.policies.workloads.templates`):
    dra-only, the scan, translation and quota all read them."""
    _cel_budget: Budget | None = field(default=None, init=False, repr=False, compare=False)

    def claim_spec(self) -> ClaimSpec:
        """The object's claim spec (a ResourceClaim's `spec`, a ResourceClaimTemplate's
        `spec.spec`) read by the claim model, once per review: quota and the selector check
        both read it. Raises ObjectShapeError when a template's `spec` is not an object."""
        found = self._claim_spec
        if found is None:
            obj = self.object or {}
            if self.kind == "ResourceClaimTemplate":
                spec, path = template_claim_spec(obj)
            else:
                spec, path = obj.get("spec"), "spec"
            found = parse_claim_spec(spec, path)
            object.__setattr__(self, "_claim_spec", found)
        return found

    def cel_budget(self, cel: Cel) -> Budget:
        """The review's CEL budget (`cel.reviewBudget`, `cel.compileBudget`), one per review:
        the selector check spends it, and so does the compiling the server has done for it
        ahead of the check (`app.policies.selectors.compile_ahead`)."""
        found = self._cel_budget
        if found is None:
            found = Budget(cel.review_budget, cel.compile_budget)
            object.__setattr__(self, "_cel_budget", found)
        return found


@dataclass(frozen=True, slots=True)
class Context:
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
