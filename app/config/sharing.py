"""Sharing rules: the GPU-sharing names of device plugins, as consumable-capacity requests.

GPU-sharing device plugins and schedulers (HAMi, Volcano vGPU, Alibaba gpushare, NVIDIA
time-slicing and MPS) each invent resource names for "a share of a GPU". DRA says the same with
one request on a DeviceClass of devices that allow multiple allocations
(`allowMultipleAllocations: true`, KEP-5075): `count` shares, each asking for amounts of the
device's capacities (`exactly.capacity.requests`). A rule says how one family of names maps:

- `count`: the name whose value is the number of shares (`nvidia.com/gpu` for HAMi); absent,
  one share. On its own it makes a share request only when no `mappings` rule maps it
  (`nvidia.com/gpu` alone stays a whole GPU);
- `capacities`: the names that become capacity requests, each with the capacity it fills, the
  unit its number is in (`Mi` for MiB) or, for a percentage, the device size it is a percentage
  of (`percentOf`). `capacity` may list candidates (`[cores, compute]`: HAMi's devices
  publish `cores`, the dra-example-driver's `compute`): the first one some shareable device of
  the class publishes is asked for, and where none does the name is removed with a warning. An
  entry without `capacity` names what DRA cannot express: it is removed with a warning.

docs/sharing.md writes the defaults out for users.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from app.config.base import StrictModel as _Model

_QUALIFIED = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
"""A capacity name as `capacity.requests` keys it: an optional domain and `/`, then a C-like
name (the API server takes what a device publishes: letters, digits, `-`, `_`, `.`)."""

_SIZE = re.compile(r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|k|M|G|T|P)?$")
"""A device size as an admin writes it (80Gi, 40000Mi): a positive decimal quantity."""

Unit = Literal["", "Ki", "Mi", "Gi", "Ti", "k", "M", "G"]


class SharedCapacity(_Model):
    """One legacy name of a sharing rule that becomes a capacity request (or is dropped)."""

    resource: str = Field(min_length=1)
    capacity: str | tuple[str, ...] | None = None
    """The device capacity the amount is asked of (`memory`); a list: candidates, the first
    that the class's devices publish (a compute limit: `cores` or `compute`), none published:
    removed with a warning; None: DRA has no way to say it, removed with a warning."""
    unit: Unit = ""
    """What the legacy number counts: `Mi` (HAMi, Volcano: MiB), `Gi` (gpushare: GiB), or
    `""` for a plain number (time-slicing replicas -> `shares`)."""
    percent: bool = False
    """The number is a percentage (1-100) of the device's capacity, made absolute with
    `percentOf`; without it the pod is denied naming the key to add."""
    percent_of: str | None = Field(default=None, alias="percentOf")
    """The size of the class's devices (80Gi) that a percentage is of."""
    select_size: bool = Field(default=False, alias="selectSize")
    """Also pin the request to devices of exactly that size (a CEL selector on the capacity),
    for a class whose devices differ in size."""

    @field_validator("capacity")
    @classmethod
    def _qualified(cls, value: str | tuple[str, ...] | None) -> str | tuple[str, ...] | None:
        names = (value,) if isinstance(value, str) else value or ()
        for name in names:
            if not _QUALIFIED.match(name):
                raise ValueError(
                    f"{name!r} is not a capacity name (an optional domain/ and a name)"
                )
        if isinstance(value, tuple) and (not value or len(set(value)) < len(value)):
            raise ValueError("a list of capacities names each candidate once, and at least one")
        return value

    @property
    def candidates(self) -> tuple[str, ...]:
        """The capacities a list names, in order; () for a single capacity or none."""
        return self.capacity if isinstance(self.capacity, tuple) else ()

    @field_validator("percent_of")
    @classmethod
    def _quantity(cls, value: str | None) -> str | None:
        digits = (value or "").rstrip("KMGTPik")
        if value is not None and (not _SIZE.match(value) or not set(digits) - {"0", "."}):
            raise ValueError(f"{value!r} is not a positive size such as 80Gi")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> SharedCapacity:
        if self.capacity is None and (self.percent or self.percent_of or self.unit):
            raise ValueError(f"{self.resource}: unit and percent need a capacity")
        if self.percent and self.unit:
            raise ValueError(f"{self.resource}: a percentage has no unit (use percentOf)")
        if self.percent_of is not None and not self.percent:
            raise ValueError(f"{self.resource}: percentOf needs percent: true")
        if self.select_size and self.percent_of is None:
            raise ValueError(f"{self.resource}: selectSize needs percentOf")
        if self.candidates and self.percent:
            raise ValueError(f"{self.resource}: a list of capacities takes amounts, not percent")
        return self


