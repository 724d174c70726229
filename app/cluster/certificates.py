"""Certificates the webhook makes, rotates and serves itself (the chart's `certificates.mode:
managed`), as Kyverno's `pkg/tls` and Gatekeeper's cert-controller do: the chart renders no key
and no caBundle, so two renders of it are the same and a GitOps controller sees no drift.

Who does what:

- one replica at a time leads (a Lease, app.cluster.lease). When the Secret holds no valid pair,
  or a third of the pair's lifetime is left, the leader mints a new CA and serving certificate
  (app.certs.mint_pair), **first** sets every webhook entry's caBundle to the new CA followed by
  the CA in use, **then** writes the pair into the Secret: the API server trusts the new CA
  before any replica serves a certificate it signed, and still trusts the old one while replicas
  serve theirs, so no call fails during a rotation. The leader also puts the Secret's bundle back
  into an entry that lost it (a re-applied manifest, a restored backup);
- every replica (every worker) reads the Secret each `managed_certs_sync_seconds` and writes a
  newer valid pair into `cert_dir`, where the server's reloader (app.certs.CertReloader) picks it
  up at the next handshake. An expired pair is never written, and the reloader never serves one;
- readiness: false once a sixth of the lifetime is left on the pair this replica serves (the
  Secret unreadable, renewal failing): the replica leaves the Service while its certificate is
  still valid, and says why in /readyz.

Least RBAC (docs/rbac.md, "Managed certificates"): get and update of the one Secret, get and
update of the one Lease (a Role in the release namespace, by resourceNames), get and patch of the
two webhook configurations by name (a ClusterRole). The chart renders the Secret and the Lease
empty, so no `create`, which RBAC cannot narrow to a name, is needed.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import logging
import time
from dataclasses import dataclass
from pathlib import Path

import orjson

from app.certs import Pair, mint_pair, not_after, write_serving_files
from app.cluster.api import Api, api_path, connect, describe, status_text
from app.cluster.lease import Election
from app.cluster.view import Obj
from app.config.settings import Settings
from app.errors import ConfigError

logger = logging.getLogger(__name__)

CA_CRT, CA_KEY, TLS_CRT, TLS_KEY, BUNDLE = "ca.crt", "ca.key", "tls.crt", "tls.key", "ca-bundle.crt"
WEBHOOK_CONFIGURATIONS = ("mutatingwebhookconfigurations", "validatingwebhookconfigurations")
ADMISSION = ("apis", "admissionregistration.k8s.io", "v1")
STRATEGIC = "application/strategic-merge-patch+json"


@dataclass(frozen=True, slots=True)
class Stored:
    """A valid pair from the Secret, and the caBundle that goes with it."""

    pair: Pair
    bundle: bytes
    """PEM: this pair's CA, then the CA it replaced (trusted until the next rotation)."""
    expires: dt.datetime


def decode(secret: Obj) -> Stored | None:
    """The Secret's pair, or None when it holds none (empty, partial, not PEM)."""
    data = secret.get("data") or {}
    try:
        fields = {key: base64.b64decode(data[key]) for key in (CA_CRT, CA_KEY, TLS_CRT, TLS_KEY)}
        bundle = base64.b64decode(data.get(BUNDLE) or data[CA_CRT])
        expires = min(not_after(fields[TLS_CRT]), not_after(fields[CA_CRT]))
    except (KeyError, ValueError, TypeError):
        return None
    pair = Pair(fields[CA_CRT], fields[CA_KEY], fields[TLS_CRT], fields[TLS_KEY])
    return Stored(pair, bundle, expires)


