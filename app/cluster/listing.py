"""Paged lists and PolicyReport writes: the requests of `dra-webhook report` (app.report) and
of the webhook's gauge of legacy workloads (app.cluster.progress).

A list is read one page at a time (`limit`/`continue`) and each page is handed to the caller
before the next is asked for, so the report holds one page of objects at most, whatever the
size of the cluster. List items come back without `kind` and `apiVersion` (the API server puts
them on the list only): `pages` adds them, so the policies see the objects as admission does.

Requests go through kubernetes.aio's `ApiClient` (kubeconfig or service-account auth, TLS,
proxies, token refresh) answered raw, as the webhook's live source does (`app.cluster.live`
says why not the generated API classes). The live source keeps a view current by list+watch;
these are one-off lists, read once and dropped, and server-side applies.

A 403 is the one failure the operator must act on; it becomes `ForbiddenError`, whose text names
the verb, the resource and its group, in one line (docs/rbac.md, "The report").
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
import orjson
from kubernetes.aio import client as k8s
from kubernetes.aio import config as k8s_config

from app.cluster.api import Api, status_text
from app.cluster.probe import ProbeError, probe
from app.cluster.release import ServedRelease
from app.errors import ConfigError

logger = logging.getLogger(__name__)

Obj = dict[str, Any]

APPLY_PATCH = "application/apply-patch+yaml"
"""Server-side apply: create or update in place, one request, the same object every run."""
FIELD_MANAGER = "dra-webhook-report"
REQUEST_TIMEOUT = 60.0


@dataclass(frozen=True)
class Resource:
    """A kind the report reads or writes: where it is listed and what RBAC calls it."""

    kind: str
    group: str
    version: str
    plural: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def collection(self) -> str:
        """The cluster-wide collection path."""
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        return f"{base}/{self.plural}"

    def item(self, namespace: str, name: str) -> str:
        """The path of one namespaced object."""
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        return f"{base}/namespaces/{quote(namespace, safe='')}/{self.plural}/{quote(name, safe='')}"


NAMESPACES = Resource("Namespace", "", "v1", "namespaces")
DEVICE_CLASSES = Resource("DeviceClass", "resource.k8s.io", "v1", "deviceclasses")
NODES = Resource("Node", "", "v1", "nodes")
PRIORITY_CLASSES = Resource("PriorityClass", "scheduling.k8s.io", "v1", "priorityclasses")
POLICY_REPORTS = Resource("PolicyReport", "wgpolicyk8s.io", "v1alpha2", "policyreports")
WORKLOADS = (
    # Owners first: an object owned by one listed before it is counted under its owner.
    Resource("CronJob", "batch", "v1", "cronjobs"),
    Resource("Deployment", "apps", "v1", "deployments"),
    Resource("StatefulSet", "apps", "v1", "statefulsets"),
    Resource("DaemonSet", "apps", "v1", "daemonsets"),
    Resource("ReplicationController", "", "v1", "replicationcontrollers"),
    Resource("PodTemplate", "", "v1", "podtemplates"),
    Resource("ReplicaSet", "apps", "v1", "replicasets"),
    Resource("Job", "batch", "v1", "jobs"),
    Resource("Pod", "", "v1", "pods"),
)
"""Every pod-bearing kind, in the order the report lists them."""
RESOURCE_SLICES = Resource("ResourceSlice", "resource.k8s.io", "v1", "resourceslices")


def device_taint_rules(version: str) -> Resource:
    """DeviceTaintRules in one of the versions that serve them (v1alpha3, v1beta2, v1)."""
    return Resource("DeviceTaintRule", "resource.k8s.io", version, "devicetaintrules")


CLAIMS = (
    Resource("ResourceClaimTemplate", "resource.k8s.io", "v1", "resourceclaimtemplates"),
    Resource("ResourceClaim", "resource.k8s.io", "v1", "resourceclaims"),
)
"""What the tenancy guards judge besides pod specs, listed after the pods."""


def group_resources(versions: tuple[str, ...]) -> tuple[Resource, ...]:
    """Workloads and PodGroups (their group claims) in the newest `scheduling.k8s.io` version
    the cluster serves them in (`ServedRelease.group_versions`); none where it serves none."""
    if not versions:
        return ()
    return (
        Resource("Workload", "scheduling.k8s.io", versions[0], "workloads"),
        Resource("PodGroup", "scheduling.k8s.io", versions[0], "podgroups"),
    )


class ReportError(ConfigError):
    """The report could not read or write what it needs; the text says what to do."""


class ForbiddenError(ReportError):
    """RBAC denied a request: the verb and resource to grant are in the message."""

    def __init__(self, verb: str, resource: Resource, where: str, detail: str) -> None:
        group = resource.group or "core"
        super().__init__(
            f"report: not allowed to {verb} {resource.plural} ({group} API group) {where}: "
            f"grant `{verb}` on `{resource.plural}` to this identity (docs/rbac.md, "
            f'"The report"); the API server said: {detail}'
        )
        self.verb = verb
        self.resource = resource


@dataclass(frozen=True)
class Page:
    """One page of a list: its items (with kind and apiVersion set), and how many remain."""

    resource: Resource
    items: list[Obj]
    remaining: int | None


async def connect(kubeconfig: Path | None) -> k8s.ApiClient:
    """A client for `kubeconfig`, or for this pod's service account when None."""
    configuration = k8s.Configuration()
    if kubeconfig is not None and not kubeconfig.is_file():
        # checked here: the loader would log a line of its own before raising
        raise ReportError(f"report: kubeconfig {kubeconfig}: no such file")
    try:
        if kubeconfig is None:
            k8s_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        else:
            await k8s_config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=str(kubeconfig),
                client_configuration=configuration,
                persist_config=False,
            )
    except Exception as exc:  # the loaders raise ConfigException, OSError, YAMLError...
        where = "in-cluster service account" if kubeconfig is None else f"kubeconfig {kubeconfig}"
        raise ReportError(f"report: {where}: {exc}") from exc
    return k8s.ApiClient(configuration)