class SharingRule(_Model):
    """One family of GPU-sharing names -> one consumable-capacity request per container."""

    name: str = Field(min_length=1, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=63)
    device_class_name: str = Field(alias="deviceClassName", min_length=1)
    """A class whose devices allow multiple allocations (translation also adds the selector
    `device.allowMultipleAllocations`, so a whole device is never given for a share)."""
    selectors: tuple[str, ...] = ()
    count: str | None = None
    capacities: tuple[SharedCapacity, ...] = ()
    driver: str = "gpu.nvidia.com"
    """The domain of unqualified capacity names in CEL (`device.capacity["<driver>"].memory`),
    used by `selectSize`."""

    @model_validator(mode="after")
    def _asks_for_something(self) -> SharingRule:
        if self.count is None and not self.capacities:
            raise ValueError(f"sharing rule {self.name}: needs a count or capacities")
        seen: set[str] = {self.count} if self.count else set()
        for entry in self.capacities:
            if entry.resource in seen:
                raise ValueError(f"sharing rule {self.name}: {entry.resource} is used twice")
            seen.add(entry.resource)
        return self

    @property
    def names(self) -> tuple[str, ...]:
        """Every legacy name the rule reads, count first."""
        return ((self.count,) if self.count else ()) + tuple(c.resource for c in self.capacities)


SHARED_CLASS = "gpu-shared.nvidia.com"
"""The default rules' DeviceClass: NVIDIA GPUs that allow multiple allocations."""

_MEMORY_MIB = {"capacity": "memory", "unit": "Mi"}
_COMPUTE = {"capacity": ["cores", "compute"]}
"""A compute limit (a percentage of the GPU's cores): HAMi's devices publish `cores`, the
dra-example-driver's `compute` (0-100); the NVIDIA driver publishes neither."""

DEFAULT_SHARING = (
    SharingRule.model_validate(
        {
            "name": "hami",
            "deviceClassName": SHARED_CLASS,
            "count": "nvidia.com/gpu",
            "capacities": [
                {"resource": "nvidia.com/gpumem", **_MEMORY_MIB},
                {"resource": "nvidia.com/gpumem-percentage", "capacity": "memory", "percent": True},
                {"resource": "nvidia.com/gpucores", **_COMPUTE},
            ],
        }
    ),
    SharingRule.model_validate(
        {
            "name": "volcano-vgpu",
            "deviceClassName": SHARED_CLASS,
            "count": "volcano.sh/vgpu-number",
            "capacities": [
                {"resource": "volcano.sh/vgpu-memory", **_MEMORY_MIB},
                {"resource": "volcano.sh/gpu-memory", **_MEMORY_MIB},
                {"resource": "volcano.sh/vgpu-cores", **_COMPUTE},
            ],
        }
    ),
    SharingRule.model_validate(
        {
            "name": "gpushare",
            "deviceClassName": SHARED_CLASS,
            "capacities": [{"resource": "aliyun.com/gpu-mem", "capacity": "memory", "unit": "Gi"}],
        }
    ),
    SharingRule.model_validate(
        {
            "name": "time-slicing",
            "deviceClassName": SHARED_CLASS,
            "capacities": [{"resource": "nvidia.com/gpu.shared", "capacity": "shares"}],
        }
    ),
)


def unique_names(rules: tuple[SharingRule, ...]) -> tuple[SharingRule, ...]:
    """Rule names are unique, and no legacy name belongs to two rules."""
    seen: set[str] = set()
    owner: dict[str, str] = {}
    for rule in rules:
        if rule.name in seen:
            raise ValueError(f"sharing rule name {rule.name!r} is used twice")
        seen.add(rule.name)
        for name in rule.names:
            if name in owner:
                raise ValueError(
                    f"{name} is in sharing rules {owner[name]} and {rule.name}: one rule each"
                )
            owner[name] = rule.name
    return rules
