"""Leader election on one coordination.k8s.io Lease, as client-go's leaderelection does it.

Only the leader rotates the managed certificates (app.cluster.certificates); every replica serves.
The rules are client-go's (`tools/leaderelection/leaderelection.go`, `tryAcquireOrRenew`):

- a replica takes the Lease when it has no holder, or when its record (resourceVersion) has not
  changed for `leaseDurationSeconds` as timed by this replica's own clock since it first saw that
  record: no comparison of two machines' clocks;
- every write is an update with the resourceVersion read, so of two replicas that both decide to
  take it, one gets 409 Conflict and stays a follower;
- the leader gives the Lease up when it stops (holder emptied), so the next one need not wait.

Least RBAC: `get` and `update` on this one Lease by name (the chart renders it empty, so no
`create` is needed); a missing Lease is created when the identity may (`create` cannot be
narrowed to a name), otherwise nobody leads and the log says why.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import socket
import time
from dataclasses import dataclass, field

import orjson

from app.cluster.api import Api, api_path, status_text
from app.cluster.view import Obj

logger = logging.getLogger(__name__)

LEASES = ("apis", "coordination.k8s.io", "v1", "namespaces")


def identity() -> str:
    """This process's name in the Lease: the pod's host name and the process id (several
    workers of one pod compete as several candidates)."""
    return f"{socket.gethostname()}_{os.getpid()}"


def _micro_time(when: dt.datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class Election:
    """One candidate for one Lease; `try_lead()` once per period."""

    api: Api
    namespace: str
    name: str
    duration: float
    timeout: float
    me: str = field(default_factory=identity)
    leading: bool = False
    _seen: tuple[str, float] = ("", 0.0)
    """(resourceVersion, monotonic time it was first seen): how long the record stood still."""

    def _path(self) -> str:
        return api_path(*LEASES, self.namespace, "leases", self.name)

    async def try_lead(self) -> bool:
        """Acquire or renew the Lease; whether this candidate leads now."""
        status, body = await self.api.request("GET", self._path(), timeout=self.timeout)
        if status == 404:
            self.leading = await self._create()
            return self.leading
        if status != 200:
            self._lost(f"read: {status_text(status, body)}")
            return False
        lease: Obj = orjson.loads(body)
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        version = str(lease.get("metadata", {}).get("resourceVersion", ""))
        now = time.monotonic()
        if version != self._seen[0]:
            self._seen = (version, now)
        held_elsewhere = holder not in ("", self.me)
        duration = float(spec.get("leaseDurationSeconds") or self.duration)
        if held_elsewhere and now - self._seen[1] < duration:
            self._lost(f"held by {holder}")
            return False
        transitions = int(spec.get("leaseTransitions") or 0)
        stamp = _micro_time(dt.datetime.now(dt.UTC))
        lease["spec"] = {
            **spec,
            "holderIdentity": self.me,
            "leaseDurationSeconds": max(1, round(self.duration)),
            "renewTime": stamp,
            "acquireTime": spec.get("acquireTime") if holder == self.me else stamp,
            "leaseTransitions": transitions if holder == self.me else transitions + 1,
        }
        status, body = await self.api.request("PUT", self._path(), body=lease, timeout=self.timeout)
        if status != 200:
            self._lost(f"update: {status_text(status, body)}")
            return False
        self._seen = (str(orjson.loads(body).get("metadata", {}).get("resourceVersion", "")), now)
        if not self.leading:
            logger.info("leading certificate rotation", extra={"lease": self.name, "me": self.me})
        self.leading = True
        return True

    async def _create(self) -> bool:
        stamp = _micro_time(dt.datetime.now(dt.UTC))
        lease = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": {
                "holderIdentity": self.me,
                "leaseDurationSeconds": max(1, round(self.duration)),
                "acquireTime": stamp,
                "renewTime": stamp,
                "leaseTransitions": 0,
            },
        }
        path = api_path(*LEASES, self.namespace, "leases")
        status, body = await self.api.request("POST", path, body=lease, timeout=self.timeout)
        if status != 201:
            self._lost(f"no Lease {self.name} and cannot create it: {status_text(status, body)}")
            return False
        return True

    def _lost(self, why: str) -> None:
        if self.leading:
            logger.warning("no longer leading certificate rotation", extra={"reason": why})
        else:
            logger.debug("not leading certificate rotation", extra={"reason": why})
        self.leading = False

    async def release(self) -> None:
        """Give the Lease up if held (best effort: it expires anyway)."""
        if not self.leading:
            return
        self.leading = False
        try:
            status, body = await self.api.request("GET", self._path(), timeout=self.timeout)
            if status != 200:
                return
            lease: Obj = orjson.loads(body)
            spec = lease.get("spec") or {}
            if spec.get("holderIdentity") != self.me:
                return
            lease["spec"] = {**spec, "holderIdentity": "", "leaseDurationSeconds": 1}
            await self.api.request("PUT", self._path(), body=lease, timeout=self.timeout)
        except Exception as exc:  # stopping: the Lease expires on its own
            logger.info("Lease not released", extra={"error": str(exc)})
