"""Fixtures for the CEL tests: both backends, and a ResourceSlice with one well-known GPU."""

from __future__ import annotations

from typing import Any

import pytest

from app.cel.device import Device, devices_of_slice
from app.cel.engine import BACKENDS, Engine
from app.cel.factory import get_engine

GPU_SLICE: dict[str, Any] = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceSlice",
    "metadata": {"name": "node-1-gpu.nvidia.com", "resourceVersion": "7"},
    "spec": {
        "driver": "gpu.nvidia.com",
        "pool": {"name": "node-1", "generation": 1, "resourceSliceCount": 1},
        "nodeName": "node-1",
        "devices": [
            {
                "name": "gpu-0",
                "attributes": {
                    "model": {"string": "H100"},
                    "profile": {"string": "1g.10gb"},
                    "driverVersion": {"version": "550.54.15"},
                    "index": {"int": 0},
                    "gpu.example.com/healthy": {"bool": True},
                },
                "capacity": {
                    "memory": {"value": "80Gi"},
                    "gpu.example.com/memory": {"value": "48Gi"},
                },
            }
        ],
    },
}


@pytest.fixture(params=BACKENDS)
def engine(request: pytest.FixtureRequest) -> Engine:
    return get_engine(request.param)


@pytest.fixture
def gpu() -> Device:
    return next(devices_of_slice(GPU_SLICE))
