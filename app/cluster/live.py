"""The live source: the cluster view kept current by list+watch on the API server.

One task per kind. Each lists (in pages of `list_page_size`), hands the result to `view.replace`,
then watches from the list's resourceVersion with bookmarks, applying every event to the view:

- 410 Gone, as an HTTP status on a list or watch or as an ERROR event mid-stream, means the
  history we would resume from was compacted away: relist. `view.replace` drops the objects
  deleted during the gap.
- Any other failure (connection refused or reset, timeout, 5xx, 403, a garbled stream): wait with
  jittered exponential backoff (`Backoff`), then resume the watch from the last resourceVersion
  seen, or list again if no list has completed yet. The view keeps the last good state.
- A kind out of sync for longer than `stale_after_seconds` is marked stale in the view (so
  /readyz turns false and checks apply failure.staleView); it is fresh again once a list
  succeeds, or a watch delivers an event or stays up for a second. Kinds are stale from the
  start until their first list.

Objects stay raw dicts from the wire (orjson), slimmed to what policies read: the client's model
classes drop fields a newer API server sends. That is also why this is not built on
`kubernetes.aio.watch.Watch`: it decodes every event into those classes, and on 410 it retries
the same resourceVersion and then raises, where a cache must relist. The requests go through
kubernetes.aio's `ApiClient` (`param_serialize` + `call_api`: kubeconfig or service-account
auth, TLS, proxies, token refresh) and come back as raw aiohttp responses, read as a stream for
watches. The generated `CoreV1Api`/`ResourceV1Api` classes are not used: importing them costs
~1 s and ~30 MB per worker for ~350 model classes this path never touches, and their create
would validate the template into a model class.

The writes are to translation's ResourceClaimTemplates only. `create_claim_template`:
AlreadyExists is success once the stored template is
read back and found to be the one translation built (labelled as ours, the same spec; otherwise
TemplateConflictError), and the object enters the view before the call returns, so the next
admission finds it without waiting for the watch event (which, when it comes, is the same version
and changes nothing). `touch_claim_template` and `delete_claim_template` serve their garbage
collection (app.cluster.template_gc): a touch marks a template an admission relies on, a delete
is conditioned on the uid and resourceVersion judged unused.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeGuard
from urllib.parse import quote

import aiohttp
import orjson
from kubernetes.aio import client as k8s
from kubernetes.aio import config as k8s_config

from app.cluster.backoff import Backoff
from app.cluster.ratelimit import ExpiringSet, TokenBucket
from app.cluster.slim import slim
from app.cluster.stats import KindStats, SourceStats
from app.cluster.template_gc import TemplateCollector
from app.cluster.view import ClusterView, Kind, Obj, object_key
from app.config.settings import ClusterSource as SourceKind
from app.config.settings import Settings
from app.errors import ConfigError, TemplateConflictError, TemplateCreateError
from app.k8s.names import is_dns_label, is_dns_subdomain
from app.k8s.templates import LAST_USED_LABEL, template_mismatch

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
}
"""Where each kind is listed and watched, across all namespaces (see docs/rbac.md)."""
MERGE_PATCH = "application/merge-patch+json"
SHORT_WATCH_SECONDS = 1.0
"""A watch that ends cleanly sooner than this without any event counts as a failure (backoff),
so an API server that accepts and at once closes watches is not hammered."""
MAX_LIST_RESTARTS = 3
"""A paged list whose continue token expires (410) starts over, at most this many times."""


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
        content_type: str = "application/json",
    ) -> aiohttp.ClientResponse:
        """Send one request; the response with its body not read yet (the caller releases it)."""
        params = await self.client.param_serialize(
            method=method,
            resource_path=path,
            query_params=query or None,
            header_params={"Accept": "application/json", "Content-Type": content_type},
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
        body: Obj | None = None,
        timeout: float,
        content_type: str = "application/json",
    ) -> tuple[int, bytes]:
        """Send one request; its status and whole body."""
        response = await self.open(
            method, path, body=body, timeout=timeout, content_type=content_type
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


class LiveSource:
    """Fills `view` from the API server and keeps it current until stopped."""

    def __init__(
        self,
        view: ClusterView,
        settings: Settings,
        *,
        connector: Connect | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.view = view
        self.stats = SourceStats()
        self._settings = settings
        self._connect: Connect = connector or (lambda: connect(settings))
        self._rng = rng if rng is not None else random.Random()
        self._api: Api | None = None
        self._watchers: list[_KindWatcher] = []
        self._tasks: list[asyncio.Task[None]] = []
        now = time.monotonic()
        self._lookups = TokenBucket(
            settings.namespace_lookups_per_second, settings.namespace_lookup_burst, now
        )
        self._not_found = ExpiringSet(
            settings.namespace_not_found_seconds, settings.namespace_not_found_entries
        )
        self.collects_templates = settings.template_gc_grace_seconds > 0
        """Unused translation templates are deleted (app.cluster.template_gc): admissions that
        rely on one no claim uses yet touch it first (`touch_claim_template`)."""
        self.collector = TemplateCollector(
            view,
            self.delete_claim_template,
            self.stats,
            grace_seconds=settings.template_gc_grace_seconds,
        )
        for kind in Kind:
            view.mark_stale(kind)

    async def start(self) -> None:
        """Connect and start one list+watch task per kind; returns before they have synced."""
        if self._api is not None:
            return
        self._api = Api(await self._connect())
        for kind in Kind:
            watcher = _KindWatcher(
                kind,
                self._api,
                view=self.view,
                stats=self.stats.kinds[kind],
                settings=self._settings,
                rng=self._rng,
            )
            self._watchers.append(watcher)
            self._tasks.append(asyncio.create_task(watcher.run(), name=f"watch {kind.value}"))
        if self.collects_templates:
            interval = self._settings.template_gc_interval_seconds
            self._tasks.append(
                asyncio.create_task(self.collector.run(interval), name="template gc")
            )
        logger.info("watching the cluster", extra={"kinds": [k.value for k in Kind]})

    async def stop(self) -> None:
        """Cancel the watches and close the client; idempotent."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        for watcher in self._watchers:
            watcher.close()
        self._watchers.clear()
        if self._api is not None:
            api, self._api = self._api, None
            await api.close()

    async def lookup_namespace(self, name: str) -> Obj | None:
        """GET one namespace the view does not hold yet, and put it in the view.

        A namespace created together with its pods (one `kubectl apply`, a GitOps sync) can reach
        admission before its watch event. Like Gatekeeper, we then ask the API server once
        instead of guessing its mode label; the watch event that follows is harmless.

        The name comes from a review, so: only a DNS-1123 label is ever asked for, quoted into
        the path; the answer is taken only if it is a Namespace of that name; a name the API
        server does not know is not asked for again for `namespace_not_found_seconds`; and at
        most `namespace_lookups_per_second` (after a burst) are sent, so a flood of reviews naming
        made-up namespaces costs the API server a bounded number of calls. Every refusal is an
        unknown namespace, answered per failure.unknownNamespace.
        """
        if not is_dns_label(name):
            return None
        now = time.monotonic()
        if self._not_found.contains(name, now):
            return None
        if not self._lookups.take(now):
            logger.warning("namespace lookup skipped: over the rate limit", extra={"ns": name})
            return None
        try:
            status, body = await self._request("GET", api_path("api", "v1", "namespaces", name))
        except (TemplateCreateError, TimeoutError, aiohttp.ClientError, OSError) as exc:
            logger.warning("namespace lookup failed", extra={"ns": name, "error": _describe(exc)})
            return None
        if status != 200:
            if status == 404:
                self._not_found.add(name, time.monotonic())
            else:
                logger.warning("namespace lookup failed", extra={"ns": name, "status": status})
            return None
        try:
            found = orjson.loads(body)
        except orjson.JSONDecodeError:
            return None
        if not _is_namespace(found, name):
            logger.warning("namespace lookup answered with another object", extra={"ns": name})
            return None
        if self.view.namespace_labels(name) is None:
            self.view.apply(Kind.NAMESPACE, found)
        return found

    async def create_claim_template(self, template: dict[str, Any]) -> None:
        """Create a ResourceClaimTemplate. Raises TemplateCreateError.

        AlreadyExists is success when the stored template, read back, is the one we sent
        (`template_mismatch`); one of that name with other content raises TemplateConflictError,
        and one that cannot be read back raises TemplateCreateError: it is never taken on trust.
        On success the template is in the view before this returns. When the view already holds
        it (its watch event won the race) the view's copy is kept: it is at least as new. A relist
        of templates already under way may drop it again until the watch brings it back; a
        request in that window gets AlreadyExists, which is success too.
        """
        meta = template.get("metadata") or {}
        namespace, name = meta.get("namespace"), meta.get("name")
        if not isinstance(namespace, str) or not isinstance(name, str):
            raise TemplateCreateError("the template has no metadata.namespace or metadata.name")
        if not is_dns_label(namespace) or not is_dns_subdomain(name):
            raise TemplateCreateError(f"invalid template namespace or name {namespace}/{name}")
        collection = api_path(
            "apis", "resource.k8s.io", "v1", "namespaces", namespace, "resourceclaimtemplates"
        )
        try:
            status, body = await self._request("POST", collection, template)
            if status in (200, 201, 202):
                created = _object_or(body, template)
                self.stats.templates_created += 1
            elif status == 409:
                created = await self._existing_template(
                    f"{collection}/{quote(name, safe='')}", template
                )
                problem = template_mismatch(created, template)
                if problem is not None:
                    # it exists: the view may hold it (the next admission is answered from there)
                    if self.view.get(Kind.RESOURCE_CLAIM_TEMPLATE, name, namespace) is None:
                        self.view.apply(Kind.RESOURCE_CLAIM_TEMPLATE, created)
                    raise TemplateConflictError(
                        f"ResourceClaimTemplate {namespace}/{name} already exists, but {problem}"
                    )
                self.stats.templates_existing += 1
            else:
                raise TemplateCreateError(_status_text(status, body))
        except TemplateCreateError:
            self.stats.template_errors += 1
            raise
        except TimeoutError as exc:
            self.stats.template_errors += 1
            timeout = self._settings.api_timeout_seconds
            raise TemplateCreateError(f"the API server did not answer within {timeout}s") from exc
        except (aiohttp.ClientError, OSError) as exc:
            self.stats.template_errors += 1
            raise TemplateCreateError(f"API server unreachable: {_describe(exc)}") from exc
        if self.view.get(Kind.RESOURCE_CLAIM_TEMPLATE, name, namespace) is None:
            self.view.apply(Kind.RESOURCE_CLAIM_TEMPLATE, created)

    async def touch_claim_template(self, namespace: str, name: str) -> bool:
        """Mark a template as relied on now (LAST_USED_LABEL); False when it no longer exists.

        The write changes its resourceVersion, so a garbage-collection delete decided on the
        version before fails its precondition (app.cluster.template_gc). Raises
        TemplateCreateError when the API server cannot be asked.
        """
        path = f"{RESOURCE_API}/namespaces/{namespace}/resourceclaimtemplates/{name}"
        patch = {"metadata": {"labels": {LAST_USED_LABEL: f"{time.time():.6f}"}}}
        try:
            status, body = await self._request("PATCH", path, patch, MERGE_PATCH)
        except TimeoutError as exc:
            timeout = self._settings.api_timeout_seconds
            raise TemplateCreateError(f"the API server did not answer within {timeout}s") from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise TemplateCreateError(f"API server unreachable: {_describe(exc)}") from exc
        if status == 404:
            found = self.view.get(Kind.RESOURCE_CLAIM_TEMPLATE, name, namespace)
            if found is not None:
                self.view.remove(Kind.RESOURCE_CLAIM_TEMPLATE, found)
            return False
        if status != 200:
            raise TemplateCreateError(_status_text(status, body))
        self.stats.templates_touched += 1
        touched = _object_or(body, {})
        if touched:
            self.view.apply(Kind.RESOURCE_CLAIM_TEMPLATE, touched)
        return True

    async def delete_claim_template(self, template: Obj) -> str:
        """Delete the version of `template` the view holds, and only that one.

        "deleted"; "gone" when it did not exist (NotFound is success); "changed" when its uid or
        resourceVersion no longer match (409: touched or replaced meanwhile, so kept); "error".
        """
        meta = template["metadata"]
        namespace, name = meta.get("namespace") or "", meta["name"]
        path = f"{RESOURCE_API}/namespaces/{namespace}/resourceclaimtemplates/{name}"
        options = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "preconditions": {
                "uid": meta.get("uid"),
                "resourceVersion": meta.get("resourceVersion"),
            },
        }
        try:
            status, body = await self._request("DELETE", path, options)
        except (TemplateCreateError, TimeoutError, aiohttp.ClientError, OSError) as exc:
            logger.warning(
                "template delete failed",
                extra={"ns": namespace, "template": name, "error": _describe(exc)},
            )
            return "error"
        if status in (200, 202):
            return "deleted"
        if status == 404:
            return "gone"
        if status == 409:
            return "changed"
        logger.warning(
            "template delete failed",
            extra={"ns": namespace, "template": name, "error": _status_text(status, body)},
        )
        return "error"

    async def _existing_template(self, path: str, sent: Obj) -> Obj:
        """The stored template after AlreadyExists. Raises TemplateCreateError if unreadable."""
        name = f"{sent['metadata']['namespace']}/{sent['metadata']['name']}"
        status, body = await self._request("GET", path)
        if status == 200:
            try:
                stored = orjson.loads(body)
            except orjson.JSONDecodeError:
                stored = None
            if isinstance(stored, dict) and isinstance(stored.get("metadata"), dict):
                return stored
        raise TemplateCreateError(
            f"ResourceClaimTemplate {name} already exists but could not be read back to check "
            f"that it is ours: {_status_text(status, body)}"
        )

    async def _request(
        self,
        method: str,
        path: str,
        body: Obj | None = None,
        content_type: str = "application/json",
    ) -> tuple[int, bytes]:
        if self._api is None:
            raise TemplateCreateError("the live cluster source is not started")
        return await self._api.request(
            method,
            path,
            body=body,
            timeout=self._settings.api_timeout_seconds,
            content_type=content_type,
        )


