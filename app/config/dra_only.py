"""The policy's `draOnly` section: what dra-only namespaces refuse, and one choice about the
scheduler's own path for extended resources.

Since Kubernetes 1.36 (KEP-5004, gate DRAExtendedResource, beta and on) a DeviceClass with
`spec.extendedResourceName: nvidia.com/gpu` makes the scheduler serve a pod's plain
`nvidia.com/gpu: N` from that class's devices on every node where no device plugin advertises
the name. Whether a dra-only namespace lets such a *mapped name* through is `mappedNames`:

- `deny` (the default, as before): a legacy name is an offence whatever serves it; the fix
  names the claims that replace it;
- `allow`: a legacy name some DeviceClass maps is not an offence. The pod is admitted with a
  warning that names the class, and that a node still running the device plugin for the name
  would serve the pod there, outside DRA (the scheduler prefers a node's device plugin, and the
  webhook cannot see which nodes still run one: it never reads Node status).

A resource name that is almost a legacy name (`nvidia.con/gpu`, `nvidia.com/GPU`,
`nvidia.com/gpus`: app/translation/near_miss.py) is no legacy request, yet no node serves it:
the pod would wait Pending forever. It is warned of in every mode ("did you mean"); whether a
dra-only namespace also denies it is `nearMisses` (`warn`, the default, or `deny`).

Audit namespaces report what dra-only would do under the same choice. Translate namespaces
translate legacy names whatever this says.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from app.config.base import StrictModel

MappedNames = Literal["deny", "allow"]
NearMisses = Literal["deny", "warn"]


class DraOnly(StrictModel):
    """dra-only enforcement options."""

    mapped_names: MappedNames = Field(default="deny", alias="mappedNames")
    """A legacy name that a DeviceClass maps through spec.extendedResourceName: deny (an offence
    like any legacy name) or allow (admitted with a warning)."""
    near_misses: NearMisses = Field(default="warn", alias="nearMisses")
    """A name close to a legacy one that nothing serves (a typo): warn (in every mode, the
    default) or deny in dra-only namespaces (warned elsewhere)."""
    allow_device_class_extended_resources: bool = Field(
        default=False, alias="allowDeviceClassExtendedResources"
    )
    """Deprecated: `true` is `mappedNames: allow`, which it sets (kept so that existing policy
    files still load)."""
    audit_warned_by_admission_policy: bool = Field(
        default=False, alias="auditWarnedByAdmissionPolicy"
    )
    """Set by the chart when its ValidatingAdmissionPolicy enforces the rule: in audit
    namespaces that policy already warns on CREATE of a Pod or a built-in workload, so the
    webhook (which still sees workloads, for quotas and translation) counts the finding but does
    not warn a second time; objects a policy exception selects are still its own."""

    @model_validator(mode="before")
    @classmethod
    def _deprecated_key(cls, data: Any) -> Any:
        """`allowDeviceClassExtendedResources: true` becomes `mappedNames: allow`; with an
        explicit `mappedNames: deny` beside it the file says two things, which is refused."""
        if not isinstance(data, dict):
            return data
        old = next(
            (
                data[k]
                for k in (
                    "allowDeviceClassExtendedResources",
                    "allow_device_class_extended_resources",
                )
                if k in data
            ),
            None,
        )
        if old is not True:
            return data
        new = data.get("mappedNames", data.get("mapped_names"))
        if new is not None and new != "allow":
            raise ValueError(
                "allowDeviceClassExtendedResources: true (deprecated) means mappedNames: allow, "
                f"but mappedNames is {new!r}: keep mappedNames only"
            )
        key = "mapped_names" if "mapped_names" in data else "mappedNames"
        return {**data, key: "allow"}

    @property
    def allows_mapped_names(self) -> bool:
        """Whether a legacy name some DeviceClass maps is let through dra-only namespaces."""
        return self.mapped_names == "allow"
