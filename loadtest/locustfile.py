"""Locust load for dra-webhook: the AdmissionReviews a GPU cluster's API server sends.

The bodies are the reviews captured from a real kube-apiserver (tests/fixtures), moved into
the namespaces of the embedded demo cluster (gpu-e2e = dra-only, ml-research = translate,
ml-audit = audit, default = unlabelled) and given a fresh uid per request. Weights follow what
reaches a webhook in a cluster migrating to DRA: mostly pods (plain and legacy), then claims
and templates, then workloads.

Every answer is checked: HTTP 200, an AdmissionReview with the request's uid, and for the cases
whose decision does not depend on features still evolving, the decision itself (a legacy pod is
denied in a dra-only namespace; a plain pod is admitted unchanged). A wrong answer is a failed
request. `DRA_LOADTEST_CHECK_DECISIONS=0` keeps only the envelope checks (for the bare echo
server used as a baseline).

Environment:
  DRA_LOADTEST_FIXTURES     captured reviews (default tests/fixtures/apiserver-v1.36.2)
  DRA_LOADTEST_CA           CA file to verify the server with (default: no verification)
  DRA_LOADTEST_SAMPLES_DIR  write every request's end time and latency here, one CSV per process
  DRA_LOADTEST_CHECK_DECISIONS  1 (default) or 0
"""

from __future__ import annotations

import csv
import os
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gevent.ssl
from locust import FastHttpUser, constant, events

# locust puts this file's folder on sys.path.
from scenarios import PLACEHOLDER_UID, SCENARIOS, Scenario, problem

HEADERS = {"Content-Type": "application/json"}


def _task(scenario: Scenario) -> Callable[[FastHttpUser], None]:
    path = f"/{scenario.endpoint}?timeout=10s"  # the API server appends its timeout

    def review(user: FastHttpUser) -> None:
        uid = str(uuid.uuid4())
        body = scenario.body.replace(PLACEHOLDER_UID, uid.encode())
        with user.client.post(
            path, data=body, headers=HEADERS, name=scenario.name, catch_response=True
        ) as answer:
            if answer.status_code == 0:  # no HTTP answer at all: connection or TLS error
                answer.failure(f"no answer: {answer.error!r}")
                return
            wrong = problem(answer.status_code, answer.content, uid, scenario)
            if wrong is None:
                answer.success()
            else:
                answer.failure(wrong)

    review.__name__ = scenario.name
    return review


def _ssl_context(cafile: str | None = None, **_: Any) -> Any:
    """TLS like the API server's: verify the serving certificate against our CA (the caBundle).

    geventhttpclient passes its own `cafile` (None here), so the CA comes from the environment.
    """
    ca = os.environ.get("DRA_LOADTEST_CA")
    if not ca:
        return gevent.ssl._create_unverified_context()
    return gevent.ssl.create_default_context(cafile=ca)


class ApiServer(FastHttpUser):
    """One API server connection: keep-alive, back-to-back reviews (a closed loop)."""

    wait_time = constant(0)
    ssl_context_factory = staticmethod(_ssl_context)
    network_timeout = 10.0
    connection_timeout = 5.0
    tasks = {_task(s): s.weight for s in SCENARIOS}  # noqa: RUF012 (locust's API)


# -- per-request samples, for exact percentiles and the latency-over-time plot ----------------

_samples: list[tuple[float, str, float, int]] = []


@events.request.add_listener
def _record(name: str, response_time: float, exception: BaseException | None, **_: Any) -> None:
    _samples.append((time.time(), name, response_time, 0 if exception is None else 1))


@events.quitting.add_listener
def _write_samples(**_: Any) -> None:
    folder = os.environ.get("DRA_LOADTEST_SAMPLES_DIR")
    if not folder or not _samples:
        return
    path = Path(folder) / f"samples-{os.getpid()}.csv"
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(("end", "name", "ms", "failed"))
        writer.writerows(_samples)
