"""The policy's `translation` section: how translate namespaces rewrite legacy requests.

Read by `app.translation` (the plan) and by the chart (charts/dra-webhook: the admission policy
renders which names translation may leave to the scheduler, from `leaveMapped` and the
`mappings` rules' `leaveToScheduler`).
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, ValidationInfo, field_validator

from app.config.base import StrictModel as _Model

_DNS_LABEL_PREFIX = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


class Translation(_Model):
    """Translation options (namespaces in the translate mode)."""

    translate_workloads: bool = Field(default=False, alias="translateWorkloads")
    """Also rewrite the pod templates of workloads (off: GitOps tools would see drift)."""
    init_containers: Literal["share", "separate"] = Field(default="share", alias="initContainers")
    """share: init containers use the app containers' devices; separate: a claim of their own."""
    template_name_prefix: str = Field(default="dra", alias="templateNamePrefix", max_length=16)
    """ResourceClaimTemplates are named <prefix>-<class>-<count>-<hash of their content>."""
    claim_name_prefix: str = Field(default="", alias="claimNamePrefix", max_length=16)
    """Prepended to the pod-level claim names translation adds (<prefix>-gpu-cuda)."""
    max_claims_per_pod: int = Field(default=32, alias="maxClaimsPerPod", ge=1, le=1024)
    """A pod whose translation would add more resource claims than this is denied."""
    max_templates_per_pod: int = Field(default=8, alias="maxTemplatesPerPod", ge=1, le=256)
    """A pod whose translation would need more ResourceClaimTemplates (API creates) is denied."""
    max_templates_per_namespace: int = Field(
        default=100, alias="maxTemplatesPerNamespace", ge=1, le=10000
    )
    """A pod whose translation needs a new ResourceClaimTemplate in a namespace that already
    holds this many made by dra-webhook is denied (unused ones are garbage-collected)."""
    leave_mapped: bool = Field(default=False, alias="leaveMapped")
    """Leave a legacy name as written where a DeviceClass maps it (spec.extendedResourceName,
    Kubernetes 1.36+) and the in-tree path gives the pod what translation would: the scheduler
    serves it from the class. A `mappings` rule's `leaveToScheduler` overrides it for its names."""
    shares_without_capacity: Literal["deny", "wholeDevices"] = Field(
        default="deny", alias="sharesWithoutCapacity"
    )
    """Where the API server does not keep consumable-capacity requests (Kubernetes 1.34 and
    1.35 by default: app.cluster.release), a GPU share cannot be written: deny names the release
    and the gate; wholeDevices gives each share a whole device of the rule's DeviceClass, and says
    so in a warning."""

    @field_validator("template_name_prefix", "claim_name_prefix")
    @classmethod
    def _dns_label(cls, value: str, info: ValidationInfo) -> str:
        if value and not _DNS_LABEL_PREFIX.match(value):
            raise ValueError(
                f"{value!r} must be lower-case letters, digits and '-', starting and ending "
                "with a letter or digit"
            )
        if not value and info.field_name == "template_name_prefix":
            raise ValueError("must not be empty")
        return value
