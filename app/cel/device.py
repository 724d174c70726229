"""DRA devices as CEL sees them, built from ``resource.k8s.io/v1`` ResourceSlices.

A selector reads ``device.driver``, ``device.attributes["<domain>"].<name>`` (int, bool, string
or version), ``device.capacity["<domain>"].<name>`` (a Quantity) and
``device.allowMultipleAllocations``. A slice lists attribute and capacity names either qualified
(``gpu.nvidia.com/model``) or bare (``model``); a bare name belongs to the driver's domain
(dynamic-resource-allocation/cel ``parseQualifiedName``).

:class:`Device` is backend-neutral; each engine turns it into its own activation once
(:meth:`app.cel.engine.Engine.device_activation`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from app.cel.semver import Semver, SemverError, parse_semver
from app.k8s.quantity import Quantity, QuantityError, parse_quantity

__all__ = ["AttributeValue", "Device", "devices_of_slice", "split_qualified_name"]

AttributeValue = int | bool | str | Semver


@dataclass(frozen=True, slots=True)
class Device:
    """One device of a ResourceSlice, with names already split into domain and id.

    ``problem`` is set when the slice carries a value Kubernetes cannot give to CEL (an
    unparsable version or quantity, an attribute with no value); such a device never matches.
    """

    driver: str
    pool: str
    slice_name: str
    name: str
    attributes: Mapping[str, Mapping[str, AttributeValue]] = field(default_factory=dict)
    capacity: Mapping[str, Mapping[str, Quantity]] = field(default_factory=dict)
    allow_multiple_allocations: bool = False
    problem: str | None = None

    @property
    def id(self) -> str:
        """``<driver>/<pool>/<device>``: how Kubernetes names a device in allocation results."""
        return f"{self.driver}/{self.pool}/{self.name}"


def split_qualified_name(name: str, driver: str) -> tuple[str, str]:
    """``"gpu.nvidia.com/model"`` -> (domain, id); a bare name takes the driver as domain."""
    domain, sep, ident = name.partition("/")
    if not sep:
        return driver, name
    return domain, ident


def _attribute_value(raw: Any) -> AttributeValue:
    if not isinstance(raw, Mapping):
        raise ValueError("attribute is not an object")
    if "int" in raw and isinstance(raw["int"], int) and not isinstance(raw["int"], bool):
        return int(raw["int"])
    if "bool" in raw and isinstance(raw["bool"], bool):
        return bool(raw["bool"])
    if "string" in raw and isinstance(raw["string"], str):
        return str(raw["string"])
    if "version" in raw and isinstance(raw["version"], str):
        try:
            return parse_semver(raw["version"])
        except SemverError as error:
            raise ValueError(f"parse semantic version: {error}") from None
    raise ValueError("unsupported attribute value")


def _device(spec: Mapping[str, Any], raw: Mapping[str, Any], slice_name: str) -> Device:
    driver = str(spec.get("driver", ""))
    pool = spec.get("pool") or {}
    pool_name = str(pool.get("name", "")) if isinstance(pool, Mapping) else ""
    # v1beta1 nested the fields under "basic"; v1 has them on the device.
    body = raw.get("basic") if isinstance(raw.get("basic"), Mapping) else raw
    assert isinstance(body, Mapping)
    attributes: dict[str, dict[str, AttributeValue]] = {}
    capacity: dict[str, dict[str, Quantity]] = {}
    problem = None
    for qualified, value in (body.get("attributes") or {}).items():
        domain, ident = split_qualified_name(str(qualified), driver)
        try:
            attributes.setdefault(domain, {})[ident] = _attribute_value(value)
        except ValueError as error:
            problem = problem or f"attribute {qualified}: {error}"
    for qualified, value in (body.get("capacity") or {}).items():
        domain, ident = split_qualified_name(str(qualified), driver)
        raw_value = value.get("value") if isinstance(value, Mapping) else value
        try:
            if not isinstance(raw_value, str | int | float):
                raise QuantityError("no value")
            capacity.setdefault(domain, {})[ident] = parse_quantity(raw_value)
        except QuantityError as error:
            problem = problem or f"capacity {qualified}: {error}"
    return Device(
        driver=driver,
        pool=pool_name,
        slice_name=slice_name,
        name=str(raw.get("name", "")),
        attributes=attributes,
        capacity=capacity,
        allow_multiple_allocations=bool(body.get("allowMultipleAllocations", False)),
        problem=problem,
    )


def devices_of_slice(resource_slice: Mapping[str, Any]) -> Iterator[Device]:
    """The devices a raw ResourceSlice publishes (malformed entries are skipped)."""
    spec = resource_slice.get("spec")
    if not isinstance(spec, Mapping):
        return
    metadata = resource_slice.get("metadata") or {}
    slice_name = str(metadata.get("name", "")) if isinstance(metadata, Mapping) else ""
    for raw in spec.get("devices") or ():
        if isinstance(raw, Mapping) and raw.get("name"):
            yield _device(spec, raw, slice_name)
