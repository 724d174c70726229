"""A small fake kube-apiserver on 127.0.0.1 for the live source's tests (aiohttp.web).

It speaks the parts of the API the live source uses, in the real wire format:

- `GET <collection>?limit=N&continue=T`: a `<Kind>List` with `metadata.resourceVersion` (and
  `metadata.continue` while more pages follow); items without kind/apiVersion, as lists send them.
  A continue token of an expired snapshot answers HTTP 410 `Expired`.
- `GET <collection>?watch=true&resourceVersion=N&allowWatchBookmarks=true&timeoutSeconds=T`:
  newline-delimited `{"type": ..., "object": ...}` events newer than N, then new ones as they
  happen, until T passes. A resourceVersion older than the compaction point is answered like
  kube-apiserver does, with HTTP 200 and an ERROR event holding a 410 `Expired` Status ("too old
  resource version"), or with HTTP 410 when `gone_as_http` is set.
- Nodes as the metadata client reads them: with `Accept: application/json;as=PartialObjectMetadataList;
  g=meta.k8s.io;v=v1` (lists) or `as=PartialObjectMetadata` (watches) the items are
  PartialObjectMetadata (metadata only); other Accept headers get whole Nodes.
- `GET /api/v1/namespaces/{name}` and `GET .../namespaces/{ns}/resourceclaims/{name}`: the
  object or 404.
- `POST .../namespaces/{ns}/resourceclaimtemplates`: 201 with the stored object, or 409
  `AlreadyExists`; `GET .../resourceclaimtemplates/{name}`: the object or 404;
  `PATCH` (merge patch of `metadata.labels`): the updated object or 404; `DELETE` with
  DeleteOptions `preconditions` (uid, resourceVersion): 200, 404, or 409 `Conflict` when a
  precondition does not hold, as kube-apiserver answers.
- `GET /version` (`git_version`), `GET /apis/resource.k8s.io` (v1), and the release probe's
  server-side dry run (`POST ...?dryRun=All`): the object back as stored, less the fields of the
  features in `drops` (as a release with those gates off answers), and nothing stored.
- Every request must carry the bearer token of the kubeconfig it writes, or gets 401.

Tests steer it: `put`/`delete` objects (each a new resourceVersion and a watch event), `hold` a
kind's events back (a watch that has fallen behind), `compact` the history, `expire_watches`
(ERROR 410 mid-stream), `drop_watches` (connections cut), `bookmark`, `stop`/`start` on the same
port (the API server going away and coming back).
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import yaml
from aiohttp import web

from app.cluster.release import Feature
from app.cluster.view import Kind

Obj = dict[str, Any]
TOKEN = "fake-apiserver-token"
RESOURCE_API = "/apis/resource.k8s.io/v1"

COLLECTIONS: dict[str, tuple[Kind, str]] = {
    "/api/v1/namespaces": (Kind.NAMESPACE, "v1"),
    "/api/v1/resourcequotas": (Kind.RESOURCE_QUOTA, "v1"),
    "/api/v1/nodes": (Kind.NODE, "v1"),
    "/api/v1/pods": (Kind.POD, "v1"),
    "/apis/scheduling.k8s.io/v1/priorityclasses": (Kind.PRIORITY_CLASS, "scheduling.k8s.io/v1"),
    f"{RESOURCE_API}/deviceclasses": (Kind.DEVICE_CLASS, "resource.k8s.io/v1"),
    f"{RESOURCE_API}/resourceslices": (Kind.RESOURCE_SLICE, "resource.k8s.io/v1"),
    f"{RESOURCE_API}/resourceclaims": (Kind.RESOURCE_CLAIM, "resource.k8s.io/v1"),
    f"{RESOURCE_API}/resourceclaimtemplates": (
        Kind.RESOURCE_CLAIM_TEMPLATE,
        "resource.k8s.io/v1",
    ),
    "/apis/scheduling.k8s.io/v1beta1/podgroups": (Kind.POD_GROUP, "scheduling.k8s.io/v1beta1"),
}
API_VERSION = {kind: version for kind, version in COLLECTIONS.values()}
METADATA = "application/json;as={};g=meta.k8s.io;v=v1"


def as_metadata(obj: Obj) -> Obj:
    """The PartialObjectMetadata of an object (what a metadata-only list or watch sends)."""
    return {
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj["metadata"],
    }


def status(code: int, reason: str, message: str) -> Obj:
    """A metav1.Status, as the API server sends with every error."""
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


@dataclass(frozen=True)
class Event:
    version: int
    kind: Kind
    type: str
    object: Obj


@dataclass(eq=False)
class _Watch:
    kind: Kind
    bookmarks: bool
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    expire: bool = False
    drop: bool = False
    pending_bookmarks: int = 0
    garble: bool = False
    metadata: bool = False
    """The client asked for PartialObjectMetadata."""


@dataclass
class Snapshot:
    version: int
    items: list[Obj]


class FakeApiServer:
    """The fake API server; `await start()`, steer it, `await stop()`."""

    def __init__(self) -> None:
        self.version = 1000
        self.store: dict[Kind, dict[tuple[str, str], Obj]] = {kind: {} for kind in Kind}
        self.history: list[Event] = []
        self.compacted = 0
        """Watches from a resourceVersion below this are answered 410."""
        self.held: set[Kind] = set()
        self.gone_as_http = False
        self.expire_continue = False
        self.broken_watches = False
        """Every new watch is answered 200 and then a line that is not JSON (a broken proxy)."""
        self.list_gate = asyncio.Event()
        self.list_gate.set()
        self.group_versions: tuple[str, ...] = ("v1beta1",)
        """The scheduling.k8s.io versions serving PodGroups (discovery and the collection);
        () is a release with the API off (PodGroups answered 404)."""
        self.refuse: dict[Kind, tuple[int, str]] = {}
        """Lists and watches of a kind answered with this (code, reason) instead."""
        self.create_error: tuple[int, str, str] | None = None
        self.before_create_response: Callable[[Obj], Awaitable[None]] | None = None
        self.before_delete: Callable[[Obj], Awaitable[None]] | None = None
        """Runs after a DELETE is received, before its preconditions are checked (a race)."""
        self.git_version = "v1.36.2"
        self.taint_rule_versions: tuple[str, ...] = ()
        """Versions of resource.k8s.io that serve DeviceTaintRule (listed in discovery)."""
        self.refuse_version = False
        """`GET /version` answered 503 (an API server not serving yet)."""
        self.drops: frozenset[Feature] = frozenset()
        """The DRA features whose fields a dry-run create drops (a release with them off)."""
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        """(method, path, query) of every request but the dry runs, in order."""
        self.dry_runs: list[str] = []
        """The paths of the server-side dry-run creates (the release probe's), in order."""
        self.accepts: list[tuple[str, str]] = []
        """(path, Accept header) of every request, in order."""
        self.port = 0
        self._watches: set[_Watch] = set()
        self._snapshots: dict[str, Snapshot] = {}
        self._snapshot_ids = itertools.count(1)
        self._runner: web.AppRunner | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        """Listen on 127.0.0.1 (the same port again after a stop)."""
        app = web.Application()
        app.router.add_route("*", "/{path:.*}", self._handle)
        self._runner = web.AppRunner(app, shutdown_timeout=0.2, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", self.port)
        await site.start()
        if not self.port:
            server = site._server
            assert server is not None
            self.port = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]

    async def stop(self) -> None:
        """Go away: open watches are cut, new connections refused."""
        if self._runner is not None:
            runner, self._runner = self._runner, None
            for watch in self._watches:
                watch.drop = True
                watch.wake.set()
            await runner.cleanup()

    def write_kubeconfig(self, path: Path) -> Path:
        """A kubeconfig for this server (plain HTTP on loopback, bearer token)."""
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "webhook", "user": {"token": TOKEN}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "webhook"}}],
            "current-context": "fake",
        }
        path.write_text(yaml.safe_dump(config))
        return path

    # -- steering ----------------------------------------------------------------------------

    def put(self, obj: Obj) -> Obj:
        """Create or update an object (a new resourceVersion and an ADDED/MODIFIED event)."""
        kind = Kind(obj["kind"])
        stored = copy.deepcopy(obj)
        stored.setdefault("apiVersion", API_VERSION[kind])
        meta = stored.setdefault("metadata", {})
        key = (meta.get("namespace", ""), meta["name"])
        previous = self.store[kind].get(key)
        self.version += 1
        meta["resourceVersion"] = str(self.version)
        meta.setdefault("uid", previous["metadata"]["uid"] if previous else str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", "2026-11-21T06:00:00Z")
        meta.setdefault(
            "managedFields",
            [{"manager": "kubectl", "operation": "Update", "fieldsV1": {"f:metadata": {}}}],
        )
        self.store[kind][key] = stored
        self._record(kind, "MODIFIED" if previous else "ADDED", stored)
        return copy.deepcopy(stored)

    def delete(self, kind: Kind, name: str, namespace: str = "") -> None:
        gone = self.store[kind].pop((namespace, name))
        self.version += 1
        gone["metadata"]["resourceVersion"] = str(self.version)
        self._record(kind, "DELETED", gone)

    def store_of_templates(self) -> list[Obj]:
        """The ResourceClaimTemplates stored (a dry run stores none)."""
        return list(self.store[Kind.RESOURCE_CLAIM_TEMPLATE].values())

    def hold(self, kind: Kind) -> None:
        """Keep `kind`'s events from open watches (they fall behind) until `release`."""
        self.held.add(kind)

    def release(self, kind: Kind) -> None:
        self.held.discard(kind)
        self._wake_all()

    def compact(self) -> None:
        """Forget the history: a watch from any older resourceVersion is now 410 Gone."""
        self.history.clear()
        self.compacted = self.version
        self._snapshots.clear()

    def expire_watches(self) -> None:
        """Send every open watch an ERROR event with a 410 Status, as a lagging watch cache."""
        for watch in self._watches:
            watch.expire = True
            watch.wake.set()

    def drop_watches(self) -> None:
        """Cut every open watch without an event (a proxy or API server restart)."""
        for watch in self._watches:
            watch.drop = True
            watch.wake.set()

    def garble_watches(self) -> None:
        """Send every open watch a line that is not JSON (a broken proxy), then end it."""
        for watch in self._watches:
            watch.garble = True
            watch.wake.set()

    def bookmark(self) -> None:
        """Send a BOOKMARK with the current resourceVersion to watches that allow them."""
        for watch in self._watches:
            watch.pending_bookmarks += 1
            watch.wake.set()

    def watching(self, kind: Kind) -> int:
        return sum(1 for watch in self._watches if watch.kind is kind)

    def queries(self, kind: Kind, *, watch: bool) -> list[dict[str, str]]:
        """Query parameters of the list (or watch) requests made for `kind`."""
        path = next(p for p, (k, _) in COLLECTIONS.items() if k is kind)
        return [
            query
            for method, p, query in self.requests
            if method == "GET" and p == path and (query.get("watch") == "true") == watch
        ]

    def _record(self, kind: Kind, event_type: str, obj: Obj) -> None:
        self.history.append(Event(self.version, kind, event_type, copy.deepcopy(obj)))
        self._wake_all()

    def _wake_all(self) -> None:
        for watch in self._watches:
            watch.wake.set()

    # -- HTTP --------------------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        if request.query.get("dryRun") == "All":
            self.dry_runs.append(request.path)
        else:
            self.requests.append((request.method, request.path, dict(request.query)))
        self.accepts.append((request.path, request.headers.get("Accept", "")))
        if request.headers.get("Authorization") != f"Bearer {TOKEN}":
            return _status_response(status(401, "Unauthorized", "Unauthorized"))
        path = request.path
        if request.method == "GET" and path == "/version" and self.refuse_version:
            return _status_response(status(503, "ServiceUnavailable", "not serving yet"))
        if request.method == "GET" and path == "/version":
            version = {"major": "1", "minor": [*self.git_version.split("."), "", ""][1]}
            return web.json_response({**version, "gitVersion": self.git_version})
        if request.method == "GET" and path == "/apis/resource.k8s.io":
            names = ["v1", *(v for v in self.taint_rule_versions if v != "v1")]
            versions = [{"groupVersion": f"resource.k8s.io/{v}", "version": v} for v in names]
            return web.json_response({"kind": "APIGroup", "versions": versions})
        if request.method == "GET" and path == "/apis/scheduling.k8s.io":
            versions = [{"groupVersion": f"scheduling.k8s.io/{v}", "version": v} for v in ("v1",)]
            versions += [
                {"groupVersion": f"scheduling.k8s.io/{v}", "version": v}
                for v in self.group_versions
            ]
            return web.json_response({"kind": "APIGroup", "versions": versions})
        if request.method == "GET" and path.startswith("/apis/scheduling.k8s.io/"):
            version = path.removeprefix("/apis/scheduling.k8s.io/")
            if version in self.group_versions:
                resources = [{"name": "podgroups", "kind": "PodGroup"}]
                return web.json_response({"kind": "APIResourceList", "resources": resources})
        if (
            request.method == "GET"
            and path.startswith("/apis/resource.k8s.io/v")
            and (path.count("/") == 3)
        ):
            version = path.rsplit("/", 1)[1]
            names = ["deviceclasses", "resourceslices"] if version == "v1" else []
            if version in self.taint_rule_versions:
                names.append("devicetaintrules")
            resources = [{"name": n, "kind": n} for n in names]
            return web.json_response({"kind": "APIResourceList", "resources": resources})
        if request.method == "GET" and path in COLLECTIONS:
            kind, _ = COLLECTIONS[path]
            if kind is Kind.POD_GROUP and "v1beta1" not in self.group_versions:
                return _status_response(status(404, "NotFound", "the server could not find it"))
            if kind in self.refuse:
                code, reason = self.refuse[kind]
                return _status_response(status(code, reason, f"{kind.value}: {reason.lower()}"))
            if request.query.get("watch") in ("true", "1"):
                return await self._watch(request, kind)
            return await self._list(request, kind)
        if request.method == "GET" and path.startswith("/api/v1/namespaces/"):
            name = path.removeprefix("/api/v1/namespaces/")
            found = self.store[Kind.NAMESPACE].get(("", name))
            if "/" in name or found is None:
                return _status_response(status(404, "NotFound", f'namespaces "{name}" not found'))
            return web.Response(body=orjson.dumps(found), content_type="application/json")
        parts = path.removeprefix(f"{RESOURCE_API}/namespaces/").split("/")
        if (
            request.method == "GET"
            and path.startswith(f"{RESOURCE_API}/namespaces/")
            and parts[1:2] == ["resourceclaims"]
            and len(parts) == 3
        ):
            found = self.store[Kind.RESOURCE_CLAIM].get((parts[0], parts[2]))
            if found is None:
                return _status_response(status(404, "NotFound", f"{parts[2]} not found"))
            return web.Response(body=orjson.dumps(found), content_type="application/json")
        if path.startswith(f"{RESOURCE_API}/namespaces/") and parts[1:2] == [
            "resourceclaimtemplates"
        ]:
            namespace = parts[0]
            if request.method == "POST" and len(parts) == 2:
                return await self._create(request, namespace)
            if request.method == "DELETE" and len(parts) == 3:
                return await self._delete_template(request, namespace, parts[2])
            if request.method == "PATCH" and len(parts) == 3:
                return await self._patch_template(request, namespace, parts[2])
            if request.method == "GET" and len(parts) == 3:
                found = self.store[Kind.RESOURCE_CLAIM_TEMPLATE].get((namespace, parts[2]))
                if found is None:
                    return _status_response(status(404, "NotFound", f"{parts[2]} not found"))
                return web.Response(body=orjson.dumps(found), content_type="application/json")
        return _status_response(status(404, "NotFound", "the server could not find it"))

    async def _list(self, request: web.Request, kind: Kind) -> web.Response:
        await self.list_gate.wait()
        limit = int(request.query.get("limit", "0") or 0)
        token = request.query.get("continue")
        if token:
            snapshot_id, _, offset_text = token.partition(":")
            snapshot = self._snapshots.get(snapshot_id)
            if snapshot is None or self.expire_continue:
                self.expire_continue = False
                return _status_response(
                    status(
                        410,
                        "Expired",
                        "The provided continue parameter is too old to display a consistent "
                        "list result. You can start a new list without the continue parameter.",
                    )
                )
            offset = int(offset_text)
        else:
            items = []
            for obj in self.store[kind].values():
                item = copy.deepcopy(obj)
                item.pop("kind", None)
                item.pop("apiVersion", None)
                items.append(item)
            snapshot_id = str(next(self._snapshot_ids))
            snapshot = Snapshot(self.version, items)
            self._snapshots[snapshot_id] = snapshot
            offset = 0
        end = offset + limit if limit else len(snapshot.items)
        metadata: Obj = {"resourceVersion": str(snapshot.version)}
        if end < len(snapshot.items):
            metadata["continue"] = f"{snapshot_id}:{end}"
        body = {
            "kind": f"{kind.value}List",
            "apiVersion": API_VERSION[kind],
            "metadata": metadata,
            "items": snapshot.items[offset:end],
        }
        if request.headers.get("Accept") == METADATA.format("PartialObjectMetadataList"):
            body["kind"], body["apiVersion"] = "PartialObjectMetadataList", "meta.k8s.io/v1"
            body["items"] = [as_metadata(item) for item in body["items"]]
        return web.Response(body=orjson.dumps(body), content_type="application/json")

    async def _watch(self, request: web.Request, kind: Kind) -> web.StreamResponse:
        since = int(request.query.get("resourceVersion") or self.version)
        timeout = float(request.query.get("timeoutSeconds", "1800"))
        too_old = status(410, "Expired", f"too old resource version: {since} ({self.compacted})")
        if since < self.compacted and self.gone_as_http:
            return _status_response(too_old)
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        if since < self.compacted:
            await _send(response, {"type": "ERROR", "object": too_old})
            return response
        watch = _Watch(
            kind,
            request.query.get("allowWatchBookmarks") == "true",
            metadata=request.headers.get("Accept") == METADATA.format("PartialObjectMetadata"),
        )
        watch.garble = self.broken_watches
        self._watches.add(watch)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        position = since
        try:
            while True:
                watch.wake.clear()
                if watch.drop:
                    if request.transport is not None:
                        request.transport.close()  # cut, not ended: the client sees a reset
                    break
                if watch.garble:
                    await response.write(b"<html>502 Bad Gateway</html>\n")
                    break
                if watch.expire:
                    message = f"too old resource version: {position} ({self.version})"
                    await _send(
                        response, {"type": "ERROR", "object": status(410, "Expired", message)}
                    )
                    break
                if kind not in self.held:
                    for event in [e for e in self.history if e.kind is kind]:
                        if event.version > position:
                            sent = as_metadata(event.object) if watch.metadata else event.object
                            await _send(response, {"type": event.type, "object": sent})
                            position = event.version
                while watch.pending_bookmarks:
                    watch.pending_bookmarks -= 1
                    if watch.bookmarks and kind not in self.held:
                        position = max(position, self.version)
                        await _send(
                            response,
                            {
                                "type": "BOOKMARK",
                                "object": {
                                    "kind": kind.value,
                                    "apiVersion": API_VERSION[kind],
                                    "metadata": {"resourceVersion": str(position)},
                                },
                            },
                        )
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                try:
                    await asyncio.wait_for(watch.wake.wait(), remaining)
                except TimeoutError:
                    break
        except ConnectionError:
            pass
        finally:
            self._watches.discard(watch)
        return response

    async def _create(self, request: web.Request, namespace: str) -> web.Response:
        body = orjson.loads(await request.read())
        if request.query.get("dryRun") == "All":
            return web.json_response(_dry_run(body, self.drops), status=201)
        name = body.get("metadata", {}).get("name")
        if self.create_error is not None:
            code, reason, message = self.create_error
            return _status_response(status(code, reason, message))
        if (namespace, name) in self.store[Kind.RESOURCE_CLAIM_TEMPLATE]:
            return _status_response(
                status(
                    409,
                    "AlreadyExists",
                    f'resourceclaimtemplates.resource.k8s.io "{name}" already exists',
                )
            )
        body.setdefault("kind", "ResourceClaimTemplate")
        body["metadata"]["namespace"] = namespace
        stored = self.put(body)
        if self.before_create_response is not None:
            await self.before_create_response(stored)
        return web.Response(body=orjson.dumps(stored), status=201, content_type="application/json")

    async def _delete_template(
        self, request: web.Request, namespace: str, name: str
    ) -> web.Response:
        options = orjson.loads(await request.read() or b"{}")
        if self.before_delete is not None:
            await self.before_delete(options)
        found = self.store[Kind.RESOURCE_CLAIM_TEMPLATE].get((namespace, name))
        if found is None:
            return _status_response(status(404, "NotFound", f"{name} not found"))
        wanted = options.get("preconditions") or {}
        meta = found["metadata"]
        for field_name in ("uid", "resourceVersion"):
            if wanted.get(field_name) and wanted[field_name] != meta.get(field_name):
                return _status_response(
                    status(
                        409,
                        "Conflict",
                        f"Operation cannot be fulfilled on resourceclaimtemplates.resource.k8s.io"
                        f' "{name}": the {field_name} in the precondition ({wanted[field_name]})'
                        f" does not match the {field_name} in record ({meta.get(field_name)})",
                    )
                )
        self.delete(Kind.RESOURCE_CLAIM_TEMPLATE, name, namespace)
        return web.Response(body=orjson.dumps(status(200, "", "")), content_type="application/json")

    async def _patch_template(
        self, request: web.Request, namespace: str, name: str
    ) -> web.Response:
        assert request.content_type == "application/merge-patch+json", request.content_type
        patch = orjson.loads(await request.read())
        found = self.store[Kind.RESOURCE_CLAIM_TEMPLATE].get((namespace, name))
        if found is None:
            return _status_response(status(404, "NotFound", f"{name} not found"))
        updated = copy.deepcopy(found)
        labels = updated["metadata"].setdefault("labels", {})
        labels.update(patch.get("metadata", {}).get("labels", {}))
        del updated["metadata"]["resourceVersion"]
        stored = self.put(updated)
        return web.Response(body=orjson.dumps(stored), content_type="application/json")


_DROPPED = {
    Feature.CONSUMABLE_CAPACITY: "capacity",
    Feature.DEVICE_TAINTS: "tolerations",
    Feature.ADMIN_ACCESS: "adminAccess",
}


def _dry_run(template: Obj, drops: frozenset[Feature]) -> Obj:
    """What a dry-run create answers: the template less the members of the dropped features."""
    answer = copy.deepcopy(template)
    for request in answer["spec"]["spec"]["devices"]["requests"]:
        exactly = request.get("exactly") or {}
        for feature in drops & _DROPPED.keys():
            exactly.pop(_DROPPED[feature], None)
        if Feature.PRIORITIZED_LIST in drops:
            request.pop("firstAvailable", None)
    return answer


def _status_response(body: Obj) -> web.Response:
    return web.Response(
        body=orjson.dumps(body), status=body["code"], content_type="application/json"
    )


async def _send(response: web.StreamResponse, event: Obj) -> None:
    await response.write(orjson.dumps(event) + b"\n")