class Cluster:
    """Paged lists and server-side applies through one ApiClient."""

    def __init__(self, client: k8s.ApiClient, page_size: int = 500) -> None:
        self.client = client
        self.page_size = page_size
        self._api = Api(client)

    async def close(self) -> None:
        await self._api.close()

    async def _send(
        self,
        method: str,
        path: str,
        *,
        query: list[tuple[str, str]] | None = None,
        body: Obj | None = None,
        content_type: str = "application/json",
    ) -> tuple[int, bytes]:
        try:
            return await self._api.request(
                method,
                path,
                query=query,
                body=body,
                timeout=REQUEST_TIMEOUT,
                content_type=content_type,
            )
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise ReportError(
                f"report: {method} {path}: cannot reach the API server: {_describe(exc)}"
            ) from exc

    async def release(self) -> ServedRelease:
        """The release and its default DRA features (app.cluster.probe without its dry run:
        the report's role writes nothing but PolicyReports; the webhook's log names what the
        API server really keeps); unknown when /version cannot be read (said in `source`): the
        report stands without it."""
        try:
            return await probe(self._api, "", REQUEST_TIMEOUT, dry_run=False)
        except (ProbeError, aiohttp.ClientError, TimeoutError, OSError) as exc:
            return ServedRelease.unknown(f"not learned: {_describe(exc)}")

    async def discover(self, kinds: Iterable[tuple[str, str]]) -> list[Resource]:
        """The namespaced resources the API server serves for `kinds` (group, kind), at each
        group's preferred version; a kind it does not serve is left out, not an error (an
        operator that is not installed)."""
        wanted: dict[str, set[str]] = {}
        for group, kind in kinds:
            wanted.setdefault(group, set()).add(kind)
        status, data = await self._send("GET", "/apis")
        if status != 200:
            raise ReportError(f"report: discovery (GET /apis) failed: {status_text(status, data)}")
        found: list[Resource] = []
        for name, version in _groups(orjson.loads(data)):
            if name not in wanted:
                continue
            status, data = await self._send("GET", f"/apis/{name}/{version}")
            if status == 404:
                continue  # the group went away between the two requests
            if status != 200:
                raise ReportError(
                    f"report: discovery of {name}/{version} failed: {status_text(status, data)}"
                )
            body = orjson.loads(data)
            for item in body.get("resources") or () if isinstance(body, dict) else ():
                if (
                    isinstance(item, dict)
                    and item.get("kind") in wanted[name]
                    and "/" not in str(item.get("name"))
                    and item.get("namespaced") is True
                    and "list" in (item.get("verbs") or ())
                ):
                    found.append(Resource(str(item["kind"]), name, version, str(item["name"])))
        return sorted(found, key=lambda r: (r.group, r.kind))

    async def pages(self, resource: Resource, selector: str = "") -> AsyncIterator[Page]:
        """Every object of `resource` in the cluster (with these labels), a page at a time."""
        token: str | None = None
        while True:
            query = [("limit", str(self.page_size))]
            if selector:
                query.append(("labelSelector", selector))
            if token is not None:
                query.append(("continue", token))
            status, data = await self._send("GET", resource.collection, query=query)
            if status == 410 and token is not None:
                # The continue token expired (etcd compacted past the list's revision). Starting
                # over would count the pages already seen twice, and remembering every uid
                # would unbound the memory: say so instead.
                raise ReportError(
                    f"report: the list of {resource.plural} outlived its continue token (410 "
                    "Gone, about 5 minutes by default); run again, with a larger --page-size"
                )
            if status != 200:
                raise _failure(status, data, "list", resource, "cluster-wide")
            body = orjson.loads(data)
            items = body.get("items") if isinstance(body, dict) else None
            meta = body.get("metadata") if isinstance(body, dict) else None
            meta = meta if isinstance(meta, dict) else {}
            page = [item for item in items or () if isinstance(item, dict)]
            for item in page:
                item["kind"] = resource.kind
                item["apiVersion"] = resource.api_version
            remaining = meta.get("remainingItemCount")
            yield Page(resource, page, remaining if isinstance(remaining, int) else None)
            token = meta.get("continue") or None
            if token is None:
                return

    async def apply(self, resource: Resource, obj: Obj) -> Obj:
        """Create `obj` or update it in place (server-side apply, our field manager, forced)."""
        meta = obj["metadata"]
        path = resource.item(meta["namespace"], meta["name"])
        query = [("fieldManager", FIELD_MANAGER), ("force", "true")]
        status, data = await self._send(
            "PATCH", path, query=query, body=obj, content_type=APPLY_PATCH
        )
        if status not in (200, 201):
            raise _failure(status, data, "patch", resource, f"in namespace {meta['namespace']}")
        stored: Obj = orjson.loads(data)
        return stored


def _groups(body: Any) -> Iterator[tuple[str, str]]:
    """(group, preferred version) of an APIGroupList."""
    groups = body.get("groups") if isinstance(body, dict) else None
    for group in groups if isinstance(groups, list) else ():
        if not isinstance(group, dict):
            continue
        preferred = group.get("preferredVersion")
        version = preferred.get("version") if isinstance(preferred, dict) else None
        if isinstance(group.get("name"), str) and isinstance(version, str):
            yield group["name"], version


def _failure(status: int, data: bytes, verb: str, resource: Resource, where: str) -> ReportError:
    detail = status_text(status, data)
    if status == 403:
        # A server-side apply of an object that does not exist yet is also checked for `create`:
        # name the verb the API server says is missing.
        said = re.search(r"cannot (\w+) resource", detail)
        return ForbiddenError(said.group(1) if said else verb, resource, where, detail)
    if status == 404 and resource is POLICY_REPORTS:
        return ReportError(
            f"report: the API server does not serve {resource.api_version} {resource.plural}: "
            'install the PolicyReport CRD (charts/dra-webhook/README.md, "Migration report")'
        )
    return ReportError(
        f"report: {verb} {resource.plural} {where} failed: {detail}".replace("\n", " ")
    )


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
