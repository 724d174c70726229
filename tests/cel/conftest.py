"""Fixtures for the CEL tests: both backends, and the well-known GPU of tests/cel/objects.py."""

from __future__ import annotations

import pytest

from app.cel.device import Device, devices_of_slice
from app.cel.engine import BACKENDS, Engine
from app.cel.factory import get_engine
from tests.cel.objects import GPU_SLICE


@pytest.fixture(params=BACKENDS)
def engine(request: pytest.FixtureRequest) -> Engine:
    return get_engine(request.param)


@pytest.fixture
def gpu() -> Device:
    return next(devices_of_slice(GPU_SLICE))
