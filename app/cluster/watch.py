"""List, then watch, one kind of the cluster view, for as long as its task runs.

The live source (`app/cluster/live.py`, whose docstring says why it is not built on
`kubernetes.aio.watch.Watch`) runs one `KindWatcher` per kind: a paged list handed to
`view.replace`, then a watch from the list's resourceVersion with bookmarks, every event applied
to the view; 410 Gone relists, any other failure backs off and resumes; a kind out of sync for
longer than `stale_after_seconds` is marked stale.

A kind the webhook works without (`OPTIONAL_KINDS`: Nodes, read for their labels; PriorityClasses;
the Pods that hold claims; PodGroups, read for their group claims, served only where their gates
are on) answered 403 or 404 is not an outage: the view holds none of it, stays fresh and ready,
one warning says what is missing (and `KindStats.forbidden` the metric), and the list is tried
again every `backoff_max_seconds` in case the permission is granted (or the API turned on)
later.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from typing import Any

import aiohttp
import orjson

from app.cluster.api import (
    ACCEPT,
    COLLECTIONS,
    FIELD_SELECTORS,
    JSON,
    OPTIONAL_KINDS,
    Api,
    ForbiddenError,
    GoneError,
    NotServedError,
    StatusError,
    collection,
    describe,
    error_for,
    read_json,
)
from app.cluster.backoff import Backoff
from app.cluster.slim import slim
from app.cluster.stats import KindStats
from app.cluster.view import ClusterView, Kind, Obj, held, object_key
from app.config.settings import Settings

logger = logging.getLogger(__name__)

SHORT_WATCH_SECONDS = 1.0
"""A watch that ends cleanly sooner than this without any event counts as a failure (backoff),
so an API server that accepts and at once closes watches is not hammered."""
MAX_LIST_RESTARTS = 3
"""A paged list whose continue token expires (410) starts over, at most this many times."""


class KindWatcher:
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
        on_relisted: Callable[[], None] | None = None,
    ) -> None:
        self.kind = kind
        self._on_relisted = on_relisted
        """Called after every list but the first: the API server may have been restarted or
        upgraded meanwhile (app.cluster.live re-learns its release)."""
        self._api = api
        self._path = COLLECTIONS[kind]
        self._accept = ACCEPT.get(kind, (JSON, JSON))
        selector = FIELD_SELECTORS.get(kind)
        self._selector = [("fieldSelector", selector)] if selector else []
        """The Accept header of the list and of the watch (metadata only for Nodes)."""
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
            except GoneError as exc:
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
            except (ForbiddenError, NotServedError) as exc:
                if self.kind not in OPTIONAL_KINDS:
                    await self._retry(exc)
                    continue
                self._not_granted(exc)
                await asyncio.sleep(self._settings.backoff_max_seconds)
            except Exception as exc:  # never let the task die: keep retrying with backoff
                await self._retry(exc)

    async def _retry(self, exc: Exception) -> None:
        """Any failure but 410: keep the view, back off, resume from the last version."""
        self._lost(describe(exc))
        delay = self._backoff.next_delay()
        logger.warning(
            "cluster %s: %s; retrying in %.2fs",
            self.kind.value,
            describe(exc),
            delay,
            extra={"kind": self.kind.value, "failures": self._backoff.failures},
        )
        await asyncio.sleep(delay)

    def _not_granted(self, exc: StatusError) -> None:
        """403 (not granted) or 404 (not served) on a kind the webhook works without: the view
        holds none of it (what it knew may be outdated by now) and is synced and fresh for it;
        said once."""
        self._version = None
        if not self._stats.forbidden:
            self._stats.forbidden = True
            self._stats.errors += 1
            self._stats.last_error = str(exc)
            logger.warning(
                "cluster %s: %s; without it %s (grant list and watch on %s: docs/rbac.md)",
                self.kind.value,
                exc,
                OPTIONAL_KINDS[self.kind],
                self._path.rsplit("/", 1)[-1],
                extra={"kind": self.kind.value},
            )
        if self._view.objects(self.kind) or self.kind not in self._view.synced_kinds():
            self._view.replace(self.kind, [])
        self._stats.in_sync = False
        self._out_of_sync = False
        self.close()
        if self.kind in self._view.stale_kinds:
            self._view.mark_fresh(self.kind)

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
            query = [("limit", str(self._settings.list_page_size)), *self._selector]
            if token is not None:
                query.append(("continue", token))
            if token is None:
                self._path = collection(self.kind, self._view.release)
            response = await self._api.open(
                "GET",
                self._path,
                query=query,
                timeout=self._settings.list_timeout_seconds,
                accept=self._accept[0],
            )
            try:
                page = await read_json(response)
            except GoneError:
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
        if self._stats.lists > 1 and self._on_relisted is not None:
            self._on_relisted()
        if self._stats.forbidden:
            self._stats.forbidden = False
            logger.info("cluster %s: readable again", self.kind.value)
        logger.info(
            "cluster %s listed",
            self.kind.value,
            extra={"kind": self.kind.value, "objects": len(items), "resource_version": version},
        )
        self._in_sync()
        return version

    def _usable(self, items: Any) -> list[Obj]:
        """The slimmed items of one page the view holds, without those it cannot key
        (counted)."""
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
            if held(self.kind, obj):  # (most pods are not: dropped per page, bounding the list)
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
            *self._selector,
        ]
        response = await self._api.open(
            "GET",
            self._path,
            query=query,
            timeout=timeout + self._settings.api_timeout_seconds,
            accept=self._accept[1],
        )
        progressed = False
        confirm: asyncio.TimerHandle | None = None
        try:
            if response.status != 200:
                raise error_for(response.status, await response.read())
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
            raise error_for(int(obj.get("code") or 500), orjson.dumps(obj))
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
