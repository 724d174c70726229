"""Who holds each allocated device: the claims, with the tolerations they were allocated with.

:class:`Allocations` (app.allocation.state) counts what a device has given out, which is all
the allocator needs; a DeviceTaintRule needs the holders themselves: the eviction controller
(pkg/controller/devicetainteviction) evicts the consumers in `status.reservedFor` of every
claim whose allocated device a NoExecute rule names, matched by driver, pool and device name
alone (`ruleMatchesDevice`), whether or not a ResourceSlice still publishes the device.

A derived index of the cluster view, kept current by claim events, with devices kept by
driver, then pool, so that a rule naming a driver or a pool reads only those. The one answer to
"who holds this device": a DeviceTaintRule's reach (app.allocation.taint_reach) and the holders
a pod waits on, which DRA will not preempt (`of`; app.policies.preemption).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from app.cluster.view import Kind

__all__ = ["DeviceHolders", "Holding"]

Obj = dict[str, Any]
ClaimKey = tuple[str, str]
"""(namespace, name) of a ResourceClaim."""


@dataclass(frozen=True, slots=True)
class Holding:
    """One allocated device of one claim."""

    claim: ClaimKey
    driver: str
    pool: str
    device: str
    tolerations: tuple[Any, ...] = ()
    """The result's raw tolerations (as allocated)."""
    admin_access: bool = False
    """An adminAccess result: it holds the device beside other claims."""


class DeviceHolders:
    """Allocated devices by driver, pool and device name (``view.derived(DeviceHolders)``)."""

    def __init__(self) -> None:
        self._by_driver: dict[str, dict[str, dict[str, list[Holding]]]] = {}
        self.claims: dict[ClaimKey, Obj] = {}
        """The allocated claims, by key (the view's objects)."""
        self.generation = 0

    def on_change(self, kind: Kind, old: Obj | None, new: Obj | None) -> None:
        if kind is not Kind.RESOURCE_CLAIM:
            return
        changed = False
        for obj, adding in ((old, False), (new, True)):
            holdings = _holdings(obj)
            if not holdings:
                continue
            changed = True
            key = holdings[0].claim
            if adding:
                self.claims[key] = obj  # type: ignore[assignment]
            elif self.claims.get(key) is obj:
                del self.claims[key]
            for holding in holdings:
                pools = self._by_driver.setdefault(holding.driver, {})
                devices = pools.setdefault(holding.pool, {})
                held = devices.setdefault(holding.device, [])
                if adding:
                    held.append(holding)
                    continue
                if holding in held:
                    held.remove(holding)
                if not held:
                    del devices[holding.device]
                    if not devices:
                        del pools[holding.pool]
                        if not pools:
                            del self._by_driver[holding.driver]
        if changed:
            self.generation += 1

    def of(self, devices: Iterable[tuple[str, str, str]]) -> set[ClaimKey]:
        """The claims holding any of `devices` ((driver, pool, device) each), admin access
        aside: it takes nothing from the device."""
        return {h.claim for d in devices for h in self.held(*d) if not h.admin_access}

    def held(
        self, driver: str | None = None, pool: str | None = None, device: str | None = None
    ) -> Iterator[Holding]:
        """The holdings of the devices whose names match those given (None: any)."""
        drivers = (
            [self._by_driver.get(driver, {})] if driver is not None else self._by_driver.values()
        )
        for pools in drivers:
            for devices in [pools.get(pool, {})] if pool is not None else pools.values():
                for held in [devices.get(device, [])] if device is not None else devices.values():
                    yield from held


def _holdings(claim: Obj | None) -> list[Holding]:
    if claim is None:
        return []
    meta = claim.get("metadata")
    if not isinstance(meta, dict):
        return []
    key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
    status = claim.get("status")
    allocation = status.get("allocation") if isinstance(status, dict) else None
    devices = allocation.get("devices") if isinstance(allocation, dict) else None
    results = devices.get("results") if isinstance(devices, dict) else None
    found: list[Holding] = []
    for result in results if isinstance(results, list) else ():
        if not isinstance(result, dict):
            continue
        tolerations = result.get("tolerations")
        found.append(
            Holding(
                key,
                str(result.get("driver", "")),
                str(result.get("pool", "")),
                str(result.get("device", "")),
                tuple(tolerations) if isinstance(tolerations, list) else (),
                result.get("adminAccess") is True,
            )
        )
    return found
