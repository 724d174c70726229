"""Which resource.k8s.io versions a target cluster serves: from a Kubernetes version, or asked.

`check` and `report` flag a DRA object whose apiVersion the target does not serve: kubectl would
answer `no matches for kind "ResourceClaimTemplate" in version "resource.k8s.io/v1beta1"` and the
workload that names the template would wait for it forever. The target is the cluster of
`--kubeconfig` (its discovery: `GET /apis/resource.k8s.io` and each version's resource list,
the truth, `--runtime-config` included), or a release given with `--kubernetes-version` (what it
serves by default), or, with neither, Kubernetes 1.34 or later with its defaults: the webhook
itself needs resource.k8s.io/v1 (GA in 1.34), and since then only v1 is served by default.

What each release has (k8s.io/api's resource/ folders and register.go, per tag); only v1 is on by
default: beta APIs added after 1.24 are off unless `--runtime-config` turns them on (KEP-3136),
and so are alphas:

| version | kinds | releases |
| --- | --- | --- |
| v1alpha1 | ResourceClass, ResourceClaim, ResourceClaimTemplate, PodScheduling | 1.26 |
| v1alpha2 | ResourceClass, ResourceClaim, ResourceClaimTemplate, PodSchedulingContext | 1.27-1.30 |
| v1alpha2 | ResourceSlice, ResourceClaimParameters, ResourceClassParameters | 1.30 |
| v1alpha3 | DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice | 1.31-1.33 |
| v1alpha3 | PodSchedulingContext | 1.31 |
| v1alpha3 | DeviceTaintRule | 1.33- |
| v1alpha3 | ResourcePoolStatusRequest | 1.36- |
| v1beta1 | DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice | 1.32- |
| v1beta2 | DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice | 1.33- |
| v1beta2 | DeviceTaintRule | 1.36- |
| v1 | DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice (on by default) | 1.34- |
| v1 | DeviceTaintRule (on by default; DRADeviceTaintRules GA) | 1.37- |
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from app.errors import ConfigError
from app.migrate import advice, versions

GROUP = versions.GROUP
_CORE = ("DeviceClass", "ResourceClaim", "ResourceClaimTemplate", "ResourceSlice")
_CLASSIC = ("ResourceClass", "ResourceClaim", "ResourceClaimTemplate")
_HISTORY: tuple[tuple[str, tuple[str, ...], int, int | None], ...] = (
    ("v1alpha1", (*_CLASSIC, "PodScheduling"), 26, 26),
    ("v1alpha2", (*_CLASSIC, "PodSchedulingContext"), 27, 30),
    ("v1alpha2", ("ResourceSlice", "ResourceClaimParameters", "ResourceClassParameters"), 30, 30),
    ("v1alpha3", _CORE, 31, 33),
    ("v1alpha3", ("PodSchedulingContext",), 31, 31),
    ("v1alpha3", ("DeviceTaintRule",), 33, None),
    ("v1alpha3", ("ResourcePoolStatusRequest",), 36, None),
    ("v1beta1", _CORE, 32, None),
    ("v1beta2", _CORE, 33, None),
    ("v1beta2", ("DeviceTaintRule",), 36, None),
    ("v1", _CORE, 34, None),
    ("v1", ("DeviceTaintRule",), 37, None),
)
"""(version, kinds, first minor release, last minor release or None for still there)."""
ON_BY_DEFAULT = "v1"
FIRST_V1 = 34
LATEST = 36
"""The newest release the table knows (v1.36, the release of the control plane tests/e2e runs)."""
_VERSION = re.compile(r"v?1\.(\d+)(?:\.\d+)?(?:[-+].*)?")
REQUEST_TIMEOUT = 30.0

Kinds = frozenset[tuple[str, str]]
"""(version, kind) pairs of resource.k8s.io."""


@dataclass(frozen=True)
class Target:
    """What a cluster serves of resource.k8s.io, and how to name that cluster in a message."""

    served: Kinds
    described: str
    """"Kubernetes 1.36 with its default API versions", "the cluster of kubeconfig k.yaml"..."""
    switchable: Kinds = frozenset()
    """What the release has but serves only with --runtime-config (offline targets only)."""
    release: str = ""
    """"1.33", "1.34 or later": the release(s) an offline target stands for ("" when asked)."""

    def verdict(self, obj: Any) -> str | None:
        """Why the target cannot take `obj` (a resource.k8s.io object of a version or kind it
        does not serve), or None."""
        if not isinstance(obj, dict):
            return None
        api_version, kind = obj.get("apiVersion"), obj.get("kind")
        if not isinstance(api_version, str) or not isinstance(kind, str):
            return None
        group, _, version = api_version.rpartition("/")
        if group != GROUP or kind.endswith("List") or (version, kind) in self.served:
            return None
        said = f'no matches for kind "{kind}" in version "{api_version}"'
        text = f"{api_version} {kind} is not served by {self.described}: kubectl answers '{said}'"
        if (version, kind) in self.switchable:
            text += f" (it is served only with --runtime-config={api_version}=true)"
        elif self.release:
            text += (
                f" (Kubernetes {self.release} has no {kind} in {api_version}, whatever its flags)"
            )
        return f"{text}; {_fix(obj, version, kind, self.release)}"


def _fix(obj: dict[str, Any], version: str, kind: str, release: str = "") -> str:
    if version in versions.BETAS and kind in versions.CONVERTED:
        return f"`dra-webhook migrate --write` on its file rewrites it as {versions.TARGET}"
    if advice.unconvertible(obj, version, kind) is not None:
        return f"it has no {versions.TARGET} conversion: `dra-webhook migrate` says what to write"
    found = _VERSION.match(release.strip()) if release else None
    minor = int(found.group(1)) if found else LATEST
    if (version, kind) in _kinds(max(minor, LATEST)) and (ON_BY_DEFAULT, kind) not in _kinds(
        minor
    ):  # a kind with no v1 form yet on the target (DeviceTaintRule before 1.37)
        return f"it has no {versions.TARGET} form yet: serve {GROUP}/{version}, or leave it out"
    return f"write it for {versions.TARGET}"


def _kinds(minor: int) -> Kinds:
    """Every (version, kind) release 1.`minor` has, served by default or not."""
    return frozenset(
        (version, kind)
        for version, kinds, first, last in _HISTORY
        if first <= minor and (last is None or minor <= last)
        for kind in kinds
    )


def for_release(text: str | None) -> Target:
    """What a release serves by default; None: any release from 1.34 (the webhook's floor)."""
    if text is None:
        return Target(
            frozenset(k for k in _kinds(FIRST_V1) if k[0] == ON_BY_DEFAULT),
            f"Kubernetes 1.{FIRST_V1} or later with its default API versions (the target assumed "
            "without --kubernetes-version or --kubeconfig)",
            frozenset(k for k in _kinds(FIRST_V1) if k[0] != ON_BY_DEFAULT),
            f"1.{FIRST_V1} or later",
        )
    found = _VERSION.fullmatch(text.strip())
    if found is None:
        raise ConfigError(f"--kubernetes-version {text}: not a Kubernetes version (like 1.36)")
    minor = int(found.group(1))
    has = _kinds(minor)
    served = frozenset(k for k in has if k[0] == ON_BY_DEFAULT)
    return Target(
        served, f"Kubernetes 1.{minor} with its default API versions", has - served, f"1.{minor}"
    )


async def discover(kubeconfig: Path) -> Target:
    """What the cluster of `kubeconfig` serves, from its discovery."""
    from app.cluster.api import Api, status_text
    from app.cluster.listing import ReportError, connect

    where = f"--kubeconfig {kubeconfig}"
    try:
        api = Api(await connect(kubeconfig))
    except ReportError as exc:
        raise ConfigError(f"{where}: {str(exc).removeprefix('report: ')}") from None
    try:
        status, body = await api.request("GET", "/version", timeout=REQUEST_TIMEOUT)
        release = _field(body, "gitVersion") if status == 200 else ""
        described = f"the cluster of {kubeconfig}" + (f" (Kubernetes {release})" if release else "")
        status, body = await api.request("GET", f"/apis/{GROUP}", timeout=REQUEST_TIMEOUT)
        if status == 404:
            return Target(frozenset(), described)
        if status != 200:
            raise ConfigError(f"{where}: GET /apis/{GROUP}: {status_text(status, body)}")
        served: set[tuple[str, str]] = set()
        for version in _versions(body):
            status, body = await api.request(
                "GET", f"/apis/{GROUP}/{version}", timeout=REQUEST_TIMEOUT
            )
            if status == 200:
                served |= {(version, kind) for kind in _resource_kinds(body)}
        return Target(frozenset(served), described)
    except (OSError, TimeoutError) as exc:  # aiohttp's errors are OSErrors
        raise ConfigError(f"{where}: the API server cannot be reached: {exc}") from None
    finally:
        await api.close()


def _parsed(body: bytes) -> Any:
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        return None


def _field(body: bytes, name: str) -> str:
    data = _parsed(body)
    value = data.get(name) if isinstance(data, dict) else None
    return value if isinstance(value, str) else ""


def _versions(body: bytes) -> list[str]:
    data = _parsed(body)
    found = data.get("versions") if isinstance(data, dict) else None
    return [
        v["version"]
        for v in found or ()
        if isinstance(v, dict) and isinstance(v.get("version"), str)
    ]


def _resource_kinds(body: bytes) -> set[str]:
    data = _parsed(body)
    found = data.get("resources") if isinstance(data, dict) else None
    return {
        r["kind"]
        for r in found or ()
        if isinstance(r, dict) and isinstance(r.get("kind"), str) and "/" not in str(r.get("name"))
    }
