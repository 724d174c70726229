"""Near-miss names (`app/translation/near_miss.py`): typos of a legacy name are caught, real
extended resources never are."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from app.bounded import CacheName
from app.config import Policy
from app.policies.builders import near_miss_names
from app.policies.parts import Parts
from app.translation.near_miss import NAMES_KEPT, NearMisses
from tests.assets import third_party


@pytest.fixture(scope="module")
def near() -> NearMisses:
    return Parts(Policy()).build(near_miss_names)


@pytest.mark.parametrize(
    ("name", "meant"),
    [
        ("nvidia.con/gpu", "nvidia.com/gpu"),  # one edit in the prefix
        ("nvidia.com/GPU", "nvidia.com/gpu"),  # case
        ("NVIDIA.com/gpu", "nvidia.com/gpu"),
        ("nvidia.com/gpus", "nvidia.com/gpu"),  # a plural
        ("nvidia.com/gpuu", "nvidia.com/gpu"),
        ("nvdia.com/gpu", "nvidia.com/gpu"),
        ("amd.com/gpus", "amd.com/gpu"),
        ("amd.co/gpu", "amd.com/gpu"),
        ("habana.ai/gaudis", "habana.ai/gaudi"),
        ("habana.ai/Gaudi", "habana.ai/gaudi"),
        ("nvidia.com/a100-gpu", "nvidia.com/gpu"),  # a vendor's prefix, an unknown GPU name
        ("nvidia.com/mig1g.10gb", "nvidia.com/gpu"),
        ("nvidia.com/MIG-1g.10gb", "nvidia.com/mig-1g.10gb"),
        ("GPU.intel.com/i915", "gpu.intel.com/i915"),
    ],
)
def test_a_typo_of_a_legacy_name_is_a_near_miss_of_it(
    near: NearMisses, name: str, meant: str
) -> None:
    assert near(name) == meant


@pytest.mark.parametrize(
    "name",
    [
        "cpu",
        "memory",
        "hugepages-2Mi",
        "hugepages-1Gi",
        "ephemeral-storage",
        "example.com/foo",
        "nvidia.com/gpu",  # legacy names themselves
        "nvidia.com/mig-1g.10gb",
        "gpu.intel.com/xe",
        "nvidia.com/gpumem",
        "nvidia.com/hostdev",  # the network operator's SR-IOV and RDMA names
        "nvidia.com/mlnxnics",
        "rdma/rdma_shared_device_a",
        "openshift.io/sriovnic",
        "smarter-devices/fuse",
        "devices.kubevirt.io/kvm",
        "squat.ai/gpu",  # a GPU under a prefix no legacy name has: not ours to guess
        "xilinx.com/fpga-xilinx_u30",
        "intel.com/qat",
        "sgx.intel.com/epc",
    ],
)
def test_a_real_extended_resource_is_no_near_miss(near: NearMisses, name: str) -> None:
    assert near(name) is None


def test_the_memo_is_bounded_under_distinct_names(near: NearMisses) -> None:
    for i in range(NAMES_KEPT * 2):
        near(f"example{i}.com/gpu-{i}")
    assert len(near._memo) <= NAMES_KEPT
    assert near._memo.name is CacheName.NEAR_MISS_NAMES


def _resource_names(node: Any) -> set[str]:
    """Every key of a `limits`/`requests` map, at any depth."""
    found: set[str] = set()
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("limits", "requests") and isinstance(value, dict):
                found |= {str(name) for name in value}
            else:
                found |= _resource_names(value)
    elif isinstance(node, list):
        for item in node:
            found |= _resource_names(item)
    return found


def test_no_resource_name_of_the_real_manifests_is_a_near_miss(near: NearMisses) -> None:
    folder: Path = third_party("real-manifests")
    names: set[str] = set()
    for file in sorted(folder.glob("*.yaml")):
        for document in yaml.safe_load_all(file.read_text()):
            names |= _resource_names(document)
    assert len(names) > 10  # the real manifests' own: GPUs, shares, cpu, memory, hugepages...
    assert {n: near(n) for n in sorted(names) if near(n) is not None} == {}
