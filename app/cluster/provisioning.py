"""Making the ResourceClaimTemplates a translated pod references exist before it is admitted.

The cluster layer is the only writer to the API; this is its admission-time half (garbage
collection, `app.cluster.template_gc`, is the other). `Provisioner.ensure` takes the templates
of one decision and answers with one `Outcome`: what it means for the review (denied, or admitted
untranslated, per `failure.templateCreate`) is the verdict's (`app.verdict.provisioned`).

- The view is the cache: a template it holds costs no API call, and is only reused when it is
  the one translation built (`template_mismatch`); one of that name with other content is a
  conflict, on dry runs too. Dry runs create nothing.
- One API call per template however many admissions need it: creates and touches go through one
  `SingleFlight` keyed by (namespace, name), so a burst of pods of a new shape makes one create,
  and a failure is shared by the admissions that awaited it (not remembered: the next admission
  tries again). The templates of one decision are made concurrently.
- With garbage collection on (the source `collects_templates`), a template no claim was made
  from, that this replica has not touched for a quarter of the grace period, is touched before
  a pod relies on it (the collector could be about to delete it), and created again if the touch
  finds it gone.

Every call is awaited, never blocking the event loop: the create comes back through this same
webhook (it watches ResourceClaimTemplates), so a blocked loop would deadlock a single worker.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from app.bounded import BoundedCache, CacheName
from app.cluster.singleflight import SingleFlight
from app.cluster.source import ClusterSource
from app.cluster.templates import ManagedTemplates
from app.cluster.view import Kind, Obj
from app.errors import TemplateConflictError, TemplateCreateError
from app.k8s.templates import template_mismatch

TOUCH_MEMO_LIMIT = 4096

Key = tuple[str, str]
"""(namespace, name) of a template."""


class Status(StrEnum):
    CREATED = "created"
    """Created by this call (AlreadyExists with the same content counts: the source checks)."""
    EXISTED = "existed"
    """The view holds it as translation builds it (touched first when it was idle)."""
    DRY_RUN = "dry-run"
    """A dry run: no template the view lacks was created, none idle was touched."""
    CONFLICT = "conflict"
    """One of its name exists with other content, or not labelled as ours: never reused."""
    REFUSED = "refused"
    """The API server answered and refused it: asking again cannot help."""
    FAILED = "failed"
    """The API server could not be asked (timeout, unreachable, overloaded): a retry may help."""


_MADE = frozenset({Status.CREATED, Status.EXISTED, Status.DRY_RUN})


@dataclass(frozen=True, slots=True)
class Outcome:
    """How making a decision's templates went: its first failure, else whether one was created."""

    status: Status
    template: str = ""
    """The template that failed (its name)."""
    reason: str = ""
    """Why: the API server's answer, or what differs from the template translation built."""

    @property
    def ok(self) -> bool:
        """Every template is there (or, on a dry run, nothing says it could not be)."""
        return self.status in _MADE


CREATED = Outcome(Status.CREATED)
EXISTED = Outcome(Status.EXISTED)
DRY_RUN = Outcome(Status.DRY_RUN)


