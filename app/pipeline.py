"""Route a review to the policies that apply and merge their results into one Decision
(`app/verdict.py`).

Routing is a dict lookup on (endpoint, group, kind, operation) built once. Before any policy runs
the pipeline resolves the namespace's mode from the cluster view and skips exempt namespaces: the
webhook's own namespace and kube-system can never be blocked by it.

Each registration also declares what its check reads besides the request: the parts it builds
from the policy at load (`builds`, see `app/policies/parts.py`) and the derived indexes of the
view (`indexes`). The pipeline builds the one and subscribes the other when it is made, with
the parts that follow the view (`app.policies.parts.FollowsView`: the CEL runtime), so a policy
that does not compile stops startup, and no check builds or subscribes anything on the request
path.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum
from functools import partial
from typing import Any

from app import workloads
from app.allocation import Allocations
from app.cluster.templates import ManagedTemplates
from app.cluster.usage import ClaimUsage, SliceNodes, TemplateCounts
from app.cluster.view import ClusterView, DerivedIndex, Kind
from app.config import Policy
from app.config.policy import StaleView as StaleViewPolicy
from app.errors import ObjectShapeError, PolicyError
from app.policies import defaults, dra_only, rules, satisfiability, selectors, translate
from app.policies.admin_access import NAMESPACE_KINDS, admin_access_rules, check_claims, check_label
from app.policies.base import Context, Mode, Request, Result, failure_answer, subject
from app.policies.builders import translation_rules
from app.policies.cel_runtime import cel_runtime
from app.policies.device_classes import check_classes, check_translated, class_allow_lists
from app.policies.exceptions import Clock, policy_exceptions, system_clock
from app.policies.parts import Builder, Parts
from app.policies.quota import check as quota
from app.policies.quota.capacity import ClassPolicies
from app.policies.quota.rules import quota_rules
from app.policies.workloads import workload_catalogue
from app.translation.sharing import PublishedCapacities
from app.verdict import ALLOWED, INTERNAL_ERROR, Decision, Merger

__all__ = ["ALLOWED", "INTERNAL_ERROR", "Decision", "Endpoint", "Pipeline", "Registration"]

logger = logging.getLogger(__name__)


class Endpoint(StrEnum):
    MUTATE = "mutate"
    VALIDATE = "validate"


Check = Callable[[Request, Context], Result]
GroupKind = tuple[str, str]

_RESOURCE = "resource.k8s.io"

POD_BEARING: frozenset[GroupKind] = workloads.builtin().kinds()
"""Every kind of the shipped workload catalogue (`app/workloads/catalogue.yaml`): the built-in
kinds and the operators' custom resources; a policy's `workloadKinds` adds to it (`Pipeline`)."""

WORKLOADS: frozenset[GroupKind] = POD_BEARING - {("", "Pod")}

CLAIM_KINDS: frozenset[GroupKind] = frozenset(
    {(_RESOURCE, "ResourceClaim"), (_RESOURCE, "ResourceClaimTemplate")}
)
DEVICE_CLASS: frozenset[GroupKind] = frozenset({(_RESOURCE, "DeviceClass")})


@dataclass(frozen=True, slots=True)
class Registration:
    """Which requests a policy sees."""

    name: str
    endpoint: Endpoint
    kinds: frozenset[GroupKind]
    operations: frozenset[str]
    check: Check
    reads: frozenset[Kind] = frozenset(Kind)
    """Kinds of the cluster view the check consults (Namespace always, for the mode): while one
    of them is stale the check answers per the policy's failure.staleView."""
    builds: tuple[Builder[Any], ...] = ()
    """What the check reads from `ctx.parts`, built from the policy at load."""
    indexes: tuple[type[DerivedIndex], ...] = ()
    """Derived indexes of the view the check reads (`ctx.view.index`), subscribed at load."""
    workloads: bool = False
    """Also every kind the policy's `workloadKinds` adds to the catalogue."""


_TRANSLATE_READS = frozenset(
    {Kind.NAMESPACE, Kind.DEVICE_CLASS, Kind.RESOURCE_CLAIM, Kind.RESOURCE_CLAIM_TEMPLATE}
)
"""Extended-resource mappings, and the claims and templates a pod already references."""
_TRANSLATE_BUILDS = (
    translation_rules,
    policy_exceptions,
    cel_runtime,
    workload_catalogue,
)
_TRANSLATE_INDEXES = (ManagedTemplates, Allocations, PublishedCapacities)
"""Templates already made for the namespace count against translation's cap; the claims it
makes are checked by the allocation model (what allocated claims hold); a share's compute
limit asks for the capacity the class's devices publish."""

