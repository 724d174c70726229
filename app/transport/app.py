"""The FastAPI application: admission endpoints, health, readiness and metrics.

This module reads and size-limits the body, decodes it, asks the pipeline, has the cluster layer
make any ResourceClaimTemplates the decision needs (app.cluster.provisioning: awaited, never
blocking the event loop, since the create comes back through this same webhook), and encodes the
answer. It decides nothing itself.

Before it asks for the decision it runs the steps the pipeline prepares for the review (a claim's
new selectors compiled, one per step: `Pipeline.prepare`), and lets the event loop turn after each:
a review that compiles selectors until its compile budget runs out lets every other review on
the worker (a pod create, a probe of the webhook port) in between. Reviews over 64 KiB are
decided one at a time (`_Webhook._heavy`), the loop turning between their decoding and their
checks: however many of them arrive at once, only one is alive as decoded objects and one piece
of their work runs per turn.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from functools import partial
from typing import Any

import orjson
from fastapi import FastAPI
from fastapi.responses import Response
from starlette.requests import ClientDisconnect

from app import bounded
from app.certs import TLS_CERT
from app.cluster.factory import build_source
from app.cluster.progress import MigrationProgress
from app.cluster.provisioning import Outcome, Provisioner, Status
from app.cluster.singleflight import SingleFlight
from app.cluster.source import ClusterSource
from app.cluster.stats import SourceStats
from app.cluster.view import ClusterView
from app.config import Policy, Settings
from app.config.policy import Origin, load_policy_with_origin
from app.errors import ReviewError
from app.logs import LineBatch, LineShape
from app.metrics import Metrics
from app.pipeline import Decision, Endpoint, Pipeline
from app.policies.base import Request
from app.policies.cel_runtime import cel_runtime
from app.policies.exceptions import policy_exceptions
from app.server import heap
from app.server.housekeeping import Housekeeping
from app.server.limits import (
    RECEIVED_AT,
    STATS,
    ByteBudget,
    OverloadedError,
    TransportStats,
    check_queue_time,
)
from app.transport.asgi import (
    JSON,
    AdmissionFront,
    Answer,
    Receive,
    Scope,
    as_endpoint,
    body_headers,
    receive_body,
)
from app.transport.denials import DenialLog
from app.transport.response import encode, review_response
from app.transport.review import decode_review
from app.transport.serving import Certificates, refresh_view_gauges
from app.verdict import provisioned

logger = logging.getLogger(__name__)

_DECISION_KEYS = (
    "uid",
    "object_name",
    "user",
    "endpoint",
    "kind",
    "namespace",
    "operation",
    "denied_by",
    "dry_run",
)
"""The values of every review first, then those that repeat: one run of them (app.logs)."""
_REPEATING = frozenset({"endpoint", "kind", "namespace", "operation", "denied_by", "dry_run"})
_LINE = LineShape(*_DECISION_KEYS, repeating=_REPEATING)
"""The decision line (one per denied review): its repeating values encoded once (app.logs)."""
_HELD_LINE = LineShape(*_DECISION_KEYS, "repeated", repeating=_REPEATING)
"""The line with how many denials like it were held back since its previous one."""
_MESSAGES = {label: f"review {label}" for label in ("allowed", "patched", "denied")}

LARGE_BODY_BYTES = 64 * 1024
"""A review larger than this (a pod's is about 5 KB) takes milliseconds to decode and to free and
holds tens of thousands of objects: it is decided in the heavy lane (`_Webhook._heavy`)."""


class _Webhook:
    """The per-app state the endpoints use; built once in create_app."""

    def __init__(
        self, settings: Settings, pipeline: Pipeline, source: ClusterSource, metrics: Metrics
    ) -> None:
        self.settings = settings
        self.pipeline = pipeline
        self.source = source
        self.metrics = metrics
        self.stats = TransportStats()
        self.budget = ByteBudget(settings.max_buffered_bytes)
        self.denials = DenialLog(settings.denial_log_seconds)
        """Which denials are logged now (app.transport.denials: a storm is not a flood)."""
        self.lines = LineBatch(logger)
        """The decision lines, logged in the loop's next turn (app.logs)."""
        self.provisioner = Provisioner(
            source,
            gc_grace_seconds=settings.template_gc_grace_seconds,
            on_create=metrics.templates_created.inc,
        )
        self._heavy = asyncio.Lock()
        """The heavy lane: reviews over LARGE_BODY_BYTES are decoded and decided one at a time,
        so that at most one such review's objects are alive at once (a full collection of the
        garbage collector walks every live one: four decoded 1.5 MB reviews made it a 50 ms
        pause) and at most one piece of such work runs per turn of the event loop."""
        self._namespace_lookups: SingleFlight[str, dict[str, Any] | None] = SingleFlight()
        """Namespace lookups in flight (cache misses), by name."""

    async def handle(self, scope: Scope, receive: Receive, endpoint: Endpoint) -> Answer:
        """Answer one admission request (one coroutine: it runs for every review)."""
        held: list[int] = [0]  # body bytes taken from the budget, given back when answered
        try:
            started = time.perf_counter()
            try:
                body = await self._read_body(scope, receive, held)
                self._check_queue_time(scope)
                if len(body) > LARGE_BODY_BYTES:
                    async with self._heavy:
                        self._check_queue_time(scope)  # (and its wait for the lane)
                        request, decision = await self._decide(body, endpoint, heavy=True)
                else:
                    request, decision = await self._decide(body, endpoint, heavy=False)
            except OverloadedError as exc:
                return self._refuse(exc)
            except ReviewError as exc:
                self.metrics.bad_requests.inc()
                logger.info("bad request", extra={"endpoint": endpoint.value, "error": str(exc)})
                return Answer(400, orjson.dumps({"message": str(exc)}))
            except ClientDisconnect:
                return Answer(400, json=False)

            try:
                if decision.templates and decision.allowed:
                    decision = await self._provision(request, decision)
                    # admitted untranslated (failure.templateCreate: open): judged no more
                    decision = self.pipeline.settle(endpoint, request, decision)
            except Exception:  # a bug: answer per failure policy, never a 500 to the API server
                logger.exception("internal error while answering", extra={"uid": request.uid})
                decision = self.pipeline.settle(endpoint, request, self.pipeline.internal_failure())
            return self._answered(endpoint, request, decision, started)
        finally:
            self.budget.give(held[0])
            self.stats.released += held[0]

    def answer_now(self, scope: Scope, body: bytes, endpoint: Endpoint) -> Answer | None:
        """`handle` for a review whose body is in, when nothing in it waits: its namespace is
        in the view, no check prepares steps, no template is to be made, the body is small and
        well formed, the server is not shedding load. The protocol asks this first (no task,
        no ASGI exchange for the common review: app.server.protocol); None leaves the review
        to `handle`, which answers it the same, awaiting what it must (a review decoded here
        is decoded again there: the rare ones). A translated pod whose templates are all there
        is answered here too (`Provisioner.settled`)."""
        content_type, _ = body_headers(scope)
        if content_type.split(";", 1)[0].strip().lower() != JSON or len(body) > LARGE_BODY_BYTES:
            return None
        started = time.perf_counter()
        pipeline = self.pipeline
        size = len(body)
        try:
            self.budget.take(size)
        except OverloadedError:
            return None
        try:
            self._check_queue_time(scope)
            request = decode_review(body)
            if pipeline.needs_namespace(endpoint, request):
                return None
            request = pipeline.decode(endpoint, request)
            if pipeline.prepares(endpoint, request):
                return None
            decision = pipeline.review(endpoint, request)
            if decision.templates and decision.allowed:  # (a translated pod)
                outcome = self.provisioner.settled(decision.templates, dry_run=request.dry_run)
                if outcome is None:
                    return None  # a template to make: awaited in `handle`
                decision = self._provisioned(request, decision, outcome)
                decision = pipeline.settle(endpoint, request, decision)
        except Exception:  # load shed, a malformed body, a bug: `handle` answers and logs it
            return None
        finally:
            self.budget.give(size)
            self.stats.released += size
        return self._answered(endpoint, request, decision, started)

    def _answered(
        self, endpoint: Endpoint, request: Request, decision: Decision, started: float
    ) -> Answer:
        """The answer to a decided review, counted and logged."""
        try:
            answer = Answer(200, encode(review_response(request.uid, decision)))
        except Exception:  # a bug: answer per failure policy, never a 500 to the API server
            logger.exception("internal error while answering", extra={"uid": request.uid})
            decision = self.pipeline.settle(endpoint, request, self.pipeline.internal_failure())
            answer = Answer(200, encode(review_response(request.uid, decision)))
        self.metrics.observe_review(
            endpoint.value, request.kind, decision.label, time.perf_counter() - started
        )
        for reason in decision.denied_by:
            self.metrics.count_denial(endpoint.value, reason)
        for check in decision.failed_checks:
            self.metrics.count_check_error(endpoint.value, check)
        if decision.findings:
            self.metrics.audit_findings.inc(decision.findings)
        for check, exception in decision.excepted:
            self.metrics.count_exception(check, exception)
        if decision.allowed:  # after the templates were made: the pod goes in translated
            for rule in decision.translated:
                self.metrics.count_translation(rule)
        if not decision.allowed:
            key = (request.namespace, decision.denied_by)
            repeated = self.denials.admit(key, time.monotonic())
            if repeated is not None:
                self._log(logging.INFO, endpoint, request, decision, repeated)
        elif logger.isEnabledFor(logging.DEBUG):
            self._log(logging.DEBUG, endpoint, request, decision, 0)
        return answer

    def _log(
        self, level: int, endpoint: Endpoint, request: Request, decision: Decision, held: int
    ) -> None:
        values = (
            request.uid,
            request.name,
            request.username,
            endpoint.value,
            request.kind,
            request.namespace,
            request.operation,
            decision.denied_by,
            request.dry_run,
        )
        if held:  # denials like it held back since its previous line
            self.lines.log(level, _MESSAGES[decision.label], _HELD_LINE, (*values, held))
        else:
            self.lines.log(level, _MESSAGES[decision.label], _LINE, values)

    async def _decide(
        self, body: bytes, endpoint: Endpoint, *, heavy: bool
    ) -> tuple[Request, Decision]:
        """Decode the review and decide it: its CPU-bound part. The steps the pipeline
        prepares for it run first, the event loop turning after each (other reviews' turn), and
        after the decoding of a `heavy` one. Raises ReviewError for a body that is no review."""
        request = decode_review(body)
        if heavy:
            await asyncio.sleep(0)
        if self.pipeline.needs_namespace(endpoint, request):
            # (a heavy review waits for it in the lane: the lookups are rate-limited and bounded
            # by api_timeout_seconds, and only the other heavy reviews wait behind it)
            await self._lookup_namespace(request.namespace)
        try:
            request = self.pipeline.decode(endpoint, request)  # the object, once, for every check
            steps = self.pipeline.prepare(endpoint, request)
            if steps is not None:
                for _ in steps:
                    await asyncio.sleep(0)
            return request, self.pipeline.review(endpoint, request)
        except Exception:  # a bug: answer per failure policy, never a 500 to the API server
            logger.exception("internal error while answering", extra={"uid": request.uid})
            return request, self.pipeline.settle(
                endpoint, request, self.pipeline.internal_failure()
            )

    def _check_queue_time(self, scope: Scope) -> None:
        received = scope.get("state", {}).get(RECEIVED_AT)
        if received is not None:
            check_queue_time(
                time.monotonic() - received,
                self.settings.max_queue_seconds,
                scope.get("query_string", b""),
            )

    async def _lookup_namespace(self, name: str) -> None:
        """Cache miss: ask the source once per namespace, however many reviews wait for it."""
        try:
            await self._namespace_lookups.do(name, lambda: self.source.lookup_namespace(name))
        except Exception:  # a bug in a source: the pipeline answers per failure.unknownNamespace
            logger.exception("namespace lookup raised", extra={"ns": name})

    def _refuse(self, exc: OverloadedError) -> Answer:
        self.stats.refused[exc.reason] += 1
        return Answer(429, orjson.dumps({"message": str(exc)}), retry_after=True)

    async def _read_body(self, scope: Scope, receive: Receive, held: list[int]) -> bytes:
        content_type, declared = body_headers(scope)
        if content_type.split(";", 1)[0].strip().lower() != JSON:
            raise ReviewError(f"content type must be {JSON}, not {content_type or 'missing'!r}")
        limit = self.settings.max_body_bytes
        if declared is not None:
            if not declared.isdigit():
                raise ReviewError("invalid Content-Length")
            size = int(declared)
            if size > limit:
                raise ReviewError(f"body of {declared} bytes is over the limit of {limit}")
            self.budget.take(size)
            held[0] = size
            return await receive_body(receive)

        def chunk(size: int) -> None:
            if held[0] + size > limit:
                raise ReviewError(f"body is over the limit of {limit} bytes")
            self.budget.take(size)
            held[0] += size

        return await receive_body(receive, chunk)

    async def _provision(self, request: Request, decision: Decision) -> Decision:
        """The decision once every template its patch references exists (none made on dry
        runs): the cluster layer makes them (app.cluster.provisioning), the verdict says what
        a failure means for the review (app.verdict.provisioned)."""
        outcome = await self.provisioner.ensure(decision.templates, dry_run=request.dry_run)
        return self._provisioned(request, decision, outcome)

    def _provisioned(self, request: Request, decision: Decision, outcome: Outcome) -> Decision:
        if not outcome.ok:
            conflict = outcome.status is Status.CONFLICT
            logger.warning(
                "template conflict" if conflict else "template create failed",
                extra={"uid": request.uid, "template": outcome.template, "error": outcome.reason},
            )
        return provisioned(decision, outcome, self.pipeline.policy.failure.template_create)


def _watch(
    metrics: Metrics, settings: Settings, webhook: _Webhook, progress: MigrationProgress | None
) -> None:
    """Hand /metrics the counters and gauges of what serves the reviews."""
    pipeline, source = webhook.pipeline, webhook.source
    metrics.know_exceptions(pipeline.parts[policy_exceptions].names)
    metrics.know_sharing_rules(frozenset(rule.name for rule in pipeline.policy.sharing))
    if isinstance(stats := getattr(source, "stats", None), SourceStats):
        metrics.watch_source(stats)  # a live source's list/watch counters
    cel = pipeline.parts[cel_runtime]
    metrics.watch_cel(cel.cache, cel.index)
    metrics.watch_transport(webhook.stats)
    metrics.watch_certificate(settings.cert_dir / TLS_CERT)
    if progress is not None:
        metrics.watch_migration(progress)


def _announce_policy(metrics: Metrics, origin: Origin) -> None:
    """Which policy runs, in the log and /metrics: the first thing to check when the webhook
    and the chart's admission policy disagree (a server outside the cluster runs the embedded
    default without --config)."""
    logger.info("policy in force", extra={"source": origin.source, "sha256": origin.digest})
    metrics.policy_info.labels(origin.source, origin.digest).set(1)


def create_app(
    settings: Settings | None = None,
    *,
    policy: Policy | None = None,
    source: ClusterSource | None = None,
    metrics: Metrics | None = None,
    health_listener: bool = False,
) -> FastAPI:
    """Build the ASGI app. Nothing starts until the lifespan runs.

    `health_listener`: also serve the probes on `settings.health_port` (app.server.health)
    while the lifespan runs; the server's workers do, in-process tests need not.
    """
    settings = settings if settings is not None else Settings()
    origin = Origin("given in process", "")
    if policy is None:
        policy, origin = load_policy_with_origin(settings.policy_file)
    if source is None:
        source = build_source(settings, ClusterView())
    if metrics is None:  # with several workers, their metric files share a folder
        metrics = Metrics(multiprocess_dir=settings.metrics_dir if settings.workers > 1 else None)
    bounded.set_budget(settings.cache_max_bytes)
    pipeline = Pipeline(policy, source.view, settings.namespace)
    _announce_policy(metrics, origin)
    webhook = _Webhook(settings, pipeline, source, metrics)
    progress = MigrationProgress.from_settings(settings)
    _watch(metrics, settings, webhook, progress)
    certificates = Certificates(settings, source.view)
    housekeeping = Housekeeping(settings, webhook.stats, certificates.ready, health_listener)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[dict[str, Any]]:
        housekeeping.start()
        # Everything built by the initial sync (policy, compiled CEL, the view, the warm
        # indexes) lives as long as the process: no full passes of the collector while it is
        # built, then it is kept out of them (they would pause the event loop for 100s of ms
        # on a large view). Settled when the view has synced, after the pipeline's warm-up,
        # before /readyz turns true (app/server/heap.py).
        heap.hold()
        source.view.when_synced(heap.settle)
        await source.start()
        metrics.observe_view(source.view)
        # With several workers a scrape reads every worker's gauge files, so each worker keeps
        # its own view's gauges current, not only when it happens to serve the scrape.
        refresher = (
            asyncio.create_task(refresh_view_gauges(metrics, source))
            if metrics.multiprocess_dir is not None
            else None
        )
        reader = (
            asyncio.create_task(progress.run(), name="migration progress")
            if progress is not None
            else None
        )
        await certificates.start()
        try:
            # uvicorn hands the lifespan state to every connection: the protocol counts there
            yield {STATS: webhook.stats}
        finally:
            for task in (refresher, reader):
                if task is not None:
                    task.cancel()
                    with suppress(asyncio.CancelledError):
                        await task
            await certificates.stop()
            await source.stop()
            metrics.close()
            await housekeeping.stop()
            webhook.lines.write()

    app = AdmissionFront(
        title="dra-webhook",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
        lifespan=lifespan,
        # Prometheus covers metrics; FastAPI's own OpenTelemetry hooks cost ~4 µs per request.
        telemetry={"tracing": False, "metrics": False, "logs": False},
    )
    app.state.webhook = webhook

    # The two admission endpoints are answered in plain ASGI, before FastAPI's middleware
    # (app.transport.asgi): they read the raw body themselves, and FastAPI's dependency and
    # validation machinery (~40 µs per request) and its middleware layers buy them nothing.
    app.admission = {  # (the handler itself: no coroutine in between)
        "/mutate": partial(webhook.handle, endpoint=Endpoint.MUTATE),
        "/validate": partial(webhook.handle, endpoint=Endpoint.VALIDATE),
    }
    app.admission_now = {
        "/mutate": partial(webhook.answer_now, endpoint=Endpoint.MUTATE),
        "/validate": partial(webhook.answer_now, endpoint=Endpoint.VALIDATE),
    }
    for path, handler in app.admission.items():  # also reachable through the router
        app.add_route(path, as_endpoint(handler), methods=["POST"])

    @app.get("/healthz")
    async def healthz() -> Response:
        return Response(b'{"status":"ok"}', media_type=JSON)

    @app.get("/readyz")
    async def readyz() -> Response:
        """Ready once every kind is listed, while none is stale (out of sync too long), and
        while a managed serving certificate is not about to expire."""
        is_ready, body = certificates.ready()
        return Response(body, status_code=200 if is_ready else 503, media_type=JSON)

    @app.get("/metrics")
    async def metrics_endpoint() -> Response:
        metrics.observe_view(source.view)
        return Response(metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    return app


def create_app_from_env() -> FastAPI:
    """Factory for uvicorn workers: every setting comes from DRA_WEBHOOK_* variables."""
    return create_app(Settings(), health_listener=True)
