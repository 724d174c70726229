"""A generated GPU fleet and claims over it, for the differential test against the scheduler.

The fleet is published the way the NVIDIA DRA driver publishes a node (its own driver name, so
the fixed fleet of tests/e2e/fleet.py never mixes in): per node one pool, one ResourceSlice with
the GPUs' counter sets and another with the devices (the API server keeps `sharedCounters` and
`devices` in different slices). Each GPU is a whole-GPU device consuming every counter of its
set; a GPU in MIG mode also publishes MIG placements consuming their memory slices, so a GPU and
its partitions, and overlapping partitions, exclude each other. Some devices carry taints; only
H100s publish `nvlinkDomain` (a selector on it errs on the others).

Nodes are spread over racks (labels `example.com/rack` and `example.com/rack-index`, some nodes
in none), and each rack has a pool of its own the way a rack- or fabric-level driver publishes
one: a ResourceSlice of counter sets and one of GB200 GPUs drawing on them, both selecting the
rack's nodes by label (`In`, `Exists` with `NotIn`, or `Gt` with `Lt` on the index), or the GPUs
selected device by device (`perDeviceNodeSelection`: the rack, one node, or every node). A rack
may have no node at all: its GPUs then reach none.

Claims mix what the scheduler checks: one or two requests, counts 1-6 and `All`, selectors,
tolerations, `firstAvailable`, `matchAttribute` / `distinctAttribute` constraints.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from tests.e2e.objects import typed_device_class

Obj = dict[str, Any]
DRIVER = "gpu.generated.example.com"
GPU_CLASS = "generated-gpu"
MIG_CLASS = "generated-mig"
MEMORY_SLICES = 8
PRODUCTS = {
    "NVIDIA H100 80GB HBM3": ("80Gi", "Hopper", 132),
    "NVIDIA A100-SXM4-40GB": ("40Gi", "Ampere", 108),
    "NVIDIA L4": ("24Gi", "Ada Lovelace", 58),
}
MIG_PLACEMENTS = [("1g.10gb", 0, 1, "10Gi"), ("1g.10gb", 1, 1, "10Gi"), ("3g.40gb", 4, 4, "40Gi")]
TAINTS = [
    {"key": "nvidia.com/unhealthy", "value": "xid-79", "effect": "NoSchedule"},
    {"key": "example.com/maintenance", "effect": "NoExecute"},
    {"key": "example.com/soft", "effect": "None"},
]


@dataclass(frozen=True)
class Fleet:
    nodes: tuple[str, ...]
    slices: tuple[Obj, ...]
    classes: tuple[Obj, ...]
    labels: dict[str, dict[str, str]] = field(default_factory=dict)
    """The labels of each node (its rack, when it has one)."""

    def summary(self) -> str:
        lines = [f"{n}: {self.labels.get(n) or 'no rack'}" for n in self.nodes]
        for s in self.slices:
            devices = s["spec"].get("devices")
            if not devices:
                continue
            parts = []
            for d in devices:
                a = d["attributes"]
                what = a.get("profile", a["productName"])["string"]
                taint = "".join(f" [{t['key']}:{t['effect']}]" for t in d.get("taints", []))
                where = f" @{_selection(d)}" if "perDeviceNodeSelection" in s["spec"] else ""
                parts.append(f"{d['name']}({what}){taint}{where}")
            lines.append(f"{_selection(s['spec'])}: {', '.join(parts)}")
        return "\n".join(lines)


def _selection(holder: Obj) -> str:
    if "nodeName" in holder:
        return str(holder["nodeName"])
    if holder.get("allNodes"):
        return "all nodes"
    if holder.get("perDeviceNodeSelection"):
        return "per device"
    terms = holder["nodeSelector"]["nodeSelectorTerms"]
    return " or ".join(
        " and ".join(
            f"{r['key']} {r['operator']} {','.join(r.get('values', []))}".strip()
            for r in t["matchExpressions"]
        )
        for t in terms
    )


def device_class(name: str, device_type: str) -> Obj:
    return typed_device_class(name, DRIVER, device_type)


def _counters(processors: int, memory: str) -> Obj:
    counters = {"multiprocessors": {"value": str(processors)}, "memory": {"value": memory}}
    counters.update({f"memory-slice-{k}": {"value": "1"} for k in range(MEMORY_SLICES)})
    return counters


def fleet(rng: random.Random, nodes: int = 5, *, per_device_selection: bool = True) -> Fleet:
    """`per_device_selection=False` before 1.36: DRAPartitionableDevices is off there, and the
    API server drops `perDeviceNodeSelection`, leaving such a slice invalid."""
    names = tuple(f"gen-node-{i}" for i in range(nodes))
    slices: list[Obj] = []
    for node in names:
        product = rng.choice(list(PRODUCTS))
        memory, architecture, processors = PRODUCTS[product]
        sets, devices = [], []
        for index in range(rng.randint(1, 8)):
            counter_set = f"gpu-{index}-counter-set"
            sets.append({"name": counter_set, "counters": _counters(processors, memory)})
            attributes: Obj = {
                "type": {"string": "gpu"},
                "productName": {"string": product},
                "architecture": {"string": architecture},
                "uuid": {"string": f"GPU-{node}-{index}"},
                "index": {"int": index},
            }
            if architecture == "Hopper":
                attributes["nvlinkDomain"] = {"int": rng.randint(0, 1)}
            gpu: Obj = {
                "name": f"gpu-{index}",
                "attributes": attributes,
                "capacity": {"memory": {"value": memory}},
                "consumesCounters": [
                    {"counterSet": counter_set, "counters": _counters(processors, memory)}
                ],
            }
            if rng.random() < 0.15:
                gpu["taints"] = [rng.choice(TAINTS)]
            devices.append(gpu)
            if architecture != "Ada Lovelace" and rng.random() < 0.35:
                for profile, start, width, size in MIG_PLACEMENTS:
                    consumes = {"memory": {"value": size}}
                    consumes.update(
                        {f"memory-slice-{k}": {"value": "1"} for k in range(start, start + width)}
                    )
                    mig: Obj = {
                        "name": f"gpu-{index}-mig-{profile.replace('.', '')}-{start}",
                        "attributes": {
                            "type": {"string": "mig"},
                            "profile": {"string": profile},
                            "productName": {"string": product},
                            "parentUUID": {"string": f"GPU-{node}-{index}"},
                        },
                        "capacity": {"memory": {"value": size}},
                        "consumesCounters": [{"counterSet": counter_set, "counters": consumes}],
                    }
                    if rng.random() < 0.1:
                        mig["taints"] = [rng.choice(TAINTS)]
                    devices.append(mig)
        pool = {"name": node, "generation": 1, "resourceSliceCount": 2}
        for suffix, body in (
            ("counters", {"sharedCounters": sets}),
            ("devices", {"devices": devices}),
        ):
            slices.append(
                {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "ResourceSlice",
                    "metadata": {"name": f"{node}-{suffix}"},
                    "spec": {"driver": DRIVER, "nodeName": node, "pool": pool, **body},
                }
            )
    labels: dict[str, dict[str, str]] = {}
    for i, node in enumerate(names):
        rack = i if i < RACKS else rng.randrange(RACKS + 1)  # RACKS: in no rack
        labels[node] = (
            {RACK_LABEL: f"rack-{rack}", RACK_INDEX: str(rack + 1)} if rack < RACKS else {}
        )
    for rack in range(RACKS):
        members = [n for n in names if labels[n].get(RACK_LABEL) == f"rack-{rack}"]
        slices.extend(
            _rack_pool(rng, rack, members if rng.random() < 0.85 else [], per_device_selection)
        )
    classes = (device_class(GPU_CLASS, "gpu"), device_class(MIG_CLASS, "mig"))
    return Fleet(names, tuple(slices), classes, labels)


RACKS = 2
RACK_LABEL = "example.com/rack"
RACK_INDEX = "example.com/rack-index"
RACK_GPU = ("NVIDIA GB200", "186Gi", "Blackwell")


def _rack_selector(rng: random.Random, rack: int) -> Obj:
    """The nodes of one rack, said one of three ways."""
    form = rng.choice(["in", "exists", "range"])
    if form == "in":
        expressions = [{"key": RACK_LABEL, "operator": "In", "values": [f"rack-{rack}"]}]
    elif form == "exists":
        others = [f"rack-{r}" for r in range(RACKS) if r != rack]
        expressions = [
            {"key": RACK_LABEL, "operator": "Exists"},
            {"key": RACK_LABEL, "operator": "NotIn", "values": others},
        ]
    else:
        # the index label is rack + 1: a label value cannot start with "-"
        expressions = [
            {"key": RACK_INDEX, "operator": "Gt", "values": [str(rack)]},
            {"key": RACK_INDEX, "operator": "Lt", "values": [str(rack + 2)]},
        ]
    return {"nodeSelectorTerms": [{"matchExpressions": expressions}]}


def _rack_pool(
    rng: random.Random, rack: int, members: list[str], per_device_selection: bool = True
) -> list[Obj]:
    """A rack's pool: a slice of one counter set (fabric links) and a slice of GPUs consuming
    them, selected by the rack's label (or per device: the rack, one of its nodes, all nodes).
    ``members``: the rack's nodes (when empty the slices select the label anyway: no node)."""
    product, memory, architecture = RACK_GPU
    links = rng.randint(2, 4)
    per_device = rng.random() < 0.3 and per_device_selection
    devices = []
    for index in range(rng.randint(1, 4)):
        gpu: Obj = {
            "name": f"gb200-{index}",
            "attributes": {
                "type": {"string": "gpu"},
                "productName": {"string": product},
                "architecture": {"string": architecture},
                "uuid": {"string": f"GPU-rack-{rack}-{index}"},
                "index": {"int": index},
            },
            "capacity": {"memory": {"value": memory}},
            "consumesCounters": [
                {
                    "counterSet": "fabric",
                    "counters": {"links": {"value": str(rng.choice([1, 1, 2]))}},
                }
            ],
        }
        if rng.random() < 0.1:
            gpu["taints"] = [rng.choice(TAINTS)]
        if per_device:
            where = rng.random()
            if where < 0.5 or not members:
                gpu["nodeSelector"] = _rack_selector(rng, rack)
            elif where < 0.85:
                gpu["nodeName"] = rng.choice(members)
            else:
                gpu["allNodes"] = True
        devices.append(gpu)
    pool = {"name": f"rack-{rack}", "generation": 1, "resourceSliceCount": 2}
    counters: Obj = {
        "sharedCounters": [{"name": "fabric", "counters": {"links": {"value": str(links)}}}],
        "nodeSelector": _rack_selector(rng, rack),
    }
    held: Obj = {"devices": devices}
    if per_device:
        held["perDeviceNodeSelection"] = True
    else:
        held["nodeSelector"] = _rack_selector(rng, rack)
    return [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"rack-{rack}-{suffix}"},
            "spec": {"driver": DRIVER, "pool": pool, **body},
        }
        for suffix, body in (("fabric", counters), ("gpus", held))
    ]