REGISTRATIONS: tuple[Registration, ...] = (
    Registration(
        "dra-only",
        Endpoint.VALIDATE,
        POD_BEARING,
        frozenset({"CREATE", "UPDATE"}),
        dra_only.check,
        reads=frozenset({Kind.NAMESPACE, Kind.DEVICE_CLASS}),
        builds=(
            translation_rules,
            policy_exceptions,
            dra_only.answers,
            workload_catalogue,
        ),
        # the fix is translation's plan: its cap on the namespace's templates, a share's capacity
        indexes=(ManagedTemplates, PublishedCapacities),
        workloads=True,
    ),
    Registration(
        "translate",
        Endpoint.MUTATE,
        frozenset({("", "Pod")}),
        frozenset({"CREATE"}),
        translate.check_pod,
        reads=_TRANSLATE_READS,
        builds=_TRANSLATE_BUILDS,
        indexes=_TRANSLATE_INDEXES,
    ),
    Registration(
        "translate-workloads",
        Endpoint.MUTATE,
        WORKLOADS,
        frozenset({"CREATE", "UPDATE"}),
        translate.check_workload,
        reads=_TRANSLATE_READS,
        builds=_TRANSLATE_BUILDS,
        indexes=_TRANSLATE_INDEXES,
        workloads=True,
    ),
    Registration(
        "translate-quota",
        Endpoint.MUTATE,
        POD_BEARING,
        frozenset({"CREATE"}),
        quota.check_translation,
        reads=_TRANSLATE_READS,
        builds=(quota_rules, *_TRANSLATE_BUILDS),
        indexes=(ClassPolicies, *_TRANSLATE_INDEXES),
        workloads=True,
    ),
    Registration(
        "translate-validate",
        Endpoint.VALIDATE,
        WORKLOADS,
        frozenset({"CREATE", "UPDATE"}),
        translate.validate,
        reads=_TRANSLATE_READS,
        builds=_TRANSLATE_BUILDS,
        indexes=_TRANSLATE_INDEXES,
        workloads=True,
    ),
    Registration(
        "cel-selectors",
        Endpoint.VALIDATE,
        CLAIM_KINDS | DEVICE_CLASS,
        frozenset({"CREATE", "UPDATE"}),
        selectors.check,
        reads=frozenset({Kind.DEVICE_CLASS, Kind.RESOURCE_SLICE}),
        builds=(cel_runtime,),
        indexes=(Allocations,),
    ),
    Registration(
        "pod-satisfiability",
        Endpoint.VALIDATE,
        frozenset({("", "Pod")}),
        frozenset({"CREATE"}),
        satisfiability.check_pod,
        reads=frozenset(
            {
                Kind.DEVICE_CLASS,
                Kind.RESOURCE_SLICE,
                Kind.RESOURCE_CLAIM,
                Kind.RESOURCE_CLAIM_TEMPLATE,
            }
        ),
        builds=(cel_runtime,),
        indexes=(Allocations,),
    ),
    Registration(
        "claim-defaults",
        Endpoint.MUTATE,
        CLAIM_KINDS,
        frozenset({"CREATE"}),
        defaults.check,
        reads=frozenset({Kind.NAMESPACE}),
        builds=(defaults.claim_defaults,),
    ),
    Registration(
        "claim-quota",
        Endpoint.VALIDATE,
        CLAIM_KINDS | POD_BEARING,
        frozenset({"CREATE", "UPDATE"}),
        quota.check,
        builds=(quota_rules, cel_runtime, *_TRANSLATE_BUILDS),
        indexes=(ClaimUsage, SliceNodes, TemplateCounts, ClassPolicies, *_TRANSLATE_INDEXES),
        workloads=True,
    ),
    # tenancy (docs/tenancy.md): who may turn admin access on, which DeviceClasses a namespace
    # may use (also in the claims translation writes, and the pods translation will make)
    Registration(
        "admin-access",
        Endpoint.VALIDATE,
        NAMESPACE_KINDS,
        frozenset({"CREATE", "UPDATE"}),
        check_label,
        reads=frozenset({Kind.NAMESPACE}),
        builds=(admin_access_rules,),
    ),
    Registration(
        "admin-access-claims",
        Endpoint.VALIDATE,
        CLAIM_KINDS,
        frozenset({"CREATE"}),
        check_claims,
        reads=frozenset({Kind.NAMESPACE}),
        builds=(admin_access_rules,),
    ),
    Registration(
        "device-classes",
        Endpoint.VALIDATE,
        CLAIM_KINDS | POD_BEARING,
        frozenset({"CREATE", "UPDATE"}),
        check_classes,
        reads=_TRANSLATE_READS,
        builds=(class_allow_lists, *_TRANSLATE_BUILDS),
        indexes=_TRANSLATE_INDEXES,
        workloads=True,
    ),
    Registration(
        "device-classes-translate",
        Endpoint.MUTATE,
        POD_BEARING,
        frozenset({"CREATE", "UPDATE"}),
        check_translated,
        reads=_TRANSLATE_READS,
        builds=(class_allow_lists, *_TRANSLATE_BUILDS),
        indexes=_TRANSLATE_INDEXES,
        workloads=True,
    ),
)
_ANY_KIND = frozenset({"dra-only", "translate-validate"})
"""The checks offline `check` runs on a kind nothing routes (`Pipeline.review_any_kind`): their
workload scan finds a GPU request in any object."""

