"""Decoding request bodies into AdmissionReview requests (the wire edge: orjson + pydantic).

Only the envelope is validated here; `object` and `oldObject` stay raw dicts for the policies,
so no field the API server sends is ever dropped.

The pydantic models define the envelope and word what is wrong with one. A review whose every
envelope field has exactly its JSON type (every review the API server sends) is read by
`_plain_request` without them, for a few microseconds less per review; anything else goes
through pydantic, which accepts or refuses it as always. `_plain_request` accepts nothing
pydantic would refuse and builds the same values (tests/transport/test_review_decode.py).
"""

from __future__ import annotations

from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from app.errors import ReviewError
from app.k8s.names import is_dns_label, is_dns_subdomain, shown
from app.policies.base import Request


class _Wire(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class GroupVersionKind(_Wire):
    group: str = ""
    version: str
    kind: str


class GroupVersionResource(_Wire):
    group: str = ""
    version: str
    resource: str


class UserInfo(_Wire):
    username: str = ""
    groups: tuple[str, ...] | None = None


class AdmissionRequest(_Wire):
    uid: str = Field(min_length=1)
    kind: GroupVersionKind
    resource: GroupVersionResource
    sub_resource: str = Field(default="", alias="subResource")
    request_kind: GroupVersionKind | None = Field(default=None, alias="requestKind")
    name: str = ""
    namespace: str = ""
    operation: Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]
    user_info: UserInfo = Field(default_factory=UserInfo, alias="userInfo")
    object: dict[str, Any] | None = None
    old_object: dict[str, Any] | None = Field(default=None, alias="oldObject")
    dry_run: bool = Field(default=False, alias="dryRun")


class AdmissionReview(_Wire):
    api_version: Literal["admission.k8s.io/v1"] = Field(alias="apiVersion")
    kind: Literal["AdmissionReview"]
    request: AdmissionRequest


def decode_review(body: bytes) -> Request:
    """Parse a request body; raises ReviewError saying what is wrong."""
    if not body:
        raise ReviewError("empty body: expected an AdmissionReview")
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ReviewError(f"body is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ReviewError(f"body is a JSON {type(data).__name__}, not an AdmissionReview object")
    request = _plain_request(data)
    if request is None:
        request = _validated_request(data)
    _check_names(request)
    if request.namespace and request.kind == "Namespace" and not request.group:
        # The API server names a Namespace as its own request's namespace, even on CREATE,
        # when it does not exist yet: the object is cluster-scoped, and it is what the checks
        # judge (its labels are the object's), not a namespace it lives in.
        request = request._replace(namespace="")
    return request


def _validated_request(data: dict[str, Any]) -> Request:
    """The envelope validated by the pydantic models; raises ReviewError saying what is wrong."""
    try:
        review = AdmissionReview.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise ReviewError(
            f"not an admission.k8s.io/v1 AdmissionReview: {where}: {first['msg']}{more}"
        ) from None
    req = review.request
    return Request(
        uid=req.uid,
        group=req.kind.group,
        version=req.kind.version,
        kind=req.kind.kind,
        resource=req.resource.resource,
        sub_resource=req.sub_resource,
        operation=req.operation,
        namespace=req.namespace,
        name=req.name,
        object=req.object,
        old_object=req.old_object,
        dry_run=req.dry_run,
        username=req.user_info.username,
        request_version=req.request_kind.version if req.request_kind else req.kind.version,
        groups=req.user_info.groups or (),
    )


_OPERATIONS = frozenset({"CREATE", "UPDATE", "DELETE", "CONNECT"})
_ABSENT: Any = object()


def _plain_request(data: dict[str, Any]) -> Request | None:
    """The Request `AdmissionReview.model_validate(data)` leads to, when every field it reads
    is present with exactly its JSON type (or absent where it has a default); None otherwise."""
    if data.get("apiVersion") != "admission.k8s.io/v1" or data.get("kind") != "AdmissionReview":
        return None
    req = data.get("request")
    if type(req) is not dict:
        return None
    uid = req.get("uid")
    kind = req.get("kind")
    resource = req.get("resource")
    if type(uid) is not str or not uid or type(kind) is not dict or type(resource) is not dict:
        return None
    group = kind.get("group", "")
    version = kind.get("version")
    kind_name = kind.get("kind")
    resource_name = resource.get("resource")
    if (
        type(group) is not str
        or type(version) is not str
        or type(kind_name) is not str
        or type(resource.get("group", "")) is not str
        or type(resource.get("version")) is not str
        or type(resource_name) is not str
    ):
        return None
    request_version: Any = version
    request_kind = req.get("requestKind")
    if request_kind is not None and (
        type(request_kind) is not dict
        or type(request_kind.get("group", "")) is not str
        or type(request_kind.get("kind")) is not str
        or type(request_version := request_kind.get("version")) is not str
    ):
        return None
    sub_resource = req.get("subResource", "")
    name = req.get("name", "")
    namespace = req.get("namespace", "")
    operation = req.get("operation")
    obj = req.get("object")
    old = req.get("oldObject")
    dry_run = req.get("dryRun", False)
    if (
        type(sub_resource) is not str
        or type(name) is not str
        or type(namespace) is not str
        or type(operation) is not str
        or operation not in _OPERATIONS
        or (obj is not None and type(obj) is not dict)
        or (old is not None and type(old) is not dict)
        or type(dry_run) is not bool
    ):
        return None
    user = req.get("userInfo", _ABSENT)
    groups: tuple[str, ...] = ()
    if user is _ABSENT:
        username = ""
    elif type(user) is dict and type(username := user.get("username", "")) is str:
        listed = user.get("groups")
        if listed is not None:
            if type(listed) is not list or any(type(g) is not str for g in listed):
                return None
            groups = tuple(listed)
    else:
        return None
    return Request(  # (by position, in Request's order: every review, ~0.4 µs less than keywords)
        uid,
        group,
        version,
        kind_name,
        resource_name,
        sub_resource,
        operation,
        namespace,
        name,
        obj,
        old,
        dry_run,
        username,
        request_version,
        groups,
    )


def _check_names(req: Request) -> None:
    """The namespace and name a review carries, as the API server would have validated them.

    Both reach API paths (the on-miss namespace lookup, template creates), cache keys and log
    lines: a review from anyone but the API server must not smuggle `../` or a second path in.
    """
    namespace, name = req.namespace, req.name
    if namespace and not is_dns_label(namespace):
        raise ReviewError(
            f"request.namespace {shown(req.namespace)} is not a namespace name (a DNS-1123 label: "
            "at most 63 lower-case letters, digits and '-', starting and ending with a letter or "
            "digit)"
        )
    if name and not is_dns_subdomain(name):
        raise ReviewError(
            f"request.name {shown(req.name)} is not an object name (a DNS-1123 subdomain: at most "
            "253 lower-case letters, digits, '-' and '.', each part starting and ending with a "
            "letter or digit)"
        )
