"""The DeviceTaintRule guard (policy `deviceTaints`): what a rule would evict, and who may write it.

A DeviceTaintRule puts a taint on every device its selector selects. With effect NoExecute the
device-taint eviction controller evicts every pod whose claims hold one of them, at once; with
an empty selector that is every DRA pod in the cluster (kubernetes/kubernetes#141422). The API
server accepts any such rule from anyone RBAC lets create one, and says nothing of its reach.

On CREATE and UPDATE of a rule (every `resource.k8s.io` version that serves it) this check
computes its reach from the cluster view (`app.allocation.taint_reach`: the devices it selects,
the allocated claims holding them, their pods per namespace) and

- warns (`deviceTaints.warnings`) with what it would do: "would evict 37 pods in 5 namespaces:
  ml-a (30), ..." for NoExecute; for NoSchedule, the devices it keeps off new allocations and
  the claims that keep theirs; for None, the devices it marks and what NoExecute would evict
  (what the controller itself reports in the rule's status for a None rule, once it exists);
- with `deviceTaints.enabled`, denies a NoExecute rule that would evict more than
  `maxEvictedPods` pods unless its author (the request's `userInfo`) is listed, and a NoExecute
  or NoSchedule rule that selects every device unless `allowEmptySelector` (then to the listed
  users only). An UPDATE that changes neither the selector nor the taint is never denied.

A selector of a v1alpha3 rule (1.34) that does not compile is denied with its position; one that
errs at run time on a device leaves that device unselected, as upstream's tracker does, and is
said in a warning. Where the release acts on rules only with a gate that is off by default (1.34
to 1.36: `ServedRelease.taint_rules_gated`), the warning says so. Denials are counted by check
name in `dra_webhook_denials_total{reason}`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from app.allocation.holders import DeviceHolders
from app.allocation.taint_reach import Reach, reach
from app.cel.cost import BudgetExceededError
from app.k8s.taint_rules import NO_EFFECT, NO_EXECUTE, NO_SCHEDULE, TaintRule, parse_taint_rule
from app.policies.base import ALLOW, Context, Request, Result, Violation, failure_answer
from app.policies.cel_runtime import cel_runtime
from app.policies.parts import Parts

GUARD = "dra-webhook device-taint guard"
KINDS: frozenset[tuple[str, str]] = frozenset({("resource.k8s.io", "DeviceTaintRule")})
NAMESPACES_SHOWN = 5
"""Namespaces named in a sentence (the rest are counted): a warning is one line."""
PODS_NAMED = 10
"""Up to this many pods in all, each is named beside its namespace."""


@dataclass(frozen=True, slots=True)
class TaintRules:
    """The policy's `deviceTaints`, read at load."""

    enabled: bool
    warnings: bool
    users: frozenset[str]
    groups: frozenset[str]
    max_evicted_pods: int
    allow_empty_selector: bool
    request_access: str

    def listed(self, username: str, groups: tuple[str, ...]) -> bool:
        return username in self.users or not self.groups.isdisjoint(groups)


def device_taint_rules(parts: Parts) -> TaintRules:
    """Builder: the policy's `deviceTaints` section."""
    config = parts.policy.device_taints
    return TaintRules(
        config.enabled,
        config.warnings,
        frozenset(config.users),
        frozenset(config.groups),
        config.max_evicted_pods,
        config.allow_empty_selector,
        config.request_access,
    )


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def consumers_phrase(found: Reach) -> str:
    """`37 pods in 5 namespaces: ml-a (30), ml-b (3), ... and 2 more`; pods named when few."""
    evicted = found.pods + found.groups
    namespaces = found.pod_namespaces()
    named = evicted <= PODS_NAMED
    shown = []
    for namespace, count in namespaces[:NAMESPACES_SHOWN]:
        consumers = found.by_namespace[namespace]
        if named:
            who = ", ".join((*consumers.pods, *consumers.groups))
            shown.append(f"{namespace} ({count}: {who})")
        else:
            shown.append(f"{namespace} ({count})")
    more = len(namespaces) - NAMESPACES_SHOWN
    listed = ", ".join(shown) + (f" and {more} more" if more > 0 else "")
    groups = f", {_plural(found.groups, 'pod group')} among them" if found.groups else ""
    text = f"{_plural(evicted, 'pod')} in {_plural(len(namespaces), 'namespace')}{groups}"
    return f"{text}: {listed}" if namespaces else text


def _devices(found: Reach) -> str:
    return f"{_plural(found.published, 'device')} in {_plural(found.pools, 'pool')}"