class _GoneError(Exception):
    """410: the resourceVersion (or continue token) is too old; only a fresh list helps."""


class _StatusError(Exception):
    """The API server answered a list or watch with an error status."""


class _KindWatcher:
    """List, then watch, one kind, for as long as the task runs."""

    def __init__(
        self,
        kind: Kind,
        api: Api,
        *,
        view: ClusterView,
        stats: KindStats,
        settings: Settings,
        rng: random.Random,
    ) -> None:
        self.kind = kind
        self._api = api
        self._path = COLLECTIONS[kind]
        self._view = view
        self._stats = stats
        self._settings = settings
        self._rng = rng
        self._backoff = Backoff(
            settings.backoff_initial_seconds,
            max(settings.backoff_max_seconds, settings.backoff_initial_seconds),
            rng,
        )
        self._out_of_sync = False
        self._stale_timer: asyncio.TimerHandle | None = None
        self._version: str | None = None
        """Where the watch resumes: the last list's or event's resourceVersion; None: list."""

    async def run(self) -> None:
        while True:
            try:
                if self._version is None:
                    self._version = await self._list()
                await self._watch(self._version)
            except _GoneError as exc:
                self._lost(str(exc))
                self._stats.relists += 1
                logger.info(
                    "cluster %s: %s; relisting",
                    self.kind.value,
                    exc,
                    extra={"kind": self.kind.value},
                )
                self._version = None
                delay = self._backoff.next_delay()
                if self._backoff.failures > 1:  # gone again before any progress: slow down
                    await asyncio.sleep(delay)
            except Exception as exc:  # never let the task die: keep retrying with backoff
                self._lost(_describe(exc))
                delay = self._backoff.next_delay()
                logger.warning(
                    "cluster %s: %s; retrying in %.2fs",
                    self.kind.value,
                    _describe(exc),
                    delay,
                    extra={"kind": self.kind.value, "failures": self._backoff.failures},
                )
                await asyncio.sleep(delay)

    def close(self) -> None:
        if self._stale_timer is not None:
            self._stale_timer.cancel()
            self._stale_timer = None

    # -- list ------------------------------------------------------------------------------

    async def _list(self) -> str:
        """List every object in pages; replace the view's objects; the list's resourceVersion."""
        items: list[Obj] = []
        token: str | None = None
        restarts = 0
        while True:
            query = [("limit", str(self._settings.list_page_size))]
            if token is not None:
                query.append(("continue", token))
            response = await self._api.open(
                "GET", self._path, query=query, timeout=self._settings.list_timeout_seconds
            )
            try:
                page = await _read_json(response)
            except _GoneError:
                if token is None or restarts >= MAX_LIST_RESTARTS:
                    raise
                restarts += 1  # the continue token expired: a consistent list starts over
                items.clear()
                token = None
                continue
            items.extend(self._usable(page.get("items")))
            meta = page.get("metadata")
            meta = meta if isinstance(meta, dict) else {}
            token = meta.get("continue") or None
            if token is None:
                version = meta.get("resourceVersion")
                if not isinstance(version, str) or not version:
                    raise ValueError("list response has no metadata.resourceVersion")
                break
        self._view.replace(self.kind, items)
        self._stats.lists += 1
        self._stats.listed = True
        logger.info(
            "cluster %s listed",
            self.kind.value,
            extra={"kind": self.kind.value, "objects": len(items), "resource_version": version},
        )
        self._in_sync()
        return version

    def _usable(self, items: Any) -> list[Obj]:
        """The slimmed items of one page, without those the view cannot key (counted)."""
        kept: list[Obj] = []
        for raw in items if isinstance(items, list) else ():
            obj = slim(self.kind, raw) if isinstance(raw, dict) else None
            try:
                if obj is None:
                    raise ValueError("item is not an object")
                object_key(obj)
            except ValueError as exc:
                self._stats.errors += 1
                logger.warning("cluster %s: skipped an item: %s", self.kind.value, exc)
                continue
            kept.append(obj)
        return kept

    # -- watch -----------------------------------------------------------------------------

    async def _watch(self, version: str) -> None:
        """Watch from `version` until the stream ends, moving `_version` on with each event."""
        loop = asyncio.get_running_loop()
        timeout = self._settings.watch_timeout_seconds * self._rng.uniform(1.0, 2.0)
        started = loop.time()
        query = [
            ("watch", "true"),
            ("resourceVersion", version),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", str(max(1, round(timeout)))),
        ]
        response = await self._api.open(
            "GET",
            self._path,
            query=query,
            timeout=timeout + self._settings.api_timeout_seconds,
        )
        progressed = False
        confirm: asyncio.TimerHandle | None = None
        try:
            if response.status != 200:
                raise _error_for(response.status, await response.read())
            # In sync once the stream proves itself: an event, or a second without failing.
            # Not at the 200 itself: a server that accepts watches and breaks them at once would
            # otherwise keep resetting the stale clock.
            confirm = loop.call_later(SHORT_WATCH_SECONDS, self._in_sync)
            while line := await self._next_line(response):
                if line.strip():
                    self._handle(orjson.loads(line))
                    if not progressed:
                        progressed = True
                        self._backoff.reset()
                        self._in_sync()
        finally:
            if confirm is not None:
                confirm.cancel()
            response.close()
        if not progressed and loop.time() - started < SHORT_WATCH_SECONDS:
            await asyncio.sleep(self._backoff.next_delay())

    async def _next_line(self, response: aiohttp.ClientResponse) -> bytes:
        """The next event line; b"" at the end of the stream, or when it has been silent for
        `watch_idle_seconds` (kube-apiserver sends a bookmark about every minute, so silence
        means a dropped connection no FIN ever announced: reopen from the last resourceVersion).
        """
        idle = asyncio.timeout(self._settings.watch_idle_seconds)
        try:
            async with idle:
                return await response.content.readline()
        except TimeoutError:
            if not idle.expired():
                raise  # aiohttp's own request timeout
            self._stats.idle_reconnects += 1
            logger.info(
                "cluster %s: watch silent for %ss, reopening it",
                self.kind.value,
                self._settings.watch_idle_seconds,
                extra={"kind": self.kind.value},
            )
            return b""

    def _handle(self, event: Any) -> None:
        """Apply one watch event to the view and remember its resourceVersion."""
        if not isinstance(event, dict) or not isinstance(event.get("object"), dict):
            raise ValueError("watch event without an object")
        kind_of_event, obj = event.get("type"), event["object"]
        self._stats.events[str(kind_of_event)] += 1
        if kind_of_event == "ERROR":
            raise _error_for(int(obj.get("code") or 500), orjson.dumps(obj))
        meta = obj.get("metadata")
        seen = meta.get("resourceVersion") if isinstance(meta, dict) else None
        try:
            if kind_of_event in ("ADDED", "MODIFIED"):
                self._view.apply(self.kind, obj)
            elif kind_of_event == "DELETED":
                self._view.remove(self.kind, obj)
            elif kind_of_event != "BOOKMARK":
                logger.info("cluster %s: ignored %s event", self.kind.value, kind_of_event)
        except ValueError as exc:
            self._stats.errors += 1
            logger.warning(
                "cluster %s: skipped a %s event: %s", self.kind.value, kind_of_event, exc
            )
        if isinstance(seen, str) and seen:
            self._version = seen

    # -- sync state ------------------------------------------------------------------------

    def _in_sync(self) -> None:
        self._stats.in_sync = True
        self._out_of_sync = False
        self.close()
        if self.kind in self._view.stale_kinds:
            self._view.mark_fresh(self.kind)
            logger.info("cluster %s in sync", self.kind.value, extra={"kind": self.kind.value})

    def _lost(self, error: str) -> None:
        self._stats.in_sync = False
        self._stats.errors += 1
        self._stats.last_error = error
        if self._out_of_sync:
            return
        self._out_of_sync = True
        if self.kind not in self._view.stale_kinds:
            self._stale_timer = asyncio.get_running_loop().call_later(
                self._settings.stale_after_seconds, self._go_stale
            )

    def _go_stale(self) -> None:
        self._stale_timer = None
        self._view.mark_stale(self.kind)
        logger.warning(
            "cluster %s out of sync for over %ss: stale (%s)",
            self.kind.value,
            self._settings.stale_after_seconds,
            self._stats.last_error,
            extra={"kind": self.kind.value},
        )


