"""Fixtures for the device index tests: both CEL backends."""

from __future__ import annotations

import pytest

from app.cel.engine import BACKENDS, Engine
from app.cel.factory import get_engine


@pytest.fixture(params=BACKENDS)
def engine(request: pytest.FixtureRequest) -> Engine:
    return get_engine(request.param)
