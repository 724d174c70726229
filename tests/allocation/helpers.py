"""What the allocation tests share: a cluster view with the allocation model subscribed and a
one-call verdict (`Cluster`), and claim-spec builders."""

from __future__ import annotations

from typing import Any

from app.allocation import Allocations, ClaimInput, Model, Verdict
from app.cel.engine import Engine
from app.cluster.view import ClusterView, Kind
from app.k8s.claims import parse_claim_spec
from tests.allocation.nvidia import CLASSES

Obj = dict[str, Any]


class Cluster:
    def __init__(self, engine: Engine, objects: list[Obj]) -> None:
        from app.devices.index import DeviceIndex

        self.view = ClusterView()
        self.index = DeviceIndex(engine)
        self.view.subscribe(self.index.on_change)
        self.model = Model(self.index)
        for obj in [*CLASSES, *objects]:
            self.view.apply(Kind(obj["kind"]), obj)

    def check(self, *specs: Obj) -> Verdict:
        claims = [
            ClaimInput(
                f"claim c{i}", parse_claim_spec(spec), f"claims[{i}]." if len(specs) > 1 else ""
            )
            for i, spec in enumerate(specs)
        ]
        return self.model.check(
            claims,
            self.view.device_classes(),
            self.view.derived(Allocations),
            classes_generation=self.view.generation(Kind.DEVICE_CLASS),
        )


def request(
    name: str = "gpu",
    device_class: str = "gpu.nvidia.com",
    count: int | None = 1,
    *selectors: str,
    **fields: Any,
) -> Obj:
    body: Obj = {"deviceClassName": device_class, **fields}
    if count is not None:
        body["count"] = count
    if selectors:
        body["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    return {"name": name, "exactly": body}


def spec(*requests: Obj, constraints: list[Obj] | None = None) -> Obj:
    devices: Obj = {"requests": list(requests)}
    if constraints:
        devices["constraints"] = constraints
    return {"devices": devices}
