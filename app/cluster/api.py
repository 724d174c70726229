"""The API server, as the live source talks to it: paths, one call, the connection, and what an
answer means.

`Api` wraps kubernetes.aio's `ApiClient` (`param_serialize` + `call_api`: kubeconfig or
service-account auth, TLS, proxies, token refresh) and returns raw aiohttp responses; the live
source (`app/cluster/live.py`) and the per-kind watchers (`app/cluster/watch.py`) read them as
raw dicts, never as the client's model classes (why: live.py's docstring). The helpers below
turn an answer into a raw object or the error it stands for (410 Gone is its own error: only a
relist helps).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeGuard
from urllib.parse import quote

import aiohttp
import orjson
from kubernetes.aio import client as k8s
from kubernetes.aio import config as k8s_config

from app.cluster.release import ServedRelease
from app.cluster.view import Kind, Obj
from app.config.settings import ClusterSource as SourceKind
from app.config.settings import Settings
from app.errors import ConfigError

logger = logging.getLogger(__name__)

Connect = Callable[[], Awaitable[k8s.ApiClient]]

RESOURCE_API = "/apis/resource.k8s.io/v1"
COLLECTIONS: dict[Kind, str] = {
    Kind.NAMESPACE: "/api/v1/namespaces",
    Kind.DEVICE_CLASS: f"{RESOURCE_API}/deviceclasses",
    Kind.RESOURCE_SLICE: f"{RESOURCE_API}/resourceslices",
    Kind.RESOURCE_CLAIM: f"{RESOURCE_API}/resourceclaims",
    Kind.RESOURCE_CLAIM_TEMPLATE: f"{RESOURCE_API}/resourceclaimtemplates",
    Kind.RESOURCE_QUOTA: "/api/v1/resourcequotas",
    Kind.NODE: "/api/v1/nodes",
    Kind.PRIORITY_CLASS: "/apis/scheduling.k8s.io/v1/priorityclasses",
    Kind.POD: "/api/v1/pods",
    Kind.POD_GROUP: "/apis/scheduling.k8s.io/v1beta1/podgroups",
}
"""Where each kind is listed and watched, across all namespaces (see docs/rbac.md); PodGroups
in the version the release serves them (`collection`)."""
JSON = "application/json"
_METADATA = "application/json;as={};g=meta.k8s.io;v=v1"
ACCEPT: dict[Kind, tuple[str, str]] = {
    Kind.NODE: (
        _METADATA.format("PartialObjectMetadataList"),
        _METADATA.format("PartialObjectMetadata"),
    )
}
"""(list, watch) Accept headers of the kinds read as metadata only: a Node's spec and status
(images, conditions, addresses) are most of it and none of it is read, so the API server is asked
for PartialObjectMetadata only (kube-apiserver serves it for every built-in kind), never the
whole object as a fallback."""
OPTIONAL_KINDS: dict[Kind, str] = {
    Kind.NODE: "node selectors on labels are taken to match",
    Kind.PRIORITY_CLASS: "only the policy's preemption.priorityClasses are known",
    Kind.POD: "the holders of allocated claims are named by their claims, not their priority",
    Kind.POD_GROUP: "a pod's claim that is its PodGroup's is charged to the pod (the release "
    "serves no PodGroups, or the grant is missing)",
}
"""Kinds the webhook works without, and what it does without them: a 403 (not granted) or a
404 (not served) on their list is not an outage (the view holds none of them and stays ready;
docs/rbac.md)."""
FIELD_SELECTORS: dict[Kind, str] = {
    Kind.POD: "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed",
}
"""Asked of the API server on the list and the watch. Of Pods, only those bound to a node and
not finished: the view reads a pod only as the holder of an allocated claim, and the scheduler
reserves a claim for the pod it is binding, so a pending or gated pod (a queue's thousands
waiting for admission) holds no device and is not sent at all, nor is one that has finished
(its claims are released). A pod enters the watch as ADDED when it is bound and leaves it as
DELETED when it finishes; between a claim's reservation and its pod's binding (the scheduler's
binding cycle) the holder is named by its claim (`policies.preemption.held_by`)."""
MERGE_PATCH = "application/merge-patch+json"


def collection(kind: Kind, release: ServedRelease) -> str:
    """Where `kind` is listed and watched on `release`: PodGroups in the newest
    `scheduling.k8s.io` version discovery found serving them (their list answers 404, not
    served, where none does: an optional kind)."""
    if kind is Kind.POD_GROUP and release.group_versions:
        return api_path("apis", "scheduling.k8s.io", release.group_versions[0], "podgroups")
    return COLLECTIONS[kind]


def api_path(*segments: str) -> str:
    """An API path from its segments, each percent-quoted (a '/' or '..' in a name stays data)."""
    return "/" + "/".join(quote(segment, safe="") for segment in segments)


class Api:
    """The requests the source makes, through a kubernetes.aio ApiClient, answered raw."""

    def __init__(self, client: k8s.ApiClient) -> None:
        self.client = client

    async def open(
        self,
        method: str,
        path: str,
        *,
        query: list[tuple[str, str]] | None = None,
        body: Obj | None = None,
        timeout: float,
        content_type: str = JSON,
        accept: str = JSON,
    ) -> aiohttp.ClientResponse:
        """Send one request; the response with its body not read yet (the caller releases it)."""
        params = await self.client.param_serialize(
            method=method,
            resource_path=path,
            query_params=query or None,
            header_params={"Accept": accept, "Content-Type": content_type},
            body=body,
            auth_settings=["BearerToken"],
        )
        rest = await self.client.call_api(*params, _request_timeout=timeout)
        response: aiohttp.ClientResponse = rest.response
        return response

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: list[tuple[str, str]] | None = None,
        body: Obj | None = None,
        timeout: float,
        content_type: str = "application/json",
    ) -> tuple[int, bytes]:
        """Send one request; its status and whole body."""
        response = await self.open(
            method, path, query=query, body=body, timeout=timeout, content_type=content_type
        )
        try:
            return response.status, await response.read()
        finally:
            response.release()

    async def close(self) -> None:
        await self.client.close()  # type: ignore[no-untyped-call]


def check_config(settings: Settings) -> None:
    """Fail early, with a plain message, when the cluster credentials cannot be read."""
    try:
        if settings.cluster_source is SourceKind.IN_CLUSTER:
            k8s_config.load_incluster_config(client_configuration=k8s.Configuration())  # type: ignore[no-untyped-call]
        else:
            if settings.kubeconfig is None:
                raise ConfigError("the kubeconfig cluster source needs a kubeconfig file")
            k8s_config.list_kube_config_contexts(str(settings.kubeconfig))  # type: ignore[no-untyped-call]
    except ConfigError:
        raise
    except Exception as exc:  # the loaders raise ConfigException, OSError, YAMLError...
        raise ConfigError(f"{_credentials(settings)}: {exc}") from exc


async def connect(settings: Settings) -> k8s.ApiClient:
    """An API client for the settings' kubeconfig or in-cluster service account."""
    configuration = k8s.Configuration()
    try:
        if settings.cluster_source is SourceKind.IN_CLUSTER:
            k8s_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        else:
            await k8s_config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=str(settings.kubeconfig),
                client_configuration=configuration,
                persist_config=False,
            )
    except Exception as exc:
        raise ConfigError(f"{_credentials(settings)}: {exc}") from exc
    return k8s.ApiClient(configuration)


