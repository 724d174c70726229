"""Garbage collection of translation's ResourceClaimTemplates that nothing uses any more.

A template labelled as managed by dra-webhook is removed once, for `template_gc_grace_seconds`
in a row, no ResourceClaim made from it exists (`ManagedTemplates.in_use`) and no admission has
touched it (`LAST_USED_LABEL`). Templates of pods the API server rejected after our /mutate, of
Deployments scaled to zero, of shapes no longer asked for, go; a shape asked for again gets its
template re-created by the next admission, as the first time.

Every replica runs the collector; no leader is needed because each delete is conditional:

- the DELETE carries `preconditions: {uid, resourceVersion}` of the version judged unused, so a
  template touched since (an admission wrote `LAST_USED_LABEL` before relying on it) or replaced
  is not deleted (409 Conflict: kept, judged again later);
- NotFound is success (another replica, or the user, removed it first);
- an admission that relies on a template with no claims touches it first; if the touch finds it
  gone (404) the admission creates it again before answering. Either the touch lands first (the
  delete fails its precondition) or the delete does (the touch sees 404): a template an admitted
  pod references is never left deleted.

Nothing runs while templates or claims are stale: an outdated view could make a used template
look unused. At most `MAX_DELETES_PER_PASS` deletes per pass, so a large backlog is spread out.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from app.cluster.stats import SourceStats
from app.cluster.templates import ManagedTemplates
from app.cluster.view import ClusterView, Kind, Obj
from app.k8s.templates import LAST_USED_LABEL

logger = logging.getLogger(__name__)

MAX_DELETES_PER_PASS = 50

Delete = Callable[[Obj], Awaitable[str]]
"""Delete one template conditionally: "deleted", "gone" (404), "changed" (409) or "error"."""


def last_used(template: Obj) -> float | None:
    """The Unix time in the template's LAST_USED_LABEL, if any."""
    labels = (template.get("metadata") or {}).get("labels")
    value = labels.get(LAST_USED_LABEL) if isinstance(labels, dict) else None
    try:
        return float(value) if isinstance(value, str) else None
    except ValueError:
        return None


class TemplateCollector:
    """Finds unused managed templates in the view and deletes them through `delete`."""

    def __init__(
        self,
        view: ClusterView,
        delete: Delete,
        stats: SourceStats,
        *,
        grace_seconds: float,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._view = view
        self._delete = delete
        self._stats = stats
        self._grace = grace_seconds
        self._clock = clock
        self._wall = wall_clock
        self._index = view.derived(ManagedTemplates)
        self._unused_since: dict[tuple[str, str], float] = {}

    async def run(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            try:
                await self.collect()
            except Exception:  # never let the task die; the next pass tries again
                logger.exception("template garbage collection failed")

    async def collect(self) -> int:
        """One pass; returns the number of templates deleted."""
        stale = self._view.stale_kinds
        if Kind.RESOURCE_CLAIM_TEMPLATE in stale or Kind.RESOURCE_CLAIM in stale:
            return 0
        now, wall = self._clock(), self._wall()
        managed = self._index.names()
        current = set(managed)
        for key in [k for k in self._unused_since if k not in current]:
            del self._unused_since[key]
        due: list[Obj] = []
        for key in managed:
            if self._index.in_use(*key):
                self._unused_since.pop(key, None)
                continue
            since = self._unused_since.setdefault(key, now)
            template = self._view.get(Kind.RESOURCE_CLAIM_TEMPLATE, key[1], key[0])
            if template is None or now - since < self._grace:
                continue
            touched = last_used(template)
            if touched is not None and wall - touched < self._grace:
                continue
            due.append(template)
            if len(due) >= MAX_DELETES_PER_PASS:
                break
        deleted = 0
        for template in due:
            deleted += await self._remove(template, now)
        return deleted

    async def _remove(self, template: Obj, now: float) -> int:
        meta = template["metadata"]
        key = (meta.get("namespace") or "", meta["name"])
        if self._index.in_use(*key):  # re-checked: a claim may have come while we awaited
            return 0
        result = await self._delete(template)
        unused_for = now - self._unused_since.get(key, now)
        if result in ("deleted", "gone"):
            self._unused_since.pop(key, None)
            self._stats.templates_deleted += result == "deleted"
            if self._view.get(Kind.RESOURCE_CLAIM_TEMPLATE, key[1], key[0]) is template:
                self._view.remove(Kind.RESOURCE_CLAIM_TEMPLATE, template)
            logger.info(
                "removed unused ResourceClaimTemplate %s/%s",
                key[0],
                key[1],
                extra={
                    "ns": key[0],
                    "template": key[1],
                    "result": result,
                    "unused_seconds": round(unused_for),
                },
            )
            return 1 if result == "deleted" else 0
        if result == "changed":
            self._stats.templates_kept += 1
            logger.info(
                "kept ResourceClaimTemplate %s/%s: changed since it was found unused",
                key[0],
                key[1],
                extra={"ns": key[0], "template": key[1]},
            )
        else:
            self._stats.template_delete_errors += 1
        return 0
