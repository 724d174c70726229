"""The pieces of the policy file that several of its sections use: the strict model base and
the Kubernetes label selector (`app.k8s.labels.Selector` is its compiled form)."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class StrictModel(BaseModel):
    """Frozen, unknown keys refused, fields by their YAML alias or their Python name."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


class LabelSelectorRequirement(StrictModel):
    """One matchExpressions entry."""

    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _values_fit_operator(self) -> LabelSelectorRequirement:
        if self.operator in ("In", "NotIn") and not self.values:
            raise ValueError(f"values must not be empty for operator {self.operator}")
        if self.operator in ("Exists", "DoesNotExist") and self.values:
            raise ValueError(f"values must be empty for operator {self.operator}")
        return self


class LabelSelector(StrictModel):
    """A Kubernetes label selector (matchLabels and matchExpressions, ANDed)."""

    match_labels: dict[str, str] = Field(default_factory=dict, alias="matchLabels")
    match_expressions: tuple[LabelSelectorRequirement, ...] = Field(
        default=(), alias="matchExpressions"
    )


_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def dns_label_name(value: str) -> str:
    """A policy entry's name (an exception's, a DeviceClass allow-list's): what a metric label
    and a message can carry as it is; raises ValueError for pydantic to report with its key."""
    if not _DNS_LABEL.match(value):
        raise ValueError(
            f"{value!r} must be lower-case letters, digits and '-', starting and ending "
            "with a letter or digit"
        )
    return value