# -- claims ------------------------------------------------------------------------------------

D = DRIVER
GPU_SELECTORS = [
    None,
    None,
    f'device.attributes["{D}"].productName.startsWith("NVIDIA H100")',
    f'device.attributes["{D}"].productName.startsWith("NVIDIA A100")',
    f'device.attributes["{D}"].architecture != "Ada Lovelace"',
    f'device.capacity["{D}"].memory.compareTo(quantity("40Gi")) >= 0',
    f'device.capacity["{D}"].memory.compareTo(quantity("64Gi")) >= 0',
    f'device.attributes["{D}"].productName.startsWith("NVIDIA GB200")',
    f'device.attributes["{D}"].architecture == "Hopper"',  # a local GPU no rack has
    f'device.attributes["{D}"].nvlinkDomain == 0',  # errs on every non-H100 GPU
    f'"nvlinkDomain" in device.attributes["{D}"] && device.attributes["{D}"].nvlinkDomain == 1',
]
MIG_SELECTORS = [
    None,
    f'device.attributes["{D}"].profile == "1g.10gb"',
    f'device.attributes["{D}"].profile == "3g.40gb"',
]
TOLERATIONS = [
    [{"key": "nvidia.com/unhealthy", "operator": "Exists"}],
    [{"operator": "Exists"}],
    [{"key": "example.com/maintenance", "operator": "Exists", "effect": "NoSchedule"}],
]


