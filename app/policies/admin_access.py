"""The admin-access guard (policy `adminAccess`): who may turn DRA admin access on.

A ResourceClaim whose request says `adminAccess: true` is allocated every device of its class,
including the ones other tenants' claims hold (monitoring, debugging). Kubernetes allows such a
claim only in a namespace labelled `resource.kubernetes.io/admin-access: "true"`, and that label
is set like any other: whoever may patch their own Namespace may give themselves admin access.

Two checks hold it:

- `check_label` (Namespace CREATE and UPDATE): setting, changing or removing the label is
  denied unless the requesting user, or one of its groups, is listed in the policy (the
  admission request's `userInfo`). Dry runs get the same answer (the check writes nothing). The
  chart sends only the writes that change the label (matchConditions on the old and new value)
  and renders the same rule as a ValidatingAdmissionPolicy, which holds while the webhook is
  down (charts/dra-webhook/templates/admissionpolicy.yaml).
- `check_claims` (ResourceClaim and ResourceClaimTemplate CREATE): a request asking for admin
  access is denied in a namespace the policy's `namespaceSelector` does not select, even when
  the label is there (it was set before the guard, or by someone listed, for another purpose).
  Denials are counted by check name in `dra_webhook_denials_total{reason}`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from app.config.tenancy import ADMIN_ACCESS_LABEL
from app.errors import ObjectShapeError
from app.k8s.claims import COUNTING, Alternative, ClaimSpec
from app.k8s.labels import Selector
from app.policies.base import ALLOW, Context, Request, Result, Violation
from app.policies.parts import Parts

NAMESPACE_KINDS: frozenset[tuple[str, str]] = frozenset({("", "Namespace")})
GUARD = "dra-webhook admin-access guard"
LABEL_PATH = f"metadata.labels[{ADMIN_ACCESS_LABEL}]"

_ABSENT = None


@dataclass(frozen=True, slots=True)
class AdminAccessRules:
    """The policy's `adminAccess`, compiled at load."""

    enabled: bool
    users: frozenset[str]
    groups: frozenset[str]
    claim_namespaces: Selector | None
    """Where claims may ask for admin access; None: wherever Kubernetes allows it."""
    request_access: str

    def may_change_label(self, username: str, groups: tuple[str, ...]) -> bool:
        return username in self.users or not self.groups.isdisjoint(groups)


def admin_access_rules(parts: Parts) -> AdminAccessRules:
    """Builder: the policy's `adminAccess` section."""
    config = parts.policy.admin_access
    selector = config.namespace_selector
    return AdminAccessRules(
        config.enabled,
        frozenset(config.users),
        frozenset(config.groups),
        Selector.from_policy(selector) if selector is not None else None,
        config.request_access,
    )


def label_value(obj: Any, where: str) -> str | None:
    """The admin-access label of a Namespace object (None when absent); ObjectShapeError with
    the field path when its metadata or labels are not what the API defines."""
    if obj is None:
        return _ABSENT
    if not isinstance(obj, Mapping):
        raise ObjectShapeError(where or "object", "must be an object")
    prefix = f"{where}." if where else ""
    meta = obj.get("metadata")
    if meta is None:
        return _ABSENT
    if not isinstance(meta, Mapping):
        raise ObjectShapeError(f"{prefix}metadata", "must be an object")
    labels = meta.get("labels")
    if labels is None:
        return _ABSENT
    if not isinstance(labels, Mapping):
        raise ObjectShapeError(f"{prefix}metadata.labels", "must be an object")
    value = labels.get(ADMIN_ACCESS_LABEL)
    if value is not None and not isinstance(value, str):
        raise ObjectShapeError(f"{prefix}{LABEL_PATH}", "must be a string")
    return value


def describe_change(old: str | None, new: str | None) -> str:
    """`set to "true" (it was not set)`, `changed from "false" to "true"`, `removed (it was
    "true")`."""
    if old is None:
        return f"set to {_quoted(new)} (it was not set)"
    if new is None:
        return f"removed (it was {_quoted(old)})"
    return f"changed from {_quoted(old)} to {_quoted(new)}"


