"""Which nodes a ResourceSlice (or one of its devices) reaches.

Mirrors ``NodeMatches`` of upstream's ``GatherPools`` (k8s.io/dynamic-resource-allocation/
structured/internal/incubating/pools_incubating.go): ``nodeName``, ``allNodes`` or
``nodeSelector``, the selector evaluated as k8s.io/component-helpers/scheduling/corev1/
nodeaffinity does (``NewNodeSelector(...).Match(node)``):

- the terms are ORed; a term with neither ``matchExpressions`` nor ``matchFields`` selects
  nothing; within a term every requirement must hold;
- ``matchExpressions`` are label requirements: ``In`` (the label is set to one of the values),
  ``NotIn`` (it is unset or set to none of them), ``Exists``, ``DoesNotExist``, ``Gt`` and ``Lt``
  (the label is set and, read as a base-10 int64, greater or less than the one value);
- ``matchFields`` know ``metadata.name`` only (``In`` / ``NotIn`` one name).

The API server validates a slice's selectors (operators, value counts, integers for ``Gt`` /
``Lt``), so the scheduler's parse error (fatal to the pod) cannot arise from a stored slice; a
requirement that does not parse is taken here to match no node.

With the Node objects (their labels, from a metadata-only watch of Nodes) a node is its name and
labels, and the answer is exact. Without them (the webhook may not list Nodes, or a static file
holds none) the nodes are the names the slices give plus one anonymous node standing for every
other node, and a selector on labels is taken to match (:func:`reaches` with ``labels=None``):
the check must never call a claim impossible that the scheduler could place.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

__all__ = ["ANY_NODE", "LabelIndex", "Reach", "Selector", "named", "raw_devices", "reach_of"]

ANY_NODE: Final = ""
"""The anonymous node (without Node objects): any node no slice names (it sees allNodes and the
selectors that cannot be evaluated)."""
HOSTNAME: Final = "kubernetes.io/hostname"
NAME_FIELD: Final = "metadata.name"
_INT64: Final = re.compile(r"[+-]?[0-9]+")
_INT64_RANGE: Final = (-(1 << 63), (1 << 63) - 1)

Labels = Mapping[str, str]


def raw_devices(spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    devices = spec.get("devices")
    if not isinstance(devices, list):
        return []
    return [
        d.get("basic", d) if isinstance(d.get("basic"), Mapping) else d
        for d in devices
        if isinstance(d, Mapping)
    ]


def _int64(text: Any) -> int | None:
    """``strconv.ParseInt(text, 10, 64)``, or None where it fails."""
    if not isinstance(text, str) or not _INT64.fullmatch(text):
        return None
    value = int(text)
    return value if _INT64_RANGE[0] <= value <= _INT64_RANGE[1] else None


@dataclass(frozen=True, slots=True)
class _Requirement:
    key: str
    operator: str
    values: frozenset[str]
    number: int | None = None
    """The one value of ``Gt`` / ``Lt``."""

    def holds(self, labels: Labels) -> bool:
        """``labels.Requirement.Matches`` (apimachinery)."""
        value = labels.get(self.key)
        op = self.operator
        if op == "In":
            return value is not None and value in self.values
        if op == "NotIn":
            return value is None or value not in self.values
        if op == "Exists":
            return value is not None
        if op == "DoesNotExist":
            return value is None
        found = _int64(value)
        if found is None or self.number is None:
            return False
        return found > self.number if op == "Gt" else found < self.number

    def select(self, index: LabelIndex) -> set[str]:
        """The indexed nodes it holds for (what :meth:`holds` says of each, at once)."""
        op = self.operator
        if op in ("In", "NotIn"):
            found: set[str] = set()
            for value in self.values:
                found |= index.by_pair.get((self.key, value), set())
            return found if op == "In" else index.nodes - found
        having = index.by_key.get(self.key, set())
        if op == "Exists":
            return set(having)
        if op == "DoesNotExist":
            return index.nodes - having
        return {n for n in having if self.holds(index.labels[n])}


@dataclass(frozen=True, slots=True)
class _Term:
    labels: tuple[_Requirement, ...] | None
    """None: the term has no matchExpressions (labels are not checked)."""
    fields: tuple[tuple[str, str], ...] | None
    """(operator, name) of each matchFields requirement; None when it has none."""
    raw: Mapping[str, Any]

    def holds(self, node: str, labels: Labels) -> bool:
        if self.labels is not None and not all(r.holds(labels) for r in self.labels):
            return False
        if self.fields is not None and node:
            return all((node == name) == (op == "In") for op, name in self.fields)
        return True

    def select(self, index: LabelIndex) -> set[str]:
        found = set(index.nodes)
        for requirement in self.labels or ():
            found &= requirement.select(index)
            if not found:
                return found
        for op, name in self.fields or ():
            found = found & {name} if op == "In" else found - {name}
        return found


def _requirement(raw: Any) -> _Requirement | None:
    if not isinstance(raw, Mapping) or not isinstance(raw.get("key"), str):
        return None
    op = raw.get("operator")
    values = raw.get("values") or []
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        return None
    if op in ("In", "NotIn"):
        return _Requirement(raw["key"], op, frozenset(values)) if values else None
    if op in ("Exists", "DoesNotExist"):
        return None if values else _Requirement(raw["key"], op, frozenset())
    if op in ("Gt", "Lt") and len(values) == 1:
        number = _int64(values[0])
        return None if number is None else _Requirement(raw["key"], op, frozenset(), number)
    return None


def _term(raw: Mapping[str, Any]) -> _Term | None:
    """The parsed term; None when it selects nothing (empty, or it does not parse)."""
    expressions = raw.get("matchExpressions") or []
    fields = raw.get("matchFields") or []
    if not isinstance(expressions, list) or not isinstance(fields, list):
        return None
    if not expressions and not fields:
        return None  # "nil or empty term selects no objects"
    requirements = [_requirement(r) for r in expressions]
    parsed_fields: list[tuple[str, str]] = []
    for r in fields:
        values = r.get("values") if isinstance(r, Mapping) else None
        if (
            not isinstance(r, Mapping)
            or r.get("key") != NAME_FIELD
            or r.get("operator") not in ("In", "NotIn")
            or not isinstance(values, list)
            or len(values) != 1
            or not isinstance(values[0], str)
        ):
            return None
        parsed_fields.append((r["operator"], values[0]))
    if any(r is None for r in requirements):
        return None
    return _Term(
        tuple(r for r in requirements if r is not None) if expressions else None,
        tuple(parsed_fields) if fields else None,
        raw,
    )


@dataclass(frozen=True, slots=True)
class Selector:
    """A parsed ``nodeSelector``."""

    terms: tuple[_Term, ...]

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> Selector:
        terms = raw.get("nodeSelectorTerms")
        parsed = (
            (_term(t) for t in terms if isinstance(t, Mapping)) if isinstance(terms, list) else ()
        )
        return cls(tuple(t for t in parsed if t is not None))

    def matches(self, node: str, labels: Labels | None) -> bool:
        """``NodeSelector.Match``; without labels, whether it may match (see the module)."""
        if labels is not None:
            return any(t.holds(node, labels) for t in self.terms)
        return any(_unknown_term(t.raw, node) is not False for t in self.terms)

    def select(self, index: LabelIndex) -> set[str]:
        """The indexed nodes it matches: :meth:`matches` for all of them at once."""
        found: set[str] = set()
        for term in self.terms:
            found |= term.select(index)
        return found


def _unknown_term(term: Mapping[str, Any], node: str) -> bool | None:
    """A term without the node's labels: True, False, or None when it depends on them. Only
    the node's name is known (``metadata.name``, and ``kubernetes.io/hostname`` taken as it)."""
    outcome: bool | None = True
    for group, known in (("matchFields", NAME_FIELD), ("matchExpressions", HOSTNAME)):
        for requirement in term.get(group) or ():
            if not isinstance(requirement, Mapping):
                continue
            operator = requirement.get("operator")
            if requirement.get("key") != known or operator not in ("In", "NotIn"):
                outcome = None
                continue
            # the anonymous node is none of the named ones
            found = node != ANY_NODE and node in (requirement.get("values") or ())
            if found != (operator == "In"):
                return False
    return outcome


