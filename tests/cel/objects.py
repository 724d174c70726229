"""What the CEL tests build: a ResourceSlice with one well-known GPU."""

from __future__ import annotations

from typing import Any

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
