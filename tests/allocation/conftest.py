"""Fixtures of the allocation tests: the CEL engine of each backend, and clusters to check
claims against (builders in tests/allocation/helpers.py)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from app.cel.engine import BACKENDS, Engine
from app.cel.factory import get_engine
from tests.allocation.helpers import Cluster


@pytest.fixture(scope="session", params=BACKENDS)
def engine(request: pytest.FixtureRequest) -> Engine:
    return get_engine(request.param)


@pytest.fixture
def cluster(engine: Engine) -> Callable[..., Cluster]:
    return lambda *objects: Cluster(engine, list(objects))
