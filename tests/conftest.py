"""Shared fixtures (what they build is in tests/helpers.py) and the hypothesis profile."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from app import bounded
from app.cli import main
from tests.helpers import (
    TOUR_PORTS,
    AppHarness,
    TlsServer,
    build_app,
    start_server,
    stop_server,
)
from tests.migrate.helpers import Run

settings.register_profile(
    "default", deadline=None, max_examples=150, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


@pytest.fixture(scope="session", autouse=True)
def _tour_ports_held() -> Iterator[None]:
    """The suite runs as it would beside the README's `make run`: 127.0.0.1:8443 and the health
    port 8081 are held for the whole session, so a test that needs either fails (port in use)
    instead of passing only on a machine where nothing serves. A port already held (a `make run`
    going) is left to its holder. tests/test_ports.py checks the hold is in place."""
    held: list[socket.socket] = []
    for port in TOUR_PORTS:
        sock = socket.socket()
        try:
            sock.bind(("127.0.0.1", port))
            sock.listen()
        except OSError:
            sock.close()
            continue
        held.append(sock)
    yield
    for sock in held:
        sock.close()


@pytest.fixture
def roomy_cache_budget() -> Iterator[None]:
    """A cache budget no other cache of the session has filled, for a test about what one memo
    keeps: the budget is one per process, shared by every live cache of a name (app.bounded),
    and caches of pipelines other tests keep alive can hold a name's whole share. What the
    budget itself refuses is tested in tests/test_bounded.py."""
    before = sum(bounded.budget().values())
    bounded.set_budget(1 << 40)
    yield
    bounded.set_budget(before)  # (the same shares, to a byte)


@pytest.fixture
def make_app() -> Iterator[Callable[..., AppHarness]]:
    """Build the real ASGI app (lifespan running) over a static cluster view."""
    harnesses: list[AppHarness] = []

    def build(*args: Any, **kwargs: Any) -> AppHarness:
        harnesses.append(build_app(*args, **kwargs))
        return harnesses[-1]

    yield build
    for harness in harnesses:
        harness.client.__exit__(None, None, None)


@pytest.fixture
def app(make_app: Callable[..., AppHarness]) -> AppHarness:
    """The real ASGI app over the demo namespaces."""
    return make_app()


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsServer]:
    """A real `dra-webhook serve` over TLS on the embedded demo cluster, for one test module;
    every denial logged (the tests look for one review's line among many)."""
    server = start_server(
        tmp_path_factory.mktemp("tls"), env={"DRA_WEBHOOK_DENIAL_LOG_SECONDS": "0"}
    )
    yield server
    stop_server(server)


@pytest.fixture
def migrate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Callable[..., Run]:
    """`dra-webhook migrate ARGS...` run in-process from `tmp_path`, so printed paths are
    relative (the migrate and workload tests)."""
    monkeypatch.chdir(tmp_path)

    def run(*args: str) -> Run:
        capsys.readouterr()
        code = main(["migrate", *args])
        out = capsys.readouterr()
        return Run(code, out.out, out.err)

    return run