async def _read_json(response: aiohttp.ClientResponse) -> Obj:
    try:
        data = await response.read()
    finally:
        response.release()
    if response.status != 200:
        raise _error_for(response.status, data)
    body = orjson.loads(data)
    if not isinstance(body, dict):
        raise ValueError("list response is not an object")
    return body


def _is_namespace(found: Any, name: str) -> TypeGuard[Obj]:
    """Whether an answer to GET /api/v1/namespaces/<name> is that Namespace."""
    if not isinstance(found, dict) or found.get("kind") != "Namespace":
        return False
    if found.get("apiVersion") != "v1":
        return False
    meta = found.get("metadata")
    return isinstance(meta, dict) and meta.get("name") == name


def _error_for(status: int, body: bytes) -> Exception:
    text = _status_text(status, body)
    return _GoneError(text) if status == 410 else _StatusError(text)


def _status_text(status: int, body: bytes) -> str:
    """`<code> <reason>: <message>` from a Status body, or the start of whatever came back."""
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        parsed = None
    if isinstance(parsed, dict) and parsed.get("kind") == "Status":
        reason = parsed.get("reason") or ""
        return f"{status} {reason}: {parsed.get('message') or ''}".replace(" :", ":")
    return f"HTTP {status}: {body[:200].decode('utf-8', 'replace')}"


def _object_or(body: bytes, fallback: Obj) -> Obj:
    """The object in a response body, or `fallback` when the body is not one."""
    try:
        found = orjson.loads(body)
    except orjson.JSONDecodeError:
        return fallback
    return (
        found if isinstance(found, dict) and isinstance(found.get("metadata"), dict) else fallback
    )


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