def _credentials(settings: Settings) -> str:
    if settings.cluster_source is SourceKind.IN_CLUSTER:
        return "in-cluster service account"
    return f"kubeconfig {settings.kubeconfig}"


class GoneError(Exception):
    """410: the resourceVersion (or continue token) is too old; only a fresh list helps."""


class StatusError(Exception):
    """The API server answered a list or watch with an error status."""


class ForbiddenError(StatusError):
    """403: the identity may not list or watch the kind (RBAC)."""


class NotServedError(StatusError):
    """404 on a list or watch: the API server does not serve the kind's resource (an API
    server of another kind, or a stand-in that knows only some)."""


async def read_json(response: aiohttp.ClientResponse) -> Obj:
    try:
        data = await response.read()
    finally:
        response.release()
    if response.status != 200:
        raise error_for(response.status, data)
    body = orjson.loads(data)
    if not isinstance(body, dict):
        raise ValueError("list response is not an object")
    return body


def is_namespace(found: Any, name: str) -> TypeGuard[Obj]:
    """Whether an answer to GET /api/v1/namespaces/<name> is that Namespace."""
    if not isinstance(found, dict) or found.get("kind") != "Namespace":
        return False
    if found.get("apiVersion") != "v1":
        return False
    meta = found.get("metadata")
    return isinstance(meta, dict) and meta.get("name") == name


def error_for(status: int, body: bytes) -> Exception:
    text = status_text(status, body)
    if status == 410:
        return GoneError(text)
    if status == 403:
        return ForbiddenError(text)
    return NotServedError(text) if status == 404 else StatusError(text)


def status_text(status: int, body: bytes) -> str:
    """`<code> <reason>: <message>` from a Status body, or the start of whatever came back."""
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        parsed = None
    if isinstance(parsed, dict) and parsed.get("kind") == "Status":
        reason = parsed.get("reason") or ""
        return f"{status} {reason}: {parsed.get('message') or ''}".replace(" :", ":")
    return f"HTTP {status}: {body[:200].decode('utf-8', 'replace')}"


def object_or(body: bytes, fallback: Obj) -> Obj:
    """The object in a response body, or `fallback` when the body is not one."""
    try:
        found = orjson.loads(body)
    except orjson.JSONDecodeError:
        return fallback
    return (
        found if isinstance(found, dict) and isinstance(found.get("metadata"), dict) else fallback
    )


def describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
