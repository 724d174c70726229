"""Upstream's allocator test table (k8s.io/dynamic-resource-allocation), read from data.

``cases.yaml`` holds the cases ported from upstream, ``out_of_scope.yaml`` the ones that are not
(each with why); README.md in this folder says where they come from and how upstream's answer on
one node becomes the model's answer on a cluster. The YAML is close to ``resource.k8s.io/v1``
with a few shorthands, expanded here into the objects a cluster view holds:

- a class is a CEL expression (or a list of them, or a DeviceClass ``spec``);
- a slice's ``pool`` is a name (generation 1, one slice) or ``{name, count, generation}``;
- a device is a name, or a v1 Device where a ``capacity`` or counter value may be a bare
  quantity, and ``consumesCounters`` / ``sharedCounters`` may be maps of counter set to counters;
- a request's ``selectors`` may be bare CEL expressions;
- ``allocated`` names devices (``driver/pool/device``) that other claims hold whole,
  ``allocatedShares`` shares of them with the capacity they consume.

:func:`verdict` asks the model about one case.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Final

import yaml

from app.allocation import NEVER, NOT_NOW, OK, Verdict
from app.cel.engine import Engine
from app.cluster.view import Kind
from tests.allocation.helpers import Cluster

Obj = dict[str, Any]
HERE: Final = Path(__file__).resolve().parent
API: Final = "resource.k8s.io/v1"
NAMESPACE: Final = "default"
SHARE_ID: Final = "aaaaaaaa-aaaa-aaaa-aaaa-aaaaaaaaaaaa"
ALLOCATED: Final = "allocated"
UNALLOCATED: Final = "unallocated"
NOT_ON_NODE: Final = "invalid resource pools were encountered"
"""The one upstream error that means "not on this node" (it wraps ErrFailedAllocationOnNode and
is only reported when no node can take the claims): read as unallocated, not as an abort."""
OUTCOMES: Final = (OK, NOT_NOW, NEVER)
ITEM: Final = re.compile(r"^([1-6]|other): \S")
NODE_REGIONS: Final = {"node-1": "region-1", "node-2": "region-2"}
"""Upstream's node(name, region) fixtures: every node also carries planet=earth."""


@dataclass(frozen=True, slots=True)
class Divergence:
    kind: str
    """``bug`` (the model is wrong) or ``documented`` (the webhook differs on purpose)."""
    model: str
    """What the model answers instead of the expected outcome."""
    item: str = ""
    """For a bug: ``<n>: <cause>`` with the item of issue #29 that explains it, or ``other``."""
    reason: str = ""
    """For a documented divergence: why."""


@dataclass(frozen=True, slots=True)
class Case:
    name: str
    upstream: str
    """``allocated``, ``unallocated``, or the text of upstream's error."""
    expect: str
    objects: list[Obj]
    claims: list[Obj]
    features: tuple[str, ...] = ()
    node: str = "node-1"
    held: bool = False
    """Whether other claims hold devices (only then can the answer be "not now")."""
    cluster: str = ""
    """Why the cluster's answer is not the mapping of upstream's answer on its node."""
    divergence: Divergence | None = None
    note: str = ""

    @property
    def fatal(self) -> bool:
        return self.upstream not in (ALLOCATED, UNALLOCATED) and NOT_ON_NODE not in self.upstream


@dataclass(frozen=True, slots=True)
class Table:
    source: Mapping[str, Any]
    cases: list[Case]
    out_of_scope: list[Mapping[str, str]] = field(default_factory=list)


@cache
def load() -> Table:
    data = yaml.safe_load((HERE / "cases.yaml").read_text())
    skipped = yaml.safe_load((HERE / "out_of_scope.yaml").read_text())
    return Table(data["source"], [_case(raw) for raw in data["cases"]], skipped["cases"])


def verdict(engine: Engine, case: Case) -> Verdict:
    """The model's verdict on the case's claims, together, in a cluster of the case's objects.
    The model follows the view (as the pipeline subscribes it), so it sees Node events."""
    cluster = Cluster(engine, [])
    cluster.view.subscribe(cluster.model.on_change)
    for obj in case.objects:
        cluster.view.apply(Kind(obj["kind"]), obj)
    return cluster.check(*case.claims)


def node_kind_supported() -> bool:
    """Whether the cluster view holds Node objects (the model then reads their labels)."""
    return "Node" in {k.value for k in Kind}


# -- one case ---------------------------------------------------------------------------------


def _case(raw: Mapping[str, Any]) -> Case:
    name = str(raw["name"])
    upstream = raw["upstream"]
    if isinstance(upstream, Mapping):
        upstream = str(upstream["error"])
    divergence = raw.get("divergence")
    held = bool(raw.get("allocated") or raw.get("allocatedShares"))
    node = str(raw.get("node", "node-1"))
    slices = [_slice(s) for s in raw.get("slices") or ()]
    objects: list[Obj] = [
        *(_device_class(n, c) for n, c in (raw.get("classes") or {}).items()),
        *_unique_names(slices),
        *_allocated_claims(raw),
    ]
    if node_kind_supported():
        objects.extend(_nodes(node, slices))
    return Case(
        name=name,
        upstream=str(upstream),
        expect=str(raw["expect"]),
        objects=objects,
        claims=[_claim(c) for c in raw["claims"]],
        features=tuple(raw.get("features") or ()),
        node=node,
        held=held,
        cluster=str(raw.get("cluster", "")),
        divergence=Divergence(**divergence) if divergence else None,
        note=str(raw.get("note", "")),
    )