class Provisioner:
    """Creates and touches the templates admissions rely on, one call per template in flight.

    `on_create` is called once for every template created (a metric); `gc_grace_seconds` is the
    collector's grace period, a quarter of which a touch stays fresh.
    """

    def __init__(
        self,
        source: ClusterSource,
        *,
        gc_grace_seconds: float,
        on_create: Callable[[], None] = lambda: None,
    ) -> None:
        self.source = source
        self._on_create = on_create
        self._calls: SingleFlight[Key, Outcome] = SingleFlight()
        """Creates and touches in flight: shared by concurrent admissions."""
        self._collected = (
            source.view.derived(ManagedTemplates)
            if getattr(source, "collects_templates", False)
            else None
        )
        """With template garbage collection: which templates claims were made from."""
        self._touched: BoundedCache[Key, float] = BoundedCache(
            CacheName.TEMPLATE_TOUCHES, TOUCH_MEMO_LIMIT
        )
        """Templates this replica touched (or created), and when (monotonic)."""
        self._touch_every = gc_grace_seconds / 4
        self._compared: BoundedCache[tuple[int, int], tuple[Obj, Obj, str | None]] = BoundedCache(
            CacheName.TEMPLATE_MATCHES, TOUCH_MEMO_LIMIT
        )
        """`template_mismatch` of a stored template and a wanted one, by their identities (the
        view's object is replaced on every change, translation's come from its own memo): a
        pod of a known shape does not compare the two specs again. The entry keeps both, so
        neither id can be reused while it lives."""

    def settled(self, templates: Sequence[Obj], *, dry_run: bool = False) -> Outcome | None:
        """`ensure`'s outcome where it makes no API call (every template already there as
        translation built it and fresh, a conflict the view shows, a dry run); None where a
        create or a touch is to be awaited."""
        found = self._to_make(templates)
        if isinstance(found, Outcome):
            return found
        if not (found[0] or found[1]):
            return EXISTED
        return DRY_RUN if dry_run else None

    async def ensure(self, templates: Sequence[Obj], *, dry_run: bool = False) -> Outcome:
        """Make sure every template in `templates` exists as translation built it.

        Conflicts the view shows are answered before any API call; then the first template that
        could not be made, in order, is the outcome. Anything else raised (a bug) is raised.
        """
        found = self._to_make(templates)
        if isinstance(found, Outcome):
            return found
        missing, idle = found
        if not (missing or idle):
            return EXISTED  # the common case: every template already known, nothing to await
        if dry_run:
            return DRY_RUN
        calls = [
            *(self._call(template, self._create) for template in missing),
            *(self._call(template, self._keep) for template in idle),
        ]
        created = False
        for outcome in await asyncio.gather(*calls, return_exceptions=True):
            if isinstance(outcome, BaseException):
                raise outcome
            if not outcome.ok:
                return outcome
            created = created or outcome.status is Status.CREATED
        return CREATED if created else EXISTED

    def _to_make(self, templates: Sequence[Obj]) -> Outcome | tuple[list[Obj], list[Obj]]:
        """The templates missing from the view and those idle (to touch), or the conflict of
        the first the view holds with other content."""
        view = self.source.view
        missing: list[Obj] = []
        idle: list[Obj] = []
        for template in templates:
            meta = template["metadata"]
            namespace, name = meta["namespace"], meta["name"]
            found = view.get(Kind.RESOURCE_CLAIM_TEMPLATE, name, namespace)
            if found is None:
                missing.append(template)
            elif (problem := self._mismatch(found, template)) is not None:
                reason = f"ResourceClaimTemplate {namespace}/{name} exists, but {problem}"
                return Outcome(Status.CONFLICT, name, reason)
            elif self._collected is not None and self._idle((namespace, name)):
                idle.append(template)
        return missing, idle

    def _mismatch(self, stored: Obj, wanted: Obj) -> str | None:
        key = (id(stored), id(wanted))
        known = self._compared.get(key)
        if known is not None and known[0] is stored and known[1] is wanted:
            return known[2]
        problem = template_mismatch(stored, wanted)
        self._compared.put(key, (stored, wanted, problem))
        return problem

    async def _call(
        self, template: Obj, make: Callable[[Key, Obj], Coroutine[Any, Any, Outcome]]
    ) -> Outcome:
        """`make` for `template`, unless a create or touch of it is in flight: then that one's
        outcome (either leaves the template there and fresh)."""
        meta = template["metadata"]
        key = (meta["namespace"], meta["name"])
        return await self._calls.do(key, lambda: make(key, template))

    def _idle(self, key: Key) -> bool:
        """A template no claim was made from, that this replica has not touched lately: garbage
        collection could be about to delete it (app.cluster.template_gc)."""
        assert self._collected is not None
        if key in self._calls:
            return True  # await that call, as for a create in flight
        if self._collected.in_use(*key):
            return False
        touched = self._touched.get(key)
        return touched is None or time.monotonic() - touched > self._touch_every

    async def _create(self, key: Key, template: Obj) -> Outcome:
        try:
            await self.source.create_claim_template(template)
        except TemplateCreateError as exc:
            return _failed(key, exc)
        self._on_create()
        if self._collected is not None:  # as fresh as a touch
            self._touched.put(key, time.monotonic())
        return CREATED

    async def _keep(self, key: Key, template: Obj) -> Outcome:
        """Touch an idle template before a pod relies on it; create it again if it is gone."""
        try:
            present = await self.source.touch_claim_template(*key)
        except TemplateCreateError as exc:
            return _failed(key, exc)
        if not present:
            return await self._create(key, template)
        self._touched.put(key, time.monotonic())
        return EXISTED


def _failed(key: Key, exc: TemplateCreateError) -> Outcome:
    if isinstance(exc, TemplateConflictError):
        status = Status.CONFLICT
    else:
        status = Status.REFUSED if exc.refused else Status.FAILED
    return Outcome(status, key[1], str(exc))