def encode(stored: Stored) -> dict[str, str]:
    raw = {
        CA_CRT: stored.pair.ca_cert,
        CA_KEY: stored.pair.ca_key,
        TLS_CRT: stored.pair.cert,
        TLS_KEY: stored.pair.key,
        BUNDLE: stored.bundle,
    }
    return {key: base64.b64encode(value).decode("ascii") for key, value in raw.items()}


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class ManagedCertificates:
    """One replica's part: lead when it can, load what the Secret holds, say when to stop."""

    def __init__(self, settings: Settings, api: Api) -> None:
        self.api = api
        self.namespace = settings.namespace
        self.secret = settings.managed_certs_secret
        self.webhook = settings.managed_certs_webhook
        self.cert_dir: Path = settings.cert_dir
        self.lifetime = dt.timedelta(seconds=settings.managed_certs_lifetime_seconds)
        self.sync_seconds = settings.managed_certs_sync_seconds
        self.timeout = settings.api_timeout_seconds
        self.dns_names = tuple(
            name.strip() for name in settings.managed_certs_dns_names.split(",") if name.strip()
        )
        self.election = Election(
            api,
            settings.namespace,
            settings.managed_certs_lease or settings.managed_certs_secret,
            duration=settings.managed_certs_lease_seconds,
            timeout=settings.api_timeout_seconds,
        )
        self.serving: Stored | None = None
        """The pair this replica wrote into cert_dir last."""
        self.problem = "no certificate loaded yet"
        """Why the last round did not end well ('' when it did)."""
        self.rotations = 0

    # -- what every replica does ----------------------------------------------------------

    def ready(self) -> tuple[bool, str]:
        """Serving a pair with more than a sixth of its lifetime left; else why not."""
        if self.serving is None:
            return False, self.problem
        left = self.serving.expires - _now()
        if left > self.lifetime / 6:
            return True, ""
        return False, f"serving certificate expires in {max(0, int(left.total_seconds()))} s " + (
            f"and is not renewed ({self.problem})" if self.problem else "and is not renewed"
        )

    async def step(self) -> None:
        """One round: lead if possible (and then rotate or repair), load the Secret's pair."""
        problems: list[str] = []
        try:
            leading = await self.election.try_lead()
        except Exception as exc:
            leading = False
            problems.append(f"Lease: {describe(exc)}")
        secret, stored = await self._read()
        if leading:
            try:
                stored = await self._rotate_if_due(secret, stored)
                if stored is not None:
                    await self._keep_bundles(stored.bundle)
            except Exception as exc:
                problems.append(describe(exc))
        if stored is not None and stored.expires > _now():
            self._serve(stored)
        elif stored is None:
            problems.append(f"Secret {self.namespace}/{self.secret} holds no certificate yet")
        self.problem = "; ".join(problems)
        if problems:
            logger.warning("managed certificates", extra={"problem": self.problem})

    async def run(self) -> None:
        """`step` every `sync_seconds` until cancelled; gives the Lease up at the end."""
        try:
            while True:
                try:
                    await self.step()
                except Exception as exc:  # the Secret unreadable: serve on, readiness tells
                    self.problem = describe(exc)
                    logger.warning("managed certificates", extra={"problem": self.problem})
                await asyncio.sleep(self.sync_seconds)
        finally:
            await self.election.release()

    def _secret_path(self) -> str:
        return api_path("api", "v1", "namespaces", self.namespace, "secrets", self.secret)

    async def _read(self) -> tuple[Obj | None, Stored | None]:
        status, body = await self.api.request("GET", self._secret_path(), timeout=self.timeout)
        if status == 404:
            return None, None
        if status != 200:
            raise RuntimeError(f"Secret {self.secret}: {status_text(status, body)}")
        secret: Obj = orjson.loads(body)
        return secret, decode(secret)

    def _serve(self, stored: Stored) -> None:
        if self.serving is not None and self.serving.pair == stored.pair:
            return
        write_serving_files(self.cert_dir, stored.pair)
        self.serving = stored
        logger.info(
            "serving certificate loaded from the Secret",
            extra={"secret": self.secret, "not_after": stored.expires.isoformat()},
        )

    # -- what the leader does --------------------------------------------------------------

    async def _rotate_if_due(self, secret: Obj | None, stored: Stored | None) -> Stored | None:
        if stored is not None and stored.expires - _now() > self.lifetime / 3:
            return stored
        pair = mint_pair(self.dns_names, self.lifetime)
        previous = stored.pair.ca_cert if stored is not None and stored.expires > _now() else b""
        fresh = Stored(pair, pair.ca_cert + previous, not_after(pair.cert))
        # The API server must trust the new CA before a replica serves what it signed.
        await self._keep_bundles(fresh.bundle)
        if secret is None:
            body: Obj = {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": self.secret, "namespace": self.namespace},
                "type": "Opaque",
                "data": encode(fresh),
            }
            path = api_path("api", "v1", "namespaces", self.namespace, "secrets")
            status, answer = await self.api.request("POST", path, body=body, timeout=self.timeout)
            written = status == 201
        else:
            secret["data"] = {**(secret.get("data") or {}), **encode(fresh)}
            status, answer = await self.api.request(
                "PUT", self._secret_path(), body=secret, timeout=self.timeout
            )
            written = status == 200
        if not written:
            # The bundle holds the new CA and the one in use: calls keep working. Put the
            # Secret's own bundle back if another leader wrote it meanwhile (409).
            if stored is not None and status == 409:
                await self._keep_bundles(stored.bundle)
            reason = status_text(status, answer)
            raise RuntimeError(f"rotation not saved: Secret {self.secret}: {reason}")
        self.rotations += 1
        logger.info(
            "certificates rotated",
            extra={"secret": self.secret, "not_after": fresh.expires.isoformat()},
        )
        return fresh

    async def _keep_bundles(self, bundle: bytes) -> None:
        """Every entry of both webhook configurations carries `bundle` (one patch each)."""
        wanted = base64.b64encode(bundle).decode("ascii")
        for plural in WEBHOOK_CONFIGURATIONS:
            path = api_path(*ADMISSION, plural, self.webhook)
            status, body = await self.api.request("GET", path, timeout=self.timeout)
            if status == 404:
                continue  # the chart may leave one out (webhook.mutating.enabled: false)
            if status != 200:
                raise RuntimeError(f"{plural} {self.webhook}: {status_text(status, body)}")
            entries = orjson.loads(body).get("webhooks") or []
            stale = [
                entry["name"]
                for entry in entries
                if (entry.get("clientConfig") or {}).get("caBundle") != wanted
            ]
            if not stale:
                continue
            patch = {
                "webhooks": [{"name": name, "clientConfig": {"caBundle": wanted}} for name in stale]
            }
            status, body = await self.api.request(
                "PATCH", path, body=patch, timeout=self.timeout, content_type=STRATEGIC
            )
            if status != 200:
                raise RuntimeError(f"{plural} {self.webhook}: {status_text(status, body)}")
            logger.info("caBundle updated", extra={"configuration": plural, "entries": len(stale)})


async def bootstrap(settings: Settings) -> None:
    """Before the server listens: a valid pair from the Secret in `cert_dir` (made by this
    process if it leads, else the leader's), or ConfigError after `managed_certs_startup_seconds`
    saying what is wrong (a missing grant, no leader)."""
    api = Api(await connect(settings))
    manager = ManagedCertificates(settings, api)
    deadline = time.monotonic() + settings.managed_certs_startup_seconds
    try:
        while True:
            try:
                await manager.step()
            except Exception as exc:
                manager.problem = describe(exc)
            if manager.serving is not None:
                return
            if time.monotonic() > deadline:
                raise ConfigError(
                    f"no valid certificate in Secret {settings.namespace}/"
                    f"{settings.managed_certs_secret} after "
                    f"{settings.managed_certs_startup_seconds:g} s: {manager.problem}"
                )
            await asyncio.sleep(min(1.0, settings.managed_certs_sync_seconds))
    finally:
        await api.close()
