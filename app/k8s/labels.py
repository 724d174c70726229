"""Kubernetes label selectors (matchLabels + matchExpressions) over a label map.

The policy file picks namespaces by their labels the way a webhook configuration's
`namespaceSelector` does, with the same meaning: every matchLabels pair and every expression must
hold; an empty selector matches every namespace.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from app.config.base import LabelSelector

Operator = Literal["In", "NotIn", "Exists", "DoesNotExist"]
OPERATORS: tuple[Operator, ...] = ("In", "NotIn", "Exists", "DoesNotExist")


@dataclass(frozen=True, slots=True)
class Requirement:
    """One matchExpressions entry."""

    key: str
    operator: Operator
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.operator == "Exists":
            return self.key in labels
        if self.operator == "DoesNotExist":
            return self.key not in labels
        value = labels.get(self.key)
        if self.operator == "In":
            return value is not None and value in self.values
        # NotIn: like Kubernetes, a namespace without the key is not "in" the set, so it matches.
        return value is None or value not in self.values

    def __str__(self) -> str:
        if self.operator == "Exists":
            return self.key
        if self.operator == "DoesNotExist":
            return f"!{self.key}"
        op = "in" if self.operator == "In" else "notin"
        return f"{self.key} {op} ({','.join(sorted(self.values))})"


@dataclass(frozen=True, slots=True)
class Selector:
    """A compiled label selector; `matches` is a few dict lookups."""

    match_labels: tuple[tuple[str, str], ...] = ()
    requirements: tuple[Requirement, ...] = ()

    @classmethod
    def build(
        cls,
        match_labels: Mapping[str, str] | None = None,
        expressions: Iterable[tuple[str, str, Iterable[str]]] = (),
    ) -> Selector:
        """From matchLabels and (key, operator, values) triples; raises ValueError if invalid."""
        requirements = []
        for index, (key, operator, values) in enumerate(expressions):
            where = f"matchExpressions[{index}]"
            if operator not in OPERATORS:
                raise ValueError(f"{where}.operator: {operator!r} is not one of {list(OPERATORS)}")
            value_set = frozenset(values)
            if operator in ("In", "NotIn") and not value_set:
                raise ValueError(f"{where}.values: must not be empty for operator {operator}")
            if operator in ("Exists", "DoesNotExist") and value_set:
                raise ValueError(f"{where}.values: must be empty for operator {operator}")
            requirements.append(Requirement(key, operator, value_set))
        return cls(tuple(sorted((match_labels or {}).items())), tuple(requirements))

    @classmethod
    def from_policy(cls, selector: LabelSelector) -> Selector:
        """From a policy file's label selector (already validated by the config model)."""
        return cls.build(
            selector.match_labels,
            ((r.key, r.operator, r.values) for r in selector.match_expressions),
        )

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any] | None) -> Selector:
        """From a raw `metav1.LabelSelector` dict; raises ValueError naming the bad field."""
        if raw is None:
            return EVERYTHING
        labels = raw.get("matchLabels")
        if labels is None:
            labels = {}
        if not isinstance(labels, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in labels.items()
        ):
            raise ValueError("matchLabels: must map strings to strings")
        expressions = raw.get("matchExpressions")
        if expressions is None:
            expressions = []
        if not isinstance(expressions, list):
            raise ValueError("matchExpressions: must be a list")
        triples = []
        for index, item in enumerate(expressions):
            if not isinstance(item, dict) or not isinstance(item.get("key"), str):
                raise ValueError(f"matchExpressions[{index}]: must be an object with a key")
            values = item.get("values")
            if values is None:
                values = []
            if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
                raise ValueError(f"matchExpressions[{index}].values: must be a list of strings")
            triples.append((item["key"], str(item.get("operator")), values))
        return cls.build(labels, triples)

    def matches(self, labels: Mapping[str, str]) -> bool:
        for key, value in self.match_labels:
            if labels.get(key) != value:
                return False
        return all(req.matches(labels) for req in self.requirements)

    @property
    def empty(self) -> bool:
        return not self.match_labels and not self.requirements

    def __str__(self) -> str:
        parts = [f"{k}={v}" for k, v in self.match_labels] + [str(r) for r in self.requirements]
        return ",".join(parts) if parts else "<all namespaces>"


EVERYTHING = Selector()
"""The empty selector: matches every label set."""
