"""The tenancy sections of the policy file: who may turn DRA admin access on (`adminAccess`), and
which DeviceClasses the namespaces an entry selects may use (`deviceClasses`).

Both are off by default. `app.policies.admin_access` and `app.policies.device_classes` enforce
them; the chart renders `adminAccess` into a ValidatingAdmissionPolicy too, so its user and
group names become CEL string literals there and are held to what a literal can carry.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator

from app.config.base import LabelSelector, StrictModel, dns_label_name

ADMIN_ACCESS_LABEL = "resource.kubernetes.io/admin-access"
"""The namespace label Kubernetes requires (value "true") before a claim in it may ask for
`adminAccess: true` (DRAAdminAccess)."""

_LITERAL_UNSAFE = re.compile(r"['\\\n\r]")
_CLASS_PATTERN = re.compile(r"^[a-z0-9.*?-]+$")
"""A DeviceClass name (a DNS subdomain) with shell wildcards: `*` any run, `?` one character."""

DEFAULT_REQUEST_ACCESS = (
    "ask your cluster administrators to add your user or one of your groups to adminAccess.users "
    "or adminAccess.groups in the dra-webhook policy"
)


def _literal_safe(values: tuple[str, ...]) -> tuple[str, ...]:
    for value in values:
        if not value or _LITERAL_UNSAFE.search(value):
            raise ValueError(
                f"{value!r}: must be non-empty, without quote, backslash or line break (it is "
                "rendered into the chart's ValidatingAdmissionPolicy as a CEL string)"
            )
    return values


class AdminAccess(StrictModel):
    """Who may set, change or remove the admin-access label of a namespace.

    A claim with `adminAccess: true` sees every device of its class, including the ones other
    tenants hold; Kubernetes allows it only in namespaces labelled
    `resource.kubernetes.io/admin-access: "true"`, which anyone allowed to patch their own
    namespace can set. With `enabled`, only the users and groups listed here may change that
    label (on Namespace CREATE and UPDATE), and claims asking for admin access are allowed only
    in the namespaces `namespaceSelector` selects.
    """

    enabled: bool = False
    users: tuple[str, ...] = ()
    """User names (the admission request's `userInfo.username`)."""
    groups: tuple[str, ...] = ()
    """Groups, any one of which is enough (`userInfo.groups`)."""
    namespace_selector: LabelSelector | None = Field(default=None, alias="namespaceSelector")
    """Namespaces whose ResourceClaims and templates may ask for admin access (besides the
    label Kubernetes requires); unset: wherever the label is."""
    request_access: str = Field(
        default=DEFAULT_REQUEST_ACCESS, alias="requestAccess", min_length=1, max_length=300
    )
    """How to get access: the end of every denial (a ticket queue, a channel, a group to join)."""

    _users = field_validator("users", "groups")(_literal_safe)

    @field_validator("request_access")
    @classmethod
    def _text_literal_safe(cls, value: str) -> str:
        _literal_safe((value,))
        return value


class DeviceClassAllowList(StrictModel):
    """The DeviceClasses the namespaces `namespaceSelector` selects may use.

    A namespace several entries select may use every class any of them allows; a namespace no
    entry selects is not restricted. `allowed` holds class names and shell patterns (`*`, `?`).
    """

    name: str = Field(min_length=1, max_length=50)
    """Lower-case letters, digits and '-': named in every denial it causes."""
    namespace_selector: LabelSelector = Field(
        default_factory=LabelSelector, alias="namespaceSelector"
    )
    allowed: tuple[str, ...]
    """DeviceClass names or patterns (`gpu.nvidia.com`, `*.example.com`); empty allows none."""
    action: Literal["deny", "warn"] = "deny"
    """deny, or warn (as every entry does in namespaces of the audit mode)."""

    @field_validator("name")
    @classmethod
    def _dns_label(cls, value: str) -> str:
        return dns_label_name(value)

    @field_validator("allowed")
    @classmethod
    def _patterns(cls, values: tuple[str, ...]) -> tuple[str, ...]:
        for value in values:
            if not _CLASS_PATTERN.match(value) or len(value) > 253:
                raise ValueError(
                    f"{value!r} is not a DeviceClass name or pattern (lower-case letters, "
                    "digits, '.', '-', and the wildcards * and ?)"
                )
        return values


def unique_allow_list_names(
    entries: tuple[DeviceClassAllowList, ...],
) -> tuple[DeviceClassAllowList, ...]:
    seen: set[str] = set()
    for entry in entries:
        if entry.name in seen:
            raise ValueError(f"deviceClasses entry name {entry.name!r} is used twice")
        seen.add(entry.name)
    return entries


DEFAULT_TAINT_ACCESS = (
    "ask your cluster administrators to add your user or one of your groups to "
    "deviceTaints.users or deviceTaints.groups in the dra-webhook policy"
)


def _names(values: tuple[str, ...]) -> tuple[str, ...]:
    for value in values:
        if not value or value.strip() != value:
            raise ValueError(f"{value!r}: must be non-empty, without surrounding spaces")
    return values


class DeviceTaints(StrictModel):
    """Who may write a DeviceTaintRule that evicts pods, and what nobody may write.

    A DeviceTaintRule (cluster-scoped, `resource.k8s.io`) with effect NoExecute evicts every pod
    whose claims hold a device it selects; one with an empty selector selects every device of
    the cluster. On every CREATE and UPDATE of a rule the webhook says what it would evict or
    keep off (`warnings`). With `enabled`, a rule that would evict more than `maxEvictedPods`
    pods is denied unless its author is in `users` or `groups`, and a rule selecting every device
    (NoExecute or NoSchedule) is denied to everyone unless `allowEmptySelector`, and then allowed
    only to them.
    """

    enabled: bool = False
    """Deny what the rules below forbid (off: warnings only)."""
    warnings: bool = True
    """Say on every rule write what it would evict or keep off (kubectl prints it)."""
    users: tuple[str, ...] = ()
    """User names (`userInfo.username`) who may write rules that evict any number of pods."""
    groups: tuple[str, ...] = ()
    """Groups (`userInfo.groups`), any one of which is enough."""
    max_evicted_pods: int = Field(default=0, ge=0, alias="maxEvictedPods")
    """The most pods one NoExecute rule written by anyone else may evict (0: none)."""
    allow_empty_selector: bool = Field(default=False, alias="allowEmptySelector")
    """Whether a NoExecute or NoSchedule rule that selects every device may be written at all
    (then by `users` and `groups` only); false: never, a drain names a driver, pool or device."""
    request_access: str = Field(
        default=DEFAULT_TAINT_ACCESS, alias="requestAccess", min_length=1, max_length=300
    )
    """How to get access: the end of every denial."""

    _users = field_validator("users", "groups")(_names)