def _device_class(name: str, raw: Any) -> Obj:
    if isinstance(raw, str):
        raw = [raw]
    spec = {"selectors": _selectors(raw)} if isinstance(raw, list) else dict(raw)
    if "selectors" in spec:
        spec["selectors"] = _selectors(spec["selectors"])
    return {"apiVersion": API, "kind": "DeviceClass", "metadata": {"name": name}, "spec": spec}


def _selectors(raw: list[Any]) -> list[Obj]:
    return [{"cel": {"expression": s}} if isinstance(s, str) else s for s in raw]


def _slice(raw: Mapping[str, Any]) -> Obj:
    spec = {k: v for k, v in raw.items() if k != "name"}
    raw_pool = spec["pool"]
    pool: Mapping[str, Any] = {"name": raw_pool} if isinstance(raw_pool, str) else raw_pool
    spec["pool"] = {
        "name": pool["name"],
        "generation": pool.get("generation", 1),
        "resourceSliceCount": pool.get("count", 1),
    }
    if "devices" in spec:
        spec["devices"] = [_device(d) for d in spec["devices"]]
    if isinstance(spec.get("sharedCounters"), Mapping):
        spec["sharedCounters"] = [
            {"name": name, "counters": _counters(counters)}
            for name, counters in spec["sharedCounters"].items()
        ]
    return {
        "apiVersion": API,
        "kind": "ResourceSlice",
        "metadata": {"name": str(raw["name"])},
        "spec": spec,
    }


def _device(raw: Any) -> Obj:
    if isinstance(raw, str):
        return {"name": raw}
    device = dict(raw)
    if isinstance(device.get("capacity"), Mapping):
        device["capacity"] = {
            name: value if isinstance(value, Mapping) else {"value": str(value)}
            for name, value in device["capacity"].items()
        }
    if isinstance(device.get("consumesCounters"), Mapping):
        device["consumesCounters"] = [
            {"counterSet": name, "counters": _counters(counters)}
            for name, counters in device["consumesCounters"].items()
        ]
    return device


def _counters(raw: Mapping[str, Any] | None) -> Obj:
    return {
        name: value if isinstance(value, Mapping) else {"value": str(value)}
        for name, value in (raw or {}).items()
    }


def _unique_names(slices: list[Obj]) -> Iterator[Obj]:
    """The API keys slices by name; upstream's table reuses a name for different slices. A
    repeated name gets ``-<n>`` (which keeps it after the first in name order)."""
    seen: dict[str, int] = {}
    for obj in slices:
        name = obj["metadata"]["name"]
        count = seen.get(name, 0)
        seen[name] = count + 1
        if count:
            obj["metadata"]["name"] = f"{name}-{count + 1}"
        yield obj


def _claim(raw: Mapping[str, Any]) -> Obj:
    devices: Obj = {"requests": [_request(r) for r in raw["requests"]]}
    for key in ("constraints", "config"):
        if raw.get(key):
            devices[key] = raw[key]
    return {"devices": devices}


def _request(raw: Mapping[str, Any]) -> Obj:
    request = dict(raw)
    if "exactly" in request:
        request["exactly"] = _exact(request["exactly"])
    if "firstAvailable" in request:
        request["firstAvailable"] = [_exact(s) for s in request["firstAvailable"]]
    return request


def _exact(raw: Mapping[str, Any]) -> Obj:
    body = dict(raw)
    if "selectors" in body:
        body["selectors"] = _selectors(body["selectors"])
    if body.get("allocationMode") != "All":
        body.setdefault("count", 1)
    return body


def _allocated_claims(raw: Mapping[str, Any]) -> Iterator[Obj]:
    results: list[Obj] = []
    for device in raw.get("allocated") or ():
        results.append(_result(device))
    for share in raw.get("allocatedShares") or ():
        result = _result(share["device"])
        result["shareID"] = SHARE_ID
        if share.get("consumed"):
            result["consumedCapacity"] = {k: str(v) for k, v in share["consumed"].items()}
        results.append(result)
    for i, result in enumerate(results):
        yield {
            "apiVersion": API,
            "kind": "ResourceClaim",
            "metadata": {"name": f"held-{i}", "namespace": NAMESPACE, "uid": f"held-{i}"},
            "spec": {"devices": {"requests": [{"name": "held", "exactly": {"count": 1}}]}},
            "status": {"allocation": {"devices": {"results": [result]}}},
        }


def _result(device: str) -> Obj:
    driver, pool, name = device.split("/")
    return {"request": "held", "driver": driver, "pool": pool, "device": name}


def _nodes(tested: str, slices: list[Obj]) -> list[Obj]:
    """The tested node and every node a slice or device names, with upstream's labels."""
    names = {tested}
    for obj in slices:
        spec = obj["spec"]
        for holder in (spec, *(spec.get("devices") or ())):
            if isinstance(holder.get("nodeName"), str):
                names.add(holder["nodeName"])
    return [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": {"region": NODE_REGIONS.get(name, name), "planet": "earth"},
            },
        }
        for name in sorted(names)
    ]
