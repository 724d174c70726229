"""Transport limits of the real server (uvicorn + httptools over TLS): what a client with a socket
to the webhook port can hold, and how fast it is refused.

Each test talks raw HTTP/1.1 over TLS, so that it can send what no well-behaved client would: a
huge head, half a body, nothing at all. Limits are set small through DRA_WEBHOOK_* variables.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import TlsServer, start_server, stop_server
from tests.server.helpers import LIMITS, REVIEW, closed_within, connect, head, read_response

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsServer]:
    found = start_server(tmp_path_factory.mktemp("limits"), env=LIMITS)
    yield found
    stop_server(found)


def test_a_valid_review_is_still_answered(server: TlsServer) -> None:
    with connect(server) as sock:
        sock.sendall(head() + REVIEW)
        status, _ = read_response(sock)
    assert status == 200


def test_a_head_over_the_header_limit_is_refused_with_431(server: TlsServer) -> None:
    with connect(server) as sock:
        sock.sendall(head(extra=f"X-Big: {'a' * 32768}\r\n") + REVIEW)
        status, response = read_response(sock)
    assert status == 431, response[:200]


def test_a_head_trickled_forever_is_cut_at_the_header_timeout(server: TlsServer) -> None:
    with connect(server) as sock:
        sock.sendall(b"POST /validate HTTP/1.1\r\nHost: w\r\n")
        started = time.monotonic()
        status, _ = read_response(sock)
    assert status in (0, 408)
    assert time.monotonic() - started < 4


def test_half_a_body_is_cut_at_the_body_timeout_with_408(server: TlsServer) -> None:
    with connect(server) as sock:
        sock.sendall(head(length=len(REVIEW)) + REVIEW[: len(REVIEW) // 2])
        started = time.monotonic()
        status, _ = read_response(sock)
    assert status == 408
    assert time.monotonic() - started < 4


def test_a_connection_that_never_sends_a_request_is_closed_when_idle(server: TlsServer) -> None:
    with connect(server) as sock:
        assert closed_within(sock, 4)


def test_bodies_over_the_buffered_bytes_budget_are_refused_with_429(server: TlsServer) -> None:
    big = 1_000_000
    with connect(server) as holder, connect(server) as second:
        holder.sendall(head(length=big) + b"{" + b" " * 100_000)  # holds its budget
        time.sleep(0.3)
        second.sendall(head(length=big) + b" " * big)
        status, response = read_response(second)
    assert status == 429, response[:300]
    assert b"retry-after" in response.lower()
    with connect(server) as sock:  # the budget is returned once the holder is gone
        sock.sendall(head() + REVIEW)
        assert read_response(sock)[0] == 200


def test_connections_over_the_cap_are_refused_at_once_with_429(server: TlsServer) -> None:
    held = [connect(server) for _ in range(int(LIMITS["DRA_WEBHOOK_MAX_CONNECTIONS"]))]
    try:
        time.sleep(0.2)
        with connect(server) as extra:
            started = time.monotonic()
            status, _ = read_response(extra)
        assert status == 429
        assert time.monotonic() - started < 1
    finally:
        for sock in held:
            sock.close()
    time.sleep(0.3)
    with connect(server) as sock:  # room again once they are gone
        sock.sendall(head() + REVIEW)
        assert read_response(sock)[0] == 200


def test_a_request_that_waited_past_the_api_servers_timeout_is_refused(tmp_path: Path) -> None:
    """In process: a review whose head arrived longer ago than its `?timeout=` is not decoded."""
    from fastapi.testclient import TestClient

    from app.server.limits import RECEIVED_AT
    from tests.helpers import build_app

    harness = build_app()
    try:
        app = harness.client.app

        async def late(scope, receive, send):  # type: ignore[no-untyped-def]
            scope.setdefault("state", {})[RECEIVED_AT] = time.monotonic() - 30
            await app(scope, receive, send)  # type: ignore[operator]

        answer = TestClient(late).post(  # the app's lifespan already runs (harness)
            "/validate?timeout=10s", content=REVIEW, headers={"content-type": "application/json"}
        )
        assert answer.status_code == 429
        assert b'dra_webhook_refused_total{reason="queue"} 1.0' in harness.metrics.render()
    finally:
        harness.client.__exit__(None, None, None)


@pytest.fixture(scope="module")
def keep_alive_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsServer]:
    env = {**LIMITS, "DRA_WEBHOOK_IDLE_TIMEOUT_SECONDS": "4"}
    found = start_server(tmp_path_factory.mktemp("keep-alive"), env=env)
    yield found
    stop_server(found)


def test_an_answered_connection_is_kept_for_the_idle_timeout_a_silent_new_one_only_for_a_head(
    keep_alive_server: TlsServer,
) -> None:
    """The API server keeps an idle connection 90 s and does not send a POST again when the
    webhook closes one under it: so the webhook keeps answered connections longer than that
    (here 4 s), while a new connection that sends nothing is closed within the header
    timeout (1 s)."""
    with connect(keep_alive_server) as silent:
        assert closed_within(silent, 2.5)
    with connect(keep_alive_server) as used:
        used.sendall(head() + REVIEW)
        assert read_response(used)[0] == 200
        time.sleep(2)  # past the header timeout, within the idle timeout
        used.sendall(head() + REVIEW)
        assert read_response(used)[0] == 200
        assert closed_within(used, 7)
