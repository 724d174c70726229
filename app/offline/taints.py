"""The DeviceTaintRules in force and what each evicts or keeps off, for `report` (a dump or a
cluster file offline, the listed cluster live).

Each rule is judged as the admission check judges a new one (`app.policies.device_taints`:
the same reach over the same view, the same sentence), so what `report` says of a stored rule
is what the webhook said when it was written, brought up to date with today's claims. A rule
that does not parse is listed with the field that is wrong.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from app.allocation.holders import DeviceHolders
from app.allocation.taint_reach import reach
from app.cel.cache import CompileCache
from app.cel.factory import get_engine
from app.cluster.view import ClusterView
from app.config import Policy
from app.devices.index import DeviceIndex
from app.errors import ObjectShapeError
from app.k8s.taint_rules import KIND, NO_EXECUTE, TaintRule, parse_taint_rule
from app.offline.report import NamespaceReport
from app.policies.device_taints import sentence

Obj = dict[str, Any]


@dataclass(frozen=True)
class RuleInForce:
    """One stored DeviceTaintRule and its reach today."""

    name: str
    api_version: str
    uid: str = ""
    taint: str = ""
    effect: str = ""
    selector: str = ""
    says: str = ""
    """What it evicts or keeps off, in the admission warning's words."""
    consumers: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Namespace -> the pods (and pod groups) it evicts (NoExecute) or whose devices it keeps
    off new claims (NoSchedule); None rules list none (they do nothing)."""
    invalid: str = ""

    @property
    def evicts(self) -> bool:
        return self.effect == NO_EXECUTE

    def line(self) -> str:
        """`DeviceTaintRule drain (example.com/m=x:NoExecute; driver d): would evict ...`."""
        if self.invalid:
            return f"DeviceTaintRule {self.name}: not read: {self.invalid}"
        return f"DeviceTaintRule {self.name} ({self.taint}; {self.selector}): {self.says}"

    def in_namespace(self, namespace: str) -> str:
        """What it does to one namespace, for that namespace's report."""
        who = ", ".join(self.consumers.get(namespace, ()))
        verb = "evicts" if self.evicts else "keeps the devices of"
        return f"DeviceTaintRule {self.name} ({self.taint}) {verb} {who}"


def taint_rules(objects: Iterable[Obj]) -> list[Obj]:
    """The DeviceTaintRule objects among `objects` (any resource.k8s.io version)."""
    return [
        o
        for o in objects
        if o.get("kind") == KIND and str(o.get("apiVersion", "")).startswith("resource.k8s.io/")
    ]


def rules_in_force(rules: Iterable[Obj], view: ClusterView, policy: Policy) -> list[RuleInForce]:
    """Each rule's reach over `view` (its slices and allocated claims), by rule name."""
    read: list[tuple[Obj, TaintRule | None, str]] = []
    for obj in rules:
        try:
            read.append((obj, parse_taint_rule(obj), ""))
        except ObjectShapeError as exc:
            read.append((obj, None, str(exc)))
    if not read:
        return []
    holders = view.derived(DeviceHolders)
    index = None
    if any(r is not None and r.uses_cel for _, r, _ in read):
        engine = get_engine(policy.cel.backend)
        index = DeviceIndex(engine, CompileCache(policy.cel.cache_size))
        view.subscribe(index.on_change)
    found = [_in_force(obj, rule, why, view, (holders, index)) for obj, rule, why in read]
    return sorted(found, key=lambda r: r.name)


def _in_force(
    obj: Obj,
    rule: TaintRule | None,
    why: str,
    view: ClusterView,
    indexes: tuple[DeviceHolders, DeviceIndex | None],
) -> RuleInForce:
    meta = obj.get("metadata")
    name = str(meta.get("name", "?")) if isinstance(meta, dict) else "?"
    api_version = str(obj.get("apiVersion", ""))
    if rule is None:
        return RuleInForce(name, api_version, invalid=why)
    found = reach(rule, view, *indexes)
    problems = "; ".join(f"{path}: {message}" for path, message in found.problems + found.notes)
    consumers = (
        {ns: (*c.pods, *c.groups) for ns, c in found.by_namespace.items() if (c.pods or c.groups)}
        if rule.effect != "None"
        else {}
    )
    return RuleInForce(
        rule.name or name,
        api_version,
        rule.uid,
        rule.describe_taint(),
        rule.effect,
        rule.describe_selector(),
        sentence(found) + (f" ({problems})" if problems else ""),
        consumers,
    )


def add_to_reports(
    rules: Iterable[RuleInForce], reports: list[NamespaceReport], mode_of: Callable[[str], str]
) -> None:
    """Each rule's line in the report of every namespace it reaches (a namespace the report
    has no entry for gets one, with `mode_of(namespace)`)."""
    by_name = {r.namespace: r for r in reports}
    for rule in rules:
        for namespace in rule.consumers:
            entry = by_name.get(namespace)
            if entry is None:
                entry = by_name[namespace] = NamespaceReport(namespace, mode_of(namespace))
                reports.append(entry)
            entry.device_taints.append(rule.in_namespace(namespace))
    reports.sort(key=lambda r: r.namespace)
