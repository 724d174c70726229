"""Which checks see which reviews: the registration table (what runs where fits on one screen).

Each registration names the endpoint, the kinds and operations its check sees, and what the
check reads besides the request: the view kinds (`reads`: a stale one answers per
`failure.staleView`), the parts it builds from the policy at load (`builds`, see
`app/policies/parts.py`) and the derived indexes of the view (`indexes`). The pipeline
(`app.pipeline`) builds and subscribes them when it is made, and routes by this table. A check
whose work can be long (compiling a claim's new selectors) also names a `prepare`: the same
work, done ahead of it in steps the server interleaves with other reviews.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from app import workloads
from app.allocation import Allocations
from app.allocation.holders import DeviceHolders
from app.cluster.templates import ManagedTemplates
from app.cluster.usage import ClaimUsage, SliceNodes, TemplateCounts
from app.cluster.view import DerivedIndex, Kind
from app.config import Policy
from app.k8s.groups import GROUP_KINDS
from app.policies import (
    defaults,
    device_taints,
    dra_only,
    extended_names,
    near_misses,
    preemption,
    rules,
    satisfiability,
    selectors,
    translate,
)
from app.policies.admin_access import NAMESPACE_KINDS, admin_access_rules, check_claims, check_label
from app.policies.base import Context, Mode, Request, Result
from app.policies.builders import (
    legacy_matcher,
    mapping_resolver,
    near_miss_names,
    sharing_rules,
    translation_rules,
)
from app.policies.cel_runtime import cel_runtime
from app.policies.device_classes import check_classes, check_translated, class_allow_lists
from app.policies.exceptions import policy_exceptions
from app.policies.parts import Builder
from app.policies.quota import check as quota
from app.policies.quota.capacity import ClassPolicies
from app.policies.quota.rules import quota_rules
from app.policies.workloads import workload_catalogue
from app.translation.sharing import PublishedCapacities

__all__ = [
    "ANY_KIND",
    "CLAIM_KINDS",
    "DEVICE_CLASS",
    "DEVICE_TAINT_RULE",
    "GROUPS",
    "JUDGED_BY_TRANSLATION",
    "POD_BEARING",
    "READ_THE_FINAL_POD",
    "REGISTRATIONS",
    "RULE_KINDS",
    "WORKLOADS",
    "Endpoint",
    "Registration",
    "rule_registrations",
]


class Endpoint(StrEnum):
    MUTATE = "mutate"
    VALIDATE = "validate"


Check = Callable[[Request, Context], Result]
Prepare = Callable[[Request, Context], Iterator[None]]
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
GROUPS: frozenset[GroupKind] = GROUP_KINDS
"""scheduling.k8s.io Workloads and PodGroups: their group claims (`app.policies.groups`)."""
DEVICE_TAINT_RULE: frozenset[GroupKind] = device_taints.KINDS


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
    prepare: Prepare | None = None
    """Work the check would do itself, done ahead of it one step at a time
    (`Pipeline.prepare`): whatever it leaves undone, the check does."""
    modes: frozenset[Mode] | None = None
    """Only in namespaces of these modes (None: whatever the namespace's mode): elsewhere the
    check is not run, and not named among the policies that ran."""


_TRANSLATE_READS = frozenset(
    {Kind.NAMESPACE, Kind.DEVICE_CLASS, Kind.RESOURCE_CLAIM, Kind.RESOURCE_CLAIM_TEMPLATE}
)
"""Extended-resource mappings, and the claims and templates a pod already references."""
_TRANSLATE_BUILDS = (
    translation_rules,
    policy_exceptions,
    cel_runtime,
    workload_catalogue,
    preemption.known_classes,
    sharing_rules,
    translate.translations,
)
_TRANSLATE_INDEXES = (ManagedTemplates, Allocations, DeviceHolders, PublishedCapacities)
"""Templates already made for the namespace count against translation's cap; the claims it
makes are checked by the allocation model (what allocated claims hold, and which claims hold
the devices a pod waits for: `preemption.held_by`); a share's compute limit asks for the
capacity the class's devices publish."""
_PREEMPTION_BUILDS = (legacy_matcher, workload_catalogue, preemption.known_classes)

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
        "near-misses",
        Endpoint.VALIDATE,
        POD_BEARING,
        frozenset({"CREATE", "UPDATE"}),
        near_misses.check,
        reads=frozenset({Kind.NAMESPACE, Kind.DEVICE_CLASS}),
        builds=(near_miss_names, workload_catalogue),
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
        "translated-again",
        Endpoint.VALIDATE,
        frozenset({("", "Pod")}),
        frozenset({"CREATE"}),
        translate.validate_pod,
        reads=_TRANSLATE_READS,
        builds=_TRANSLATE_BUILDS,
        indexes=_TRANSLATE_INDEXES,
        modes=frozenset({Mode.TRANSLATE}),
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
        prepare=selectors.compile_ahead,
    ),
    Registration(
        "device-class-mappings",
        Endpoint.VALIDATE,
        DEVICE_CLASS,
        frozenset({"CREATE", "UPDATE"}),
        extended_names.check,
        reads=frozenset({Kind.DEVICE_CLASS}),
        builds=(mapping_resolver, sharing_rules),
    ),
    Registration(
        "pod-satisfiability",
        Endpoint.VALIDATE,
        POD_BEARING,  # workloads: the pods of a template asking for names a DeviceClass maps
        frozenset({"CREATE", "UPDATE"}),
        satisfiability.check_pod,
        reads=frozenset(
            {
                Kind.DEVICE_CLASS,
                Kind.RESOURCE_SLICE,
                Kind.RESOURCE_CLAIM,
                Kind.RESOURCE_CLAIM_TEMPLATE,
            }
        ),
        # translation_rules: which mapped names translation leaves to the scheduler
        builds=(
            cel_runtime,
            legacy_matcher,
            policy_exceptions,
            translation_rules,
            workload_catalogue,
            preemption.known_classes,
        ),
        indexes=(Allocations, DeviceHolders),
        workloads=True,
    ),
    # what a GPU pod that may preempt loses on DRA (the PriorityClasses and Pods it reads are
    # optional: not in `reads`, a stale one only makes it say less)
    Registration(
        "preemption",
        Endpoint.VALIDATE,
        POD_BEARING,
        frozenset({"CREATE", "UPDATE"}),
        preemption.check,
        reads=frozenset({Kind.NAMESPACE}),
        builds=_PREEMPTION_BUILDS,
        workloads=True,
    ),
    Registration(
        "preemption-translate",
        Endpoint.MUTATE,
        WORKLOADS,
        frozenset({"CREATE", "UPDATE"}),
        preemption.check_translated,
        reads=frozenset({Kind.NAMESPACE}),
        builds=_PREEMPTION_BUILDS,
        workloads=True,
    ),
    Registration(
        "group-satisfiability",
        Endpoint.VALIDATE,
        GROUPS,
        frozenset({"CREATE"}),
        satisfiability.check_group,
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
        CLAIM_KINDS | POD_BEARING | GROUPS,
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
        CLAIM_KINDS | POD_BEARING | GROUPS,
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
    # DeviceTaintRules (cluster-scoped, docs/operations.md): what a rule would evict or keep
    # off, and who may write one that evicts (policy deviceTaints)
    Registration(
        "device-taints",
        Endpoint.VALIDATE,
        DEVICE_TAINT_RULE,
        frozenset({"CREATE", "UPDATE"}),
        device_taints.check,
        reads=frozenset({Kind.RESOURCE_SLICE, Kind.RESOURCE_CLAIM, Kind.DEVICE_CLASS}),
        builds=(device_taints.device_taint_rules, cel_runtime),
        indexes=(DeviceHolders,),
    ),
)
READ_THE_FINAL_POD = frozenset({"cel-rules", "translated-again"})
"""Validating checks of pods that the mutating call of a translate namespace does not run: an
admin's CEL rule may read any field of the pod as it finally is, after every mutation (the chart
keeps the validating call where rules match Pods); legacy names asked for again after the
translation exist only in the pod as it finally is (the chart's validating entry sends a pod with
any extended resource)."""
JUDGED_BY_TRANSLATION = frozenset({"pod-satisfiability"})
"""Validating checks a translation that made claims has already done: it judged the claims it
made together with the pod's own (`policies.translate`)."""

ANY_KIND = frozenset({"dra-only", "translate-validate"})
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
