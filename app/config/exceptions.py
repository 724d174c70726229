"""Policy exceptions: the one workload that cannot move yet, allowed until a date.

An exception is the admin's, written in the policy file (never a label or annotation a user
sets on their own object): it names the namespaces (namespaceSelector) and the objects
(objectSelector, over the labels of the pods the object makes), optionally the kinds and the
container names it covers, why (`reason`) and until when (`until`, a date). A matching object
is allowed in dra-only namespaces and left untranslated in translate namespaces, with a warning
naming the exception and its end date; `app.policies.exceptions` evaluates them.

`until` is a calendar date, YYYY-MM-DD, and includes that whole day in UTC: `until: 2026-12-31`
applies up to 2026-12-31T23:59:59Z and no longer from 2027-01-01T00:00:00Z.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from app.config.base import LabelSelector, StrictModel, dns_label_name

ExceptionKind = Literal[
    "Pod",
    "Deployment",
    "StatefulSet",
    "DaemonSet",
    "ReplicaSet",
    "Job",
    "CronJob",
    "ReplicationController",
    "PodTemplate",
]
"""The pod-bearing kinds: those the dra-only and translate checks look at."""

MAX_EXCEPTIONS = 50
"""Each becomes a condition of the chart's admission policy and a webhook entry: kept small."""

_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_CONTAINER = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


class PolicyException(StrictModel):
    """One exception from the dra-only and translate rules, valid until the end of `until`."""

    name: str = Field(min_length=1, max_length=50)
    """Lower-case letters, digits and '-': it is a metric label value and part of the names
    the chart renders."""
    namespace_selector: LabelSelector = Field(
        default_factory=LabelSelector, alias="namespaceSelector"
    )
    """Namespaces by their labels (`kubernetes.io/metadata.name` selects one by name)."""
    object_selector: LabelSelector = Field(default_factory=LabelSelector, alias="objectSelector")
    """Objects by the labels of the pods they make: a Pod's own labels, a workload's pod
    template labels, so a Deployment is excepted exactly when its pods are."""
    kinds: tuple[ExceptionKind, ...] = ()
    """Kinds it covers; empty: every pod-bearing kind."""
    containers: tuple[str, ...] = ()
    """Container names (of any container kind) whose legacy requests it covers; empty: all."""
    until: dt.date
    """The last day (UTC) it applies."""
    reason: str = Field(min_length=1, max_length=256)
    """Why, for the people who read the warning and the report (a ticket, a vendor name)."""

    @field_validator("name")
    @classmethod
    def _dns_label(cls, value: str) -> str:
        return dns_label_name(value)

    @field_validator("containers")
    @classmethod
    def _container_names(cls, names: tuple[str, ...]) -> tuple[str, ...]:
        for name in names:
            if not _CONTAINER.match(name) or len(name) > 63:
                raise ValueError(f"{name!r} is not a container name")
        return names

    @field_validator("until", mode="before")
    @classmethod
    def _a_date(cls, value: Any) -> Any:
        """A date written YYYY-MM-DD: YAML gives a date (unquoted) or a string (quoted); a
        timestamp, a number or another format is refused rather than guessed at."""
        if isinstance(value, dt.datetime):
            raise ValueError("must be a date (YYYY-MM-DD), not a timestamp")
        if isinstance(value, dt.date):
            return value
        if not isinstance(value, str) or not _DATE.match(value):
            raise ValueError(f"{value!r} is not a date written YYYY-MM-DD")
        try:
            return dt.date.fromisoformat(value)
        except ValueError as exc:
            raise ValueError(f"{value!r} is not a date: {exc}") from None

    @model_validator(mode="after")
    def _selects_something(self) -> PolicyException:
        if _empty(self.namespace_selector) and _empty(self.object_selector):
            raise ValueError(
                f"exception {self.name!r} selects every object in every namespace; give it a "
                "namespaceSelector or an objectSelector"
            )
        return self


def _empty(selector: LabelSelector) -> bool:
    return not selector.match_labels and not selector.match_expressions


def unique_exception_names(
    exceptions: tuple[PolicyException, ...],
) -> tuple[PolicyException, ...]:
    """Exception names are the `exception` label of a metric and name them in warnings."""
    if len(exceptions) > MAX_EXCEPTIONS:
        raise ValueError(f"at most {MAX_EXCEPTIONS} exceptions, not {len(exceptions)}")
    seen: set[str] = set()
    for exception in exceptions:
        if exception.name in seen:
            raise ValueError(f"exception name {exception.name!r} is used twice")
        seen.add(exception.name)
    return exceptions