@dataclass(frozen=True, slots=True)
class Reach:
    """How a slice or a device selects its nodes: one of ``nodeName``, ``allNodes``,
    ``nodeSelector`` (``NodeMatches``)."""

    node_name: str = ""
    all_nodes: bool = False
    selector: Selector | None = None

    def matches(self, node: str, labels: Labels | None) -> bool:
        """``NodeMatches(node, nodeName, allNodes, nodeSelector)``; ``labels`` None: the
        node's labels are not known (the anonymous node, or no Node objects)."""
        if self.node_name:
            return self.node_name == node
        if self.all_nodes:
            return True
        if self.selector is not None:
            return self.selector.matches(node, labels)
        return False


class LabelIndex:
    """Nodes by label, to find the nodes a selector matches without asking each node (a build
    over thousands of Nodes and many rack-level slices)."""

    def __init__(self, labels: Mapping[str, Labels], nodes: Iterable[str]) -> None:
        self.labels = labels
        self.nodes = set(nodes)
        self.by_pair: dict[tuple[str, str], set[str]] = {}
        self.by_key: dict[str, set[str]] = {}
        for node in self.nodes:
            for key, value in labels.get(node, {}).items():
                self.by_pair.setdefault((key, value), set()).add(node)
                self.by_key.setdefault(key, set()).add(node)

    def reached(self, reach: Reach) -> set[str]:
        """The indexed nodes ``reach`` matches."""
        if reach.node_name:
            return {reach.node_name} & self.nodes
        if reach.all_nodes:
            return set(self.nodes)
        if reach.selector is not None:
            return reach.selector.select(self)
        return set()


def reach_of(holder: Mapping[str, Any]) -> Reach | None:
    """The node selection of a slice or device; None when it sets none of the three (a slice
    with ``perDeviceNodeSelection``, or one this version does not know: skipped upstream)."""
    name = holder.get("nodeName")
    if isinstance(name, str) and name:
        return Reach(node_name=name)
    if holder.get("allNodes") is True:
        return Reach(all_nodes=True)
    selector = holder.get("nodeSelector")
    if isinstance(selector, Mapping):
        return Reach(selector=Selector.parse(selector))
    return None


def named(holder: Mapping[str, Any]) -> Iterable[str]:
    """The node names a slice or device names (without Node objects, these are the nodes)."""
    name = holder.get("nodeName")
    if isinstance(name, str) and name:
        yield name
    selector = holder.get("nodeSelector")
    terms = selector.get("nodeSelectorTerms") if isinstance(selector, Mapping) else None
    for term in terms if isinstance(terms, list) else ():
        if not isinstance(term, Mapping):
            continue
        for group, known in (("matchFields", NAME_FIELD), ("matchExpressions", HOSTNAME)):
            for requirement in term.get(group) or ():
                if (
                    isinstance(requirement, Mapping)
                    and requirement.get("key") == known
                    and requirement.get("operator") == "In"
                ):
                    yield from (v for v in requirement.get("values") or () if isinstance(v, str))
