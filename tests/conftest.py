"""Shared fixtures (what they build is in tests/helpers.py) and the hypothesis profile."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from tests.helpers import AppHarness, TlsServer, build_app, start_server, stop_server

settings.register_profile(
    "default", deadline=None, max_examples=150, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


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
    """A real `dra-webhook serve` over TLS on the embedded demo cluster, for one test module."""
    server = start_server(tmp_path_factory.mktemp("tls"))
    yield server
    stop_server(server)