def sentence(found: Reach) -> str:
    """What the rule would do, in one sentence (the warning, and `report`'s line)."""
    rule = found.rule
    taint = rule.describe_taint()
    if not rule.has_selector and not found.selects_all:
        return (
            f"selects no device (no spec.deviceSelector; an empty one, {{}}, would select every "
            f"device), so {taint} has no effect"
        )
    every = "every device in the cluster: " if found.selects_all else ""
    if rule.effect == NO_EXECUTE:
        text = f"would evict {consumers_phrase(found)} ({every}{_devices(found)} selected"
        extra = []
        if found.tolerating:
            count = len(found.tolerating)
            extra.append(f"{_plural(count, 'claim')} tolerate{'s' if count == 1 else ''} it")
        if found.delayed:
            extra.append(f"{_plural(found.delayed, 'claim')} only after their tolerationSeconds")
        return text + "".join(f"; {e}" for e in extra) + ")"
    if rule.effect == NO_SCHEDULE:
        kept = (
            f"; the {_plural(found.claims, 'claim')} holding the others keep them "
            f"({consumers_phrase(found)}, not evicted)"
            if found.claims
            else ""
        )
        return (
            f"would keep {every}{_devices(found)} off new claims that do not tolerate "
            f"{taint} ({found.free} of them free now){kept}"
        )
    return (
        f"marks {every}{_devices(found)} with {taint}: nothing is evicted or kept off; "
        f"as NoExecute it would evict {consumers_phrase(found)}"
    )


def check(request: Request, ctx: Context) -> Result:
    """Validating, DeviceTaintRule CREATE and UPDATE: warn with the rule's reach; deny per
    `deviceTaints` when enabled."""
    rules = ctx.parts[device_taint_rules]
    if not rules.enabled and not rules.warnings:
        return ALLOW
    rule = parse_taint_rule(request.object)
    try:
        found = rule_reach(rule, request, ctx)
    except BudgetExceededError as exc:
        return failure_answer(
            ctx.policy.failure.cel_budget,
            f"DeviceTaintRule {rule.name}: {exc}",
            skipped="its reach not computed",
            code=403,
            reason="Forbidden",
        )
    name = f"DeviceTaintRule {rule.name or request.name}".strip()
    compile_errors = tuple(Violation(path, message) for path, message in found.problems)
    notes = tuple(f"{path}: {message}" for path, message in found.notes) + tuple(
        f"spec.deviceSelector.selectors: {e} (device not selected)" for e in found.erring
    )
    gated = ctx.view.release.taint_rules_gated()
    said = (f"{name} {sentence(found)}", *((f"{name}: {gated}",) if gated else ()))
    warnings = (*said, *notes) if rules.warnings else notes
    if compile_errors:
        return Result(
            violations=compile_errors,
            warnings=warnings,
            summary=f"{name}: CEL selectors do not compile",
        )
    if not rules.enabled or _unchanged(request, rule):
        return Result(warnings=warnings)
    violations = _refusals(found, rules, request)
    if not violations:
        return Result(warnings=warnings)
    who = f"user {request.username}" if request.username else "this user"
    return Result(
        violations=violations,
        warnings=warnings,
        summary=f"{name}: {who} may not write this rule ({GUARD}, policy deviceTaints):",
        details=(
            "Name a driver, pool or device to drain fewer devices, or write it with effect None "
            f"first to see what it selects. To get access: {rules.request_access}."
        ),
    )


def rule_reach(rule: TaintRule, request: Request | None, ctx: Context) -> Reach:
    """The rule's reach in the view (CEL selectors through the shared runtime, charged to the
    review's budget when there is a review)."""
    runtime = ctx.parts[cel_runtime] if rule.uses_cel and cel_runtime in ctx.parts else None
    budget = request.cel_budget() if request is not None else None
    return reach(
        rule,
        ctx.view,
        ctx.view.index(DeviceHolders),
        runtime.index if runtime is not None else None,
        budget,
    )


def _refusals(found: Reach, rules: TaintRules, request: Request) -> tuple[Violation, ...]:
    rule = found.rule
    listed = rules.listed(request.username, request.groups)
    violations: list[Violation] = []
    if found.selects_all and rule.effect != NO_EFFECT:
        where = "spec.deviceSelector"
        if not rules.allow_empty_selector:
            violations.append(
                Violation(
                    where,
                    f"selects every device in the cluster with effect {rule.effect}; the policy "
                    "never allows that (deviceTaints.allowEmptySelector: false)",
                )
            )
        elif not listed:
            violations.append(
                Violation(
                    where,
                    f"selects every device in the cluster with effect {rule.effect}; only the "
                    "users and groups in deviceTaints.users and deviceTaints.groups may",
                )
            )
    evicted = found.pods + found.groups
    if rule.effect == NO_EXECUTE and evicted > rules.max_evicted_pods and not listed:
        violations.append(
            Violation(
                "spec.taint.effect",
                f"NoExecute would evict {consumers_phrase(found)}: more than the "
                f"{rules.max_evicted_pods} deviceTaints.maxEvictedPods allows anyone not in "
                "deviceTaints.users or deviceTaints.groups",
            )
        )
    return tuple(violations)


def _unchanged(request: Request, rule: TaintRule) -> bool:
    """An UPDATE that changes neither what the rule selects nor its taint (labels, status
    conditions written through the main resource): judged already."""
    if request.operation != "UPDATE" or request.old_object is None:
        return False
    try:
        old = parse_taint_rule(request.old_object)
    except Exception:  # an old object we cannot read: judge the new one in full
        return False
    keep = ("name", "uid", "api_version")
    return all(
        getattr(old, f.name) == getattr(rule, f.name)
        for f in dataclasses.fields(TaintRule)
        if f.name not in keep
    )