RULE_KINDS: frozenset[GroupKind] = POD_BEARING | CLAIM_KINDS | DEVICE_CLASS
"""Kinds an admin CEL rule (policy `cel.rules`) can match: the ones this webhook receives."""


def rule_registrations(policy: Policy) -> tuple[Registration, ...]:
    """The `cel-rules` check, routed only to the kinds and operations some rule matches."""
    kinds = {kind for rule in policy.cel.rules for kind in rule.match.kinds}
    operations = {op for rule in policy.cel.rules for op in rule.match.operations}
    matched = frozenset(gk for gk in RULE_KINDS if gk[1] in kinds)
    if not matched:
        return ()
    return (
        Registration(
            "cel-rules",
            Endpoint.VALIDATE,
            matched,
            frozenset(operations),
            rules.check,
            builds=(cel_runtime, rules.admin_rules),
        ),
    )


class Pipeline:
    """Decides reviews. Built once per process from the policy and the cluster view."""

    def __init__(
        self,
        policy: Policy,
        view: ClusterView,
        own_namespace: str,
        registrations: Iterable[Registration] = REGISTRATIONS,
        *,
        clock: Clock = system_clock,
    ) -> None:
        """`clock`: what policy exceptions are judged by (tests inject one)."""
        self.policy = policy
        self.view = view
        registrations = (*registrations, *rule_registrations(policy))
        self.parts = Parts(policy, clock=clock)
        self._merger = Merger()
        """Merges the checks' results, remembering decisions of shared ones (app.verdict)."""
        for reg in registrations:
            for builder in reg.builds:
                self.parts.build(builder)  # raises PolicyError naming what does not compile
        self.parts.seal()
        # what the parts and the checks read of the cluster follows it as it changes, never on a
        # request, and is complete when the view has synced (before ready): the parts that
        # follow the view (the CEL runtime's device index and allocation model), then the
        # derived indexes the registrations declare
        for part in self.parts.following_view():
            for listener in part.listeners():
                view.subscribe(listener)
            view.when_synced(partial(part.synced, view))
        for reg in registrations:
            for index in reg.indexes:
                view.derived(index)  # replayed the view now, at startup, then kept current
        self._exempt = frozenset(policy.exempt_namespaces) | {own_namespace, "kube-system"}
        modes = policy.namespace_modes
        self._label = modes.label
        self._modes = {
            modes.dra_only: Mode.DRA_ONLY,
            modes.translate: Mode.TRANSLATE,
            modes.audit: Mode.AUDIT,
        }
        added = (
            self.parts[workload_catalogue].kinds() - POD_BEARING
            if (workload_catalogue in self.parts)
            else frozenset()
        )
        routes: dict[tuple[Endpoint, str, str, str], list[Registration]] = {}
        for reg in registrations:
            for group, kind in reg.kinds | added if reg.workloads else reg.kinds:
                for operation in reg.operations:
                    routes.setdefault((reg.endpoint, group, kind, operation), []).append(reg)
        self._routes = {key: tuple(regs) for key, regs in routes.items()}
        self._any_kind = tuple(r for r in registrations if r.name in _ANY_KIND)
        self._stale_view = _checked_stale_view(policy, registrations)

    def needs_namespace(self, endpoint: Endpoint, request: Request) -> bool:
        """True when some check will run on `request` but the view lacks its namespace."""
        return (
            bool(request.namespace)
            and request.namespace not in self._exempt
            and (endpoint, request.group, request.kind, request.operation) in self._routes
            and self.view.namespace_labels(request.namespace) is None
        )

    def review(self, endpoint: Endpoint, request: Request) -> Decision:
        """Decide one review; never raises (bugs are answered per the failure policy)."""
        registrations = self._routes.get((endpoint, request.group, request.kind, request.operation))
        return self._answer(endpoint, request, registrations)

    def _answer(
        self, endpoint: Endpoint, request: Request, registrations: tuple[Registration, ...] | None
    ) -> Decision:
        if not registrations or request.namespace in self._exempt:
            return ALLOWED
        try:
            return self._review(endpoint, request, registrations)
        except ObjectShapeError as exc:
            if endpoint is Endpoint.MUTATE:
                return ALLOWED  # the validating webhook denies it with the path
            return Decision(
                allowed=False,
                code=422,
                reason="Invalid",
                message=f"{subject(request)} is invalid: {exc}",
                denied_by=("invalid-object",),
            )
        except Exception:
            logger.exception(
                "internal error while reviewing",
                extra={"uid": request.uid, "kind": request.kind, "namespace": request.namespace},
            )
            return self.internal_failure()

    def review_any_kind(self, request: Request) -> Decision:
        """`review` on the validating side for an object of any kind, as offline `check` reads
        manifests: a kind no registration routes is still scanned for GPU requests (dra-only
        denies them, translate reports them untranslatable), never passed in silence."""
        key = (Endpoint.VALIDATE, request.group, request.kind, request.operation)
        return self._answer(Endpoint.VALIDATE, request, self._routes.get(key) or self._any_kind)

    def internal_failure(self) -> Decision:
        """The answer when a bug stops a review: per the policy's failure.internalError."""
        return self._failure(
            self.policy.failure.internal_error,
            INTERNAL_ERROR,
            "dra-webhook failed to check this object (internal error, see its logs)",
        )

    def _review(
        self, endpoint: Endpoint, request: Request, registrations: tuple[Registration, ...]
    ) -> Decision:
        labels = self.view.namespace_labels(request.namespace) if request.namespace else {}
        if labels is None:
            return self._failure(
                self.policy.failure.unknown_namespace,
                "unknown-namespace",
                f"namespace {request.namespace} is not in dra-webhook's cluster view yet",
            )
        mode_value = labels.get(self._label)
        ctx = Context(
            view=self.view,
            policy=self.policy,
            parts=self.parts,
            mode=self._modes.get(mode_value) if mode_value is not None else None,
            namespace_labels=labels,
        )
        stale = self.view.stale_kinds
        results: list[tuple[str, Result]] = []
        failed: list[str] = []
        for reg in registrations:
            result = self._stale_result(reg, stale) if stale else None
            if result is None:
                try:
                    result = reg.check(request, ctx)
                except ObjectShapeError:
                    raise  # the object is bad, not the check: a denial with the path
                except Exception:
                    logger.exception(
                        "internal error in check %s",
                        reg.name,
                        extra={
                            "uid": request.uid,
                            "check": reg.name,
                            "kind": request.kind,
                            "namespace": request.namespace,
                        },
                    )
                    failed.append(reg.name)
                    result = self._check_failure(reg.name)
            results.append((reg.name, result))
        return self._merger.merge(results, failed)

    def _check_failure(self, name: str) -> Result:
        """One check's own answer when it raised: per failure.internalError, for it alone.

        The other checks' results are merged with it, so their denials still stand.
        """
        text = f"{name}: dra-webhook failed to run this check (internal error, see its logs)"
        return failure_answer(self.policy.failure.internal_error, text)

    def _stale_result(self, reg: Registration, stale: frozenset[Kind]) -> Result | None:
        """The answer of a check that reads a stale kind (per failure.staleView), else None."""
        kinds = stale & (reg.reads | {Kind.NAMESPACE})
        if not kinds:
            return None
        names = ", ".join(sorted(kind.value for kind in kinds))
        text = (
            f"{reg.name}: dra-webhook's cluster view of {names} is out of date "
            "(not in sync with the API server)"
        )
        return failure_answer(
            self._stale_view.mode(reg.name), text, code=503, reason="ServiceUnavailable", retry=True
        )

    def _failure(self, mode: str, label: str, message: str) -> Decision:
        if mode == "open":
            return Decision(allowed=True, warnings=(f"{message}; allowed (fail open)",))
        return Decision(
            allowed=False,
            code=503 if label == "unknown-namespace" else 500,
            reason="ServiceUnavailable" if label == "unknown-namespace" else "InternalError",
            message=f"{message}; denied (fail closed)",
            denied_by=(label,),
        )


def _checked_stale_view(policy: Policy, registrations: Iterable[Registration]) -> StaleViewPolicy:
    """failure.staleView, after checking that every check it names exists."""
    stale_view = policy.failure.stale_view
    known = {reg.name for reg in registrations}
    for name in stale_view.checks:
        if name not in known:
            raise PolicyError(
                f"failure.staleView.checks.{name}: no such check; checks are "
                + ", ".join(sorted(known))
            )
    return stale_view