def _exactly(rng: random.Random, device_class: str) -> Obj:
    selectors = GPU_SELECTORS if device_class == GPU_CLASS else MIG_SELECTORS
    body: Obj = {"deviceClassName": device_class}
    if rng.random() < 0.08:
        body["allocationMode"] = "All"
    else:
        body["count"] = rng.choice([1, 1, 2, 2, 3, 4, 5, 6])
    selector = rng.choice(selectors)
    if selector:
        body["selectors"] = [{"cel": {"expression": selector}}]
    if rng.random() < 0.25:
        body["tolerations"] = rng.choice(TOLERATIONS)
    return body


def claim_spec(rng: random.Random, *, distinct: bool = True) -> Obj:
    """One claim; `distinct=False` writes matchAttribute where distinctAttribute would go (the
    same random stream): 1.35's API server drops distinctAttribute (DRAConsumableCapacity off)
    and then refuses the constraint left empty."""
    shape = rng.random()
    if shape < 0.55:
        device_class = GPU_CLASS if rng.random() < 0.7 else MIG_CLASS
        return {"devices": {"requests": [{"name": "r0", "exactly": _exactly(rng, device_class)}]}}
    if shape < 0.7:
        alternatives = [
            {"name": f"s{k}", **_exactly(rng, rng.choice([GPU_CLASS, MIG_CLASS]))} for k in range(2)
        ]
        return {"devices": {"requests": [{"name": "r0", "firstAvailable": alternatives}]}}
    classes = [GPU_CLASS, rng.choice([GPU_CLASS, MIG_CLASS])]
    requests = []
    for k, device_class in enumerate(classes):
        body = _exactly(rng, device_class)
        body.pop("allocationMode", None)
        body["count"] = rng.choice([1, 1, 2, 3])
        requests.append({"name": f"r{k}", "exactly": body})
    devices: Obj = {"requests": requests}
    if rng.random() < 0.7:
        kind = rng.choice(["matchAttribute", "matchAttribute", "distinctAttribute"])
        kind = kind if distinct else "matchAttribute"
        name = rng.choice(["productName", "architecture", "uuid", "index"])
        devices["constraints"] = [{"requests": ["r0", "r1"], kind: f"{D}/{name}"}]
    return {"devices": devices}
