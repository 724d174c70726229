"""The live source: the cluster view kept current by list+watch on the API server.

Here: `LiveSource`, the view's writer and the webhook's one API client; `app/cluster/watch.py`
lists and watches one kind, `app/cluster/api.py` makes the calls and reads the answers.

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

import asyncio
import logging
import random
import time
from typing import Any
from urllib.parse import quote

import aiohttp
import orjson

from app.cluster.api import (
    MERGE_PATCH,
    RESOURCE_API,
    Api,
    Connect,
    api_path,
    connect,
    describe,
    is_namespace,
    object_or,
    status_text,
)
from app.cluster.backoff import Backoff
from app.cluster.probe import ProbeError, probe
from app.cluster.ratelimit import ExpiringSet, TokenBucket
from app.cluster.release import ServedRelease
from app.cluster.stats import SourceStats
from app.cluster.template_gc import TemplateCollector
from app.cluster.view import ClusterView, Kind, Obj
from app.cluster.watch import KindWatcher
from app.config.settings import Settings
from app.errors import TemplateConflictError, TemplateCreateError
from app.k8s.names import is_dns_label, is_dns_subdomain
from app.k8s.templates import LAST_USED_LABEL, template_mismatch

logger = logging.getLogger(__name__)


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
        self._watchers: list[KindWatcher] = []
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
        view.set_release(ServedRelease.unknown())
        self._release_due = asyncio.Event()

    async def start(self) -> None:
        """Connect, learn the release (one try: app.cluster.probe) and start one list+watch
        task per kind; returns before they have synced."""
        if self._api is not None:
            return
        self._api = Api(await self._connect())
        learned = await self._learn_release()
        self._tasks.append(asyncio.create_task(self._keep_release(learned), name="release probe"))
        for kind in Kind:
            watcher = KindWatcher(
                kind,
                self._api,
                view=self.view,
                stats=self.stats.kinds[kind],
                settings=self._settings,
                rng=self._rng,
                on_relisted=self._release_due.set,
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

    async def _learn_release(self) -> bool:
        """Probe the API server once; False (the view keeps what it had) when it failed."""
        assert self._api is not None
        try:
            release = await probe(
                self._api, self._settings.namespace, self._settings.api_timeout_seconds
            )
        except (ProbeError, TimeoutError, aiohttp.ClientError, OSError) as exc:
            logger.warning(
                "release probe failed: %s; nothing is written that some release drops until "
                "it succeeds",
                describe(exc),
            )
            return False
        if release != self.view.release:
            logger.info("API server release", extra={"release": release.describe()})
        self.view.set_release(release)
        return True

    async def _keep_release(self, learned: bool) -> None:
        """Retry a failed probe with backoff; probe again whenever a kind relists (an API
        server restarted, maybe upgraded, shows as one)."""
        backoff = Backoff(
            self._settings.backoff_initial_seconds,
            max(self._settings.backoff_max_seconds, self._settings.backoff_initial_seconds),
            self._rng,
        )
        while True:
            if learned:
                backoff.reset()
                await self._release_due.wait()
                # cleared before the probe, not before the wait: a relist while a probe runs (an
                # upgrade seen by one kind while another's relist is being probed) probes again
                self._release_due.clear()
            else:
                await asyncio.sleep(backoff.next_delay())
            learned = await self._learn_release()

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
            logger.warning("namespace lookup failed", extra={"ns": name, "error": describe(exc)})
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
        if not is_namespace(found, name):
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
                created = object_or(body, template)
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
                refused = 400 <= status < 500 and status not in (408, 429)
                raise TemplateCreateError(status_text(status, body), refused=refused)
        except TemplateCreateError:
            self.stats.template_errors += 1
            raise
        except TimeoutError as exc:
            self.stats.template_errors += 1
            timeout = self._settings.api_timeout_seconds
            raise TemplateCreateError(f"the API server did not answer within {timeout}s") from exc
        except (aiohttp.ClientError, OSError) as exc:
            self.stats.template_errors += 1
            raise TemplateCreateError(f"API server unreachable: {describe(exc)}") from exc
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
            raise TemplateCreateError(f"API server unreachable: {describe(exc)}") from exc
        if status == 404:
            found = self.view.get(Kind.RESOURCE_CLAIM_TEMPLATE, name, namespace)
            if found is not None:
                self.view.remove(Kind.RESOURCE_CLAIM_TEMPLATE, found)
            return False
        if status != 200:
            raise TemplateCreateError(status_text(status, body))
        self.stats.templates_touched += 1
        touched = object_or(body, {})
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
                extra={"ns": namespace, "template": name, "error": describe(exc)},
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
            extra={"ns": namespace, "template": name, "error": status_text(status, body)},
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
            f"that it is ours: {status_text(status, body)}"
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