def _quoted(value: str | None) -> str:
    return '""' if value == "" else f'"{value}"'


def check_label(request: Request, ctx: Context) -> Result:
    """Validating, Namespace CREATE and UPDATE: the admin-access label changes only by a user
    or group the policy lists."""
    rules = ctx.parts[admin_access_rules]
    if not rules.enabled:
        return ALLOW
    new = label_value(request.object, "")
    old = label_value(request.old_object, "oldObject") if request.operation == "UPDATE" else None
    if new == old:
        return ALLOW
    if rules.may_change_label(request.username, request.groups):
        return ALLOW
    name = _name(request)
    who = f"user {request.username}" if request.username else "this user"
    return Result(
        violations=(Violation(LABEL_PATH, describe_change(old, new)),),
        summary=(
            f"namespace {name}: {who} may not set, change or remove the label "
            f"{ADMIN_ACCESS_LABEL} ({GUARD}, policy adminAccess): it lets ResourceClaims in the "
            "namespace ask for adminAccess, which sees every device of a DeviceClass, "
            "including the ones other tenants hold"
        ),
        details=f"To get access: {rules.request_access}.",
    )


def _name(request: Request) -> str:
    if request.name:
        return request.name
    meta = request.object.get("metadata") if isinstance(request.object, Mapping) else None
    name = meta.get("name") if isinstance(meta, Mapping) else None
    return name if isinstance(name, str) and name else "(unnamed)"


def admin_requests(spec: ClaimSpec) -> list[Alternative]:
    """The requests of a claim spec that ask for admin access (`exactly` or a v1beta1
    request; `firstAvailable` subrequests have no such field)."""
    found: list[Alternative] = []
    for request in spec.requests:
        for branch in (request.exactly, request.flat):
            if branch is not None:
                found.extend(a for a in branch.alternatives if a.admin_access)
    return found


def standing_admin_requests(request: Request, ctx: Context) -> list[str]:
    """`report`: a stored claim's or template's requests for admin access in a namespace
    `adminAccess.namespaceSelector` does not select, as `path: why`."""
    rules = ctx.parts[admin_access_rules]
    if not rules.enabled or rules.claim_namespaces is None or request.object is None:
        return []
    if rules.claim_namespaces.matches(ctx.namespace_labels):
        return []
    return [
        f"{a.path}.adminAccess: asks for admin access to every device of DeviceClass "
        f"{a.device_class or '?'}, outside the namespaces the policy's "
        f"adminAccess.namespaceSelector ({rules.claim_namespaces}) selects"
        for a in admin_requests(request.claim_spec())
    ]


def check_claims(request: Request, ctx: Context) -> Result:
    """Validating, ResourceClaim and ResourceClaimTemplate CREATE: admin access only in the
    namespaces `adminAccess.namespaceSelector` selects."""
    rules = ctx.parts[admin_access_rules]
    if not rules.enabled or rules.claim_namespaces is None or request.object is None:
        return ALLOW
    if rules.claim_namespaces.matches(ctx.namespace_labels):
        return ALLOW
    spec = request.claim_spec()
    asking = admin_requests(spec)
    if not asking:
        return ALLOW
    error = spec.first_error(COUNTING)
    if error is not None:
        raise error.exception()
    labelled = ctx.namespace_labels.get(ADMIN_ACCESS_LABEL)
    label = (
        f", even though it is labelled {ADMIN_ACCESS_LABEL}={labelled}"
        if labelled is not None
        else ""
    )
    what = f"{request.kind} {request.name}".strip()
    return Result(
        violations=tuple(
            Violation(
                f"{a.path}.adminAccess",
                f"asks for admin access to every device of DeviceClass {a.device_class or '?'}",
            )
            for a in asking
        ),
        summary=(
            f"namespace {request.namespace} may not use DRA admin access ({GUARD}): the policy's "
            f"adminAccess.namespaceSelector ({rules.claim_namespaces}) does not select it"
            f"{label}; {what} asks for it:"
        ),
        details=(
            "Remove adminAccess, or ask your cluster administrators to have the policy's "
            "adminAccess.namespaceSelector select this namespace."
        ),
    )
