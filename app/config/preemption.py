"""The policy's `preemption` section: saying what moving to DRA takes away.

kube-scheduler preempts lower-priority pods to free device-plugin GPUs (`nvidia.com/gpu` is a
node resource like CPU), but not DRA devices: the DynamicResources plugin has no preemption
(the Kubernetes DRA docs, "Limitations"; no release up to 1.37 does, app.cluster.release). A pod
that may preempt today and asks for GPUs loses that when it is translated or migrated to a
ResourceClaim: it waits until a device frees up by itself. The webhook says so (docs/translation.md,
"Preemption"):

- `warn` (default true): the warning on translation, beside the fix in dra-only and audit
  namespaces, in `migrate` and in `report`'s finding; false says nothing.
- `priorityClasses`: PriorityClasses as the admin declares them, for where the cluster view does
  not hold them (`migrate` and `report` without a cluster file, a webhook not granted to read
  priorityclasses). A class the view holds is taken from the view.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from app.config.base import StrictModel

PreemptionPolicy = Literal["PreemptLowerPriority", "Never"]


class DeclaredClass(StrictModel):
    """A PriorityClass, named in the policy: its fields as in `scheduling.k8s.io/v1`."""

    name: str = Field(min_length=1, max_length=253)
    value: int = Field(ge=-(2**31), le=2_000_001_000)
    preemption_policy: PreemptionPolicy = Field(
        default="PreemptLowerPriority", alias="preemptionPolicy"
    )
    global_default: bool = Field(default=False, alias="globalDefault")


class Preemption(StrictModel):
    """What the webhook says about preemption, and the classes it knows without a cluster."""

    warn: bool = True
    """Say that DRA does not preempt, where a pod that may preempt asks for GPUs."""
    priority_classes: tuple[DeclaredClass, ...] = Field(default=(), alias="priorityClasses")

    @field_validator("priority_classes")
    @classmethod
    def _unique(cls, classes: tuple[DeclaredClass, ...]) -> tuple[DeclaredClass, ...]:
        names = [c.name for c in classes]
        doubled = sorted({n for n in names if names.count(n) > 1})
        if doubled:
            raise ValueError(f"priority class named twice: {', '.join(doubled)}")
        if sum(c.global_default for c in classes) > 1:
            raise ValueError("more than one priority class is globalDefault")
        return classes
