"""Warm before ready (app/devices/warm.py): the groupings a first claim of each DeviceClass and
translation rule reads are built before any claim, and a grouping on paths no shape read
before is refined from its class's (`Grouping.derive`) into exactly the groups grouping the
slices anew makes, through any sequence of slice changes."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.cel.engine import Engine
from app.cluster.view import Kind
from app.devices.groups import Grouping
from app.devices.index import DeviceIndex
from app.devices.warm import warm
from app.pipeline import Endpoint
from app.transport.review import decode_review
from tests.devices.objects import gpu_device, make_slice
from tests.helpers import DEMO_NAMESPACES, make_pipeline, policy_from, wrap

DRIVER = "gpu.nvidia.com"
CLASS = (f'device.driver == "{DRIVER}"',)
PATHS = (
    ("capacity", DRIVER, "memory"),
    ("attributes", DRIVER, "model"),
    ("attributes", DRIVER, "healthy"),
)

device_spec = st.fixed_dictionaries(
    {
        "memory": st.sampled_from(["40Gi", "80Gi"]),
        "model": st.sampled_from(["H100", "A100"]),
        "healthy": st.sampled_from([None, True]),
    }
)
slices = st.dictionaries(
    st.integers(0, 7), st.lists(device_spec, min_size=1, max_size=3), min_size=1, max_size=8
)


def raw_slice(node: int, devices: list[dict[str, Any]], version: int) -> dict[str, Any]:
    entries = []
    for i, spec in enumerate(devices):
        healthy = {} if spec.get("healthy") is None else {"healthy": spec["healthy"]}
        entries.append(gpu_device(f"gpu-{i}", spec["memory"], spec.get("model", "H100"), **healthy))
    return make_slice(f"node-{node}", DRIVER, entries, str(version))


def _partition(grouping: Grouping) -> set[frozenset[str]]:
    return {frozenset(members) for members in grouping.members.values()}


@settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    first=slices,
    then=slices,
    extra=st.lists(st.sampled_from(PATHS), min_size=1, max_size=3, unique=True),
)
def test_a_grouping_refined_from_its_class_groups_as_grouping_anew_does(
    engine: Engine,
    first: dict[int, list[dict[str, Any]]],
    then: dict[int, list[dict[str, Any]]],
    extra: list[tuple[str, ...]],
) -> None:
    index = DeviceIndex(engine)
    raws = {n: raw_slice(n, devices, 1) for n, devices in first.items()}
    for raw in raws.values():
        index.on_change(Kind.RESOURCE_SLICE, None, raw)
    generation = index.generation
    base = Grouping((("driver",),), index._column)
    base.update(index._slices, generation, None)
    paths = tuple(sorted({("driver",), *extra}))
    derived, anew = Grouping(paths, index._column), Grouping(paths, index._column)
    assert derived.derive(base, index._slices, generation)
    anew.update(index._slices, generation, None)
    assert _partition(derived) == _partition(anew)
    for indexed in index.slices():  # a slice version is found in its group by its signature
        assert derived.group(indexed) == derived.group_of[indexed.name]
        assert derived.numbers[derived.signature(indexed)] == derived.group_of[indexed.name]
    # then the slices change: both follow, slice by slice
    for n, devices in then.items():
        new = raw_slice(n, devices, 2)
        index.on_change(Kind.RESOURCE_SLICE, raws.get(n), new)
        raws[n] = new
    changed = index.changed_since(generation)
    derived.update(index._slices, index.generation, changed)
    anew.update(index._slices, index.generation, changed)
    assert _partition(derived) == _partition(anew)


def test_a_base_of_another_generation_or_of_the_same_paths_is_not_refined(engine: Engine) -> None:
    index = DeviceIndex(engine)
    index.on_change(Kind.RESOURCE_SLICE, None, raw_slice(0, [{"memory": "80Gi"}], 1))
    base = Grouping((("driver",),), index._column)
    base.update(index._slices, index.generation, None)
    same = Grouping((("driver",),), index._column)
    assert not same.derive(base, index._slices, index.generation)
    later = Grouping((("driver",), PATHS[0]), index._column)
    assert not later.derive(base, index._slices, index.generation + 1)
    assert later.version == {}


@pytest.fixture
def groupings_made(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[], int]]:
    """How many groupings were made (grouped anew or refined) since the last call."""
    made = [0]
    fill, derive = Grouping._fill, Grouping.derive

    def counted_fill(self: Grouping, *args: Any) -> None:
        made[0] += 1
        fill(self, *args)

    def counted_derive(self: Grouping, *args: Any) -> bool:
        done = derive(self, *args)
        made[0] += done
        return done

    monkeypatch.setattr(Grouping, "_fill", counted_fill)
    monkeypatch.setattr(Grouping, "derive", counted_derive)

    def since() -> int:
        found, made[0] = made[0], 0
        return found

    yield since


def _class(name: str, expression: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": expression}}]},
    }


def test_warm_groups_the_slices_as_each_class_and_translation_rule_reads_them(
    engine: Engine, groupings_made: Callable[[], int]
) -> None:
    index = DeviceIndex(engine)
    for n in range(4):
        devices = [{"memory": "80Gi", "model": "H100" if n % 2 else "A100"}]
        index.on_change(Kind.RESOURCE_SLICE, None, raw_slice(n, devices, 1))
    classes = {"gpu": _class("gpu", CLASS[0]), "absent-rule-class": _class("x", "true")}
    rule = f'device.attributes["{DRIVER}"].model == "$1"'
    warm(index, classes, [("gpu", (rule,)), ("not-in-the-cluster", (rule,))])
    assert groupings_made() == 3  # each class's own paths, and the rule's on gpu
    # a claim of that rule (its placeholder filled), and the class alone: nothing to group
    index.matching("gpu", CLASS, (f'device.attributes["{DRIVER}"].model == "H100"',))
    index.matching("gpu", CLASS)
    assert groupings_made() == 0
    # one reading other paths groups the slices once, refined from the class's
    index.matching(
        "gpu", CLASS, (f'device.capacity["{DRIVER}"].memory.isGreaterThan(quantity("1"))',)
    )
    assert groupings_made() == 1


def test_the_pipeline_warms_the_groupings_of_the_policys_rules_before_ready(
    groupings_made: Callable[[], int],
) -> None:
    """The demo namespaces, the two NVIDIA classes and a MIG slice: once the view has synced
    (before ready), a translated MIG pod groups nothing on the request path."""
    mig = {"memory": "10Gi", "model": "A100"}
    mig_slice = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        **raw_slice(0, [mig], 1),
    }
    mig_slice["spec"] |= {
        "nodeName": "node-0",
        "pool": {"name": "node-0", "generation": 1, "resourceSliceCount": 1},
    }
    mig_slice["spec"]["devices"][0]["attributes"]["profile"] = {"string": "1g.10gb"}
    objects = [
        *DEMO_NAMESPACES,
        _class("gpu.nvidia.com", CLASS[0]),
        _class("mig.nvidia.com", CLASS[0]),
        mig_slice,
    ]
    pipeline = make_pipeline(objects, policy_from("{}"))  # the default rules: mig profiles
    assert groupings_made() == 2  # the two classes' paths are one set
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ml-research"},
        "spec": {
            "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/mig-1g.10gb": "1"}}}]
        },
    }
    decision = pipeline.review(Endpoint.MUTATE, decode_review(orjson.dumps(wrap(pod))))
    assert decision.allowed and decision.templates, decision.message
    assert groupings_made() == 0
