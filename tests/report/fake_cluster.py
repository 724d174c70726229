"""A fake API server for the report's tests (aiohttp.web on 127.0.0.1).

It serves what `dra-webhook report` and the webhook's migration gauge ask for, in the wire
format of kube-apiserver:

- `GET <collection>?limit=N&continue=T[&labelSelector=k=v]`: a list page, items without kind and
  apiVersion, `metadata.continue` and `metadata.remainingItemCount` while more follow. The items
  of a collection come from a function of their index, made when the page is asked for: the
  server holds no objects, so a memory measurement of the client is not blurred by the server.
- `PATCH .../namespaces/{ns}/policyreports/{name}` with `application/apply-patch+yaml`: stored
  (created 201, or updated in place 200, keeping its uid).
- `forbid(verb, plural)`: that request is answered 403 with kube-apiserver's message.
- `terminate(namespace)`: the namespace is being deleted (listed with a deletionTimestamp);
  creating a report in it is answered 403 as kube-apiserver's NamespaceLifecycle admission does
  (updating one still works). `remove(namespace)`: it is gone (not listed; a write there is
  404 `namespaces "X" not found`). `without_crd()`: policyreports are not served (404).
- a namespaces list with `labelSelector=kubernetes.io/metadata.name=X` has that namespace only.

Every request is recorded as (method, path, query) for the RBAC document test.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import yaml
from aiohttp import web

Obj = dict[str, Any]
TOKEN = "fake-report-token"
Items = tuple[int, Callable[[int], Obj]]
"""(how many, the i-th object)."""


def _status(code: int, reason: str, message: str, details: Obj | None = None) -> web.Response:
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message,
            "reason": reason, "code": code}  # fmt: skip
    if details is not None:
        body["details"] = details
    return web.Response(status=code, body=orjson.dumps(body), content_type="application/json")


class FakeCluster:
    def __init__(self) -> None:
        self.collections: dict[str, Items] = {}
        self.reports: dict[tuple[str, str], Obj] = {}
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self.forbidden: set[tuple[str, str]] = set()
        self.terminating: set[str] = set()
        self.gone: set[str] = set()
        self.crd = True
        self.groups: dict[str, list[Obj]] = {
            "apps": [], "batch": [], "resource.k8s.io": [], "wgpolicyk8s.io": []
        }  # fmt: skip
        """Discovery: API group -> its resources (APIResource), served at version v1."""
        self.scheduling_version = ""
        """The scheduling.k8s.io version serving Workloads and PodGroups; "" none."""
        self.pages_served = 0
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def serve(self, path: str, count: int, make: Callable[[int], Obj]) -> None:
        self.collections[path] = (count, make)

    def serve_kind(
        self, group: str, kind: str, plural: str, items: list[Obj], *, namespaced: bool = True
    ) -> None:
        """A kind in discovery (its group at v1, the group's versions) and listed at v1."""
        self.groups.setdefault(group, []).append(
            {"name": plural, "kind": kind, "namespaced": namespaced, "verbs": ["get", "list"]}
        )
        self.serve(f"/apis/{group}/v1/{plural}", len(items), items.__getitem__)

    def serve_group_claims(self, items: list[Obj], version: str = "v1beta1") -> None:
        """Workloads and PodGroups (`items` of both kinds) at `scheduling.k8s.io/<version>`, as a
        release with the API on serves them, in discovery too."""
        self.scheduling_version = version
        self.groups["scheduling.k8s.io"] = [
            {"name": plural, "kind": kind, "namespaced": True, "verbs": ["get", "list"]}
            for kind, plural in (("Workload", "workloads"), ("PodGroup", "podgroups"))
        ]
        for kind, plural in (("Workload", "workloads"), ("PodGroup", "podgroups")):
            mine = [i for i in items if i.get("kind") == kind]
            self.serve(f"/apis/scheduling.k8s.io/{version}/{plural}", len(mine), mine.__getitem__)

    def forbid(self, verb: str, plural: str) -> None:
        self.forbidden.add((verb, plural))

    def terminate(self, namespace: str) -> None:
        self.terminating.add(namespace)

    def remove(self, namespace: str) -> None:
        self.gone.add(namespace)

    def without_crd(self) -> None:
        self.crd = False

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def write_kubeconfig(self, path: Path) -> Path:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "fake", "user": {"token": TOKEN}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
            "current-context": "fake",
        }
        path.write_text(yaml.safe_dump(config))
        return path

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        query = dict(request.query)
        self.requests.append((request.method, request.path, query))
        if request.headers.get("Authorization") != f"Bearer {TOKEN}":
            return _status(401, "Unauthorized", "Unauthorized")
        parts = request.path.strip("/").split("/")
        plural = parts[-1] if request.method == "GET" else parts[-2]
        verb = "list" if request.method == "GET" else "patch"
        if (verb, plural) in self.forbidden:
            group = "" if parts[0] == "api" else parts[1]
            return _status(
                403,
                "Forbidden",
                f'{plural} is forbidden: User "system:serviceaccount:x:nobody" cannot {verb} '
                f'resource "{plural}" in API group "{group}" at the cluster scope',
            )
        if request.method == "GET" and request.path == "/version":
            return web.json_response({"major": "1", "minor": "36", "gitVersion": "v1.36.2"})
        if request.method == "GET" and (found := self._discovery(request.path)) is not None:
            return web.Response(body=orjson.dumps(found), content_type="application/json")
        if request.method == "GET":
            return self._list(request.path, query)
        if request.method == "PATCH" and plural == "policyreports":
            return await self._apply(request, parts[-3], parts[-1])
        return _status(405, "MethodNotAllowed", f"{request.method} {request.path}")

    def _discovery(self, path: str) -> Obj | None:
        if path == "/apis/scheduling.k8s.io" and self.scheduling_version:
            version = self.scheduling_version
            versions = [{"groupVersion": f"scheduling.k8s.io/{version}", "version": version}]
            return {"kind": "APIGroup", "name": "scheduling.k8s.io", "versions": versions}
        if path == "/apis":
            groups = [
                {"name": g, "versions": [{"groupVersion": f"{g}/v1", "version": "v1"}],
                 "preferredVersion": {"groupVersion": f"{g}/v1", "version": "v1"}}
                for g in self.groups
            ]  # fmt: skip
            return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}
        parts = path.strip("/").split("/")
        if len(parts) == 2 and parts[0] == "apis" and parts[1] in self.groups:
            versions = [{"groupVersion": f"{parts[1]}/v1", "version": "v1"}]
            return {"kind": "APIGroup", "name": parts[1], "versions": versions}
        if len(parts) == 3 and parts[0] == "apis" and parts[1] in self.groups:
            return {"kind": "APIResourceList", "groupVersion": f"{parts[1]}/{parts[2]}",
                    "resources": self.groups[parts[1]]}  # fmt: skip
        return None

    def _list(self, path: str, query: dict[str, str]) -> web.Response:
        if path.endswith("/policyreports"):
            selector = query.get("labelSelector", "")
            key, _, value = selector.partition("=")
            items = [
                r
                for r in self.reports.values()
                if not selector or r["metadata"].get("labels", {}).get(key) == value
            ]
            return self._page(len(items), items.__getitem__, query)
        if path not in self.collections:
            return _status(404, "NotFound", "the server could not find the requested resource")
        count, make = self.collections[path]
        if path == "/api/v1/namespaces":
            return self._namespaces(count, make, query)
        return self._page(count, make, query)

    def _namespaces(
        self, count: int, make: Callable[[int], Obj], query: dict[str, str]
    ) -> web.Response:
        """The namespaces as they stand: gone ones left out, terminating ones marked; the
        `kubernetes.io/metadata.name` label the API server sets, for selecting one."""
        items = []
        for listed in map(make, range(count)):
            name = listed["metadata"]["name"]
            if name in self.gone:
                continue
            labels = {**listed["metadata"].get("labels", {}), "kubernetes.io/metadata.name": name}
            obj = {**listed, "metadata": {**listed["metadata"], "labels": labels}}
            if name in self.terminating:
                obj["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
                obj["status"] = {"phase": "Terminating"}
            items.append(obj)
        key, _, value = query.get("labelSelector", "").partition("=")
        items = [i for i in items if not key or i["metadata"]["labels"].get(key) == value]
        return self._page(len(items), items.__getitem__, query)

    def _page(self, count: int, make: Callable[[int], Obj], query: dict[str, str]) -> web.Response:
        self.pages_served += 1
        start = int(query.get("continue") or 0)
        limit = int(query.get("limit") or 0) or count
        end = min(start + limit, count)
        meta: Obj = {"resourceVersion": "1"}
        if end < count:
            meta["continue"] = str(end)
            meta["remainingItemCount"] = count - end
        body = {"kind": "List", "apiVersion": "v1", "metadata": meta,
                "items": [make(i) for i in range(start, end)]}  # fmt: skip
        return web.Response(body=orjson.dumps(body), content_type="application/json")

    async def _apply(self, request: web.Request, namespace: str, name: str) -> web.Response:
        if request.content_type != "application/apply-patch+yaml":
            return _status(415, "UnsupportedMediaType", request.content_type)
        if request.query.get("fieldManager") != "dra-webhook-report":
            return _status(422, "Invalid", "fieldManager is required for apply requests")
        sent = yaml.safe_load(await request.text())
        key = (namespace, name)
        existing = self.reports.get(key)
        if not self.crd:
            return _status(404, "NotFound", "the server could not find the requested resource")
        if namespace in self.gone:
            return _status(404, "NotFound", f'namespaces "{namespace}" not found',
                           {"name": namespace, "kind": "namespaces"})  # fmt: skip
        if existing is None and namespace in self.terminating:
            cause = {"reason": "NamespaceTerminating", "field": "metadata.namespace",
                     "message": f"namespace {namespace} is being terminated"}  # fmt: skip
            return _status(
                403,
                "Forbidden",
                f'policyreports.wgpolicyk8s.io "{name}" is forbidden: unable to create new '
                f"content in namespace {namespace} because it is being terminated",
                {"name": name, "group": "wgpolicyk8s.io", "kind": "policyreports",
                 "causes": [cause]},
            )  # fmt: skip
        meta = {
            **sent["metadata"],
            "uid": existing["metadata"]["uid"] if existing else str(uuid.uuid4()),
        }
        self.reports[key] = {**sent, "metadata": meta}
        return web.Response(
            status=200 if existing else 201,
            body=orjson.dumps(self.reports[key]),
            content_type="application/json",
        )


def namespace(name: str, **labels: str) -> Obj:
    return {"metadata": {"name": name, "labels": labels, "uid": f"uid-ns-{name}"}}


def pod(
    namespace: str, name: str, resource: str | None = None, owner: tuple[str, str] | None = None
) -> Obj:
    container: Obj = {"name": "main", "image": "app:1"}
    if resource:
        container["resources"] = {"limits": {resource: "1"}}
    meta: Obj = {"name": name, "namespace": namespace, "uid": f"uid-{namespace}-{name}"}
    if owner:
        meta["ownerReferences"] = [
            {"apiVersion": "apps/v1", "kind": owner[0], "name": owner[1], "uid": "x"}
        ]
    return {"metadata": meta, "spec": {"containers": [container]}}


def workload(
    kind: str,
    namespace: str,
    name: str,
    resource: str | None = None,
    owner: tuple[str, str] | None = None,
) -> Obj:
    template = {"spec": pod(namespace, name, resource)["spec"]}
    meta: Obj = {"name": name, "namespace": namespace, "uid": f"uid-{kind}-{namespace}-{name}"}
    if owner:
        meta["ownerReferences"] = [
            {"apiVersion": "apps/v1", "kind": owner[0], "name": owner[1], "uid": "x"}
        ]
    spec: Obj = {"template": template}
    if kind == "CronJob":
        spec = {"schedule": "0 * * * *", "jobTemplate": {"spec": {"template": template}}}
    return {"metadata": meta, "spec": spec}
