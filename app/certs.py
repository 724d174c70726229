"""Certificates: mint a development CA and serving certificate, and reload rotated files.

The file names are the ones cert-manager writes into its Secrets (`ca.crt`, `tls.crt`,
`tls.key`), so a mounted Secret works unchanged.

Reloading: the server's SSLContext has an SNI callback that runs at the start of every TLS
handshake. When the certificate files changed (checked at most every `interval` seconds), it
builds a new context and hands it to the handshake in progress; connections already open keep
theirs. No restart, no dropped request, no background task.

An expired certificate is never served: rotated files holding one are not loaded, and once the
certificate in use has expired every handshake is refused (the API server then answers per the
webhook's failurePolicy, as for an outage, instead of calling a server it cannot trust).

`mint_pair` makes a CA and a serving certificate in memory, for the certificates the webhook
manages itself in a Secret (app.cluster.certificates).
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import logging
import os
import ssl
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

logger = logging.getLogger(__name__)

CA_CERT, CA_KEY, TLS_CERT, TLS_KEY = "ca.crt", "ca.key", "tls.crt", "tls.key"
DEFAULT_DNS = ("localhost",)
DEFAULT_IPS = ("127.0.0.1",)


@dataclass(frozen=True, slots=True)
class MintedCerts:
    directory: Path
    ca_bundle: str
    """base64 of ca.crt: the caBundle of a webhook configuration."""
    serial: int


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _write(path: Path, data: bytes, private: bool = False) -> None:
    """Write atomically (rename), keys readable by the owner only. The temporary name is the
    process's own: several workers may write the same managed pair at once."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


@dataclass(frozen=True, slots=True)
class Pair:
    """A CA and the serving certificate it signed, as PEM (what the managed Secret holds)."""

    ca_cert: bytes
    ca_key: bytes
    cert: bytes
    key: bytes


def _ca_certificate(
    key: ec.EllipticCurvePrivateKey, name: x509.Name, now: dt.datetime, until: dt.datetime
) -> x509.Certificate:
    return (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(until)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
        .sign(key, hashes.SHA256())
    )


def _serving_certificate(
    key: ec.EllipticCurvePrivateKey,
    ca_cert: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    sans: tuple[list[str], list[str]],
    validity: tuple[dt.datetime, dt.datetime],
) -> x509.Certificate:
    dns, ips = sans
    now, until = validity
    names: list[x509.GeneralName] = [x509.DNSName(name) for name in dns]
    names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
    return (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, dns[0])]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(until)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
        .sign(ca_key, hashes.SHA256())
    )


def mint(
    directory: Path,
    dns_names: tuple[str, ...] = (),
    ip_addresses: tuple[str, ...] = (),
    days: int = 365,
    reuse_ca: bool = True,
) -> MintedCerts:
    """Write ca.crt/ca.key (kept if present and reuse_ca) and a serving tls.crt/tls.key.

    SANs are the given names plus localhost and 127.0.0.1.
    """
    directory.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.UTC)
    ca_cert_path, ca_key_path = directory / CA_CERT, directory / CA_KEY
    if reuse_ca and ca_cert_path.exists() and ca_key_path.exists():
        ca_cert = x509.load_pem_x509_certificate(ca_cert_path.read_bytes())
        loaded = serialization.load_pem_private_key(ca_key_path.read_bytes(), password=None)
        if not isinstance(loaded, ec.EllipticCurvePrivateKey):
            raise ValueError(f"{ca_key_path} is not an EC key")
        ca_key = loaded
    else:
        ca_key = _key()
        ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "dra-webhook CA")])
        since = now - dt.timedelta(minutes=5)
        ca_cert = _ca_certificate(ca_key, ca_name, since, now + dt.timedelta(days=days * 10))
        _write(ca_key_path, _pem_key(ca_key), private=True)
        _write(ca_cert_path, ca_cert.public_bytes(serialization.Encoding.PEM))

    dns = list(dict.fromkeys((*dns_names, *DEFAULT_DNS)))
    ips = list(dict.fromkeys((*ip_addresses, *DEFAULT_IPS)))
    key = _key()
    since, until = now - dt.timedelta(minutes=5), now + dt.timedelta(days=days)
    cert = _serving_certificate(key, ca_cert, ca_key, (dns, ips), (since, until))
    serial = cert.serial_number
    # Key first, then certificate: a reader that sees the new certificate finds its key.
    _write(directory / TLS_KEY, _pem_key(key), private=True)
    _write(directory / TLS_CERT, cert.public_bytes(serialization.Encoding.PEM))
    bundle = base64.b64encode(ca_cert.public_bytes(serialization.Encoding.PEM)).decode("ascii")
    return MintedCerts(directory, bundle, serial)


def ensure_dev_certs(directory: Path) -> bool:
    """Mint development certificates when tls.crt/tls.key are absent; True if it minted."""
    if (directory / TLS_CERT).exists() and (directory / TLS_KEY).exists():
        return False
    mint(directory)
    return True


def mint_pair(
    dns_names: tuple[str, ...], lifetime: dt.timedelta, ip_addresses: tuple[str, ...] = ()
) -> Pair:
    """A fresh CA and a serving certificate, both valid for `lifetime` from now (and from a
    minute before, for clocks a little behind). SANs: the names given plus localhost and
    127.0.0.1. A new CA each time: a rotation changes the caBundle, never reuses a key."""
    now = dt.datetime.now(dt.UTC)
    since, until = now - dt.timedelta(minutes=1), now + lifetime
    ca_key, key = _key(), _key()
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "dra-webhook CA")])
    ca_cert = _ca_certificate(ca_key, ca_name, since, until)
    dns = list(dict.fromkeys((*dns_names, *DEFAULT_DNS)))
    ips = list(dict.fromkeys((*ip_addresses, *DEFAULT_IPS)))
    cert = _serving_certificate(key, ca_cert, ca_key, (dns, ips), (since, until))
    pem = serialization.Encoding.PEM
    return Pair(ca_cert.public_bytes(pem), _pem_key(ca_key), cert.public_bytes(pem), _pem_key(key))


def not_after(pem: bytes) -> dt.datetime:
    """When the first certificate of a PEM file expires (ValueError: not a certificate)."""
    return x509.load_pem_x509_certificate(pem).not_valid_after_utc


def write_serving_files(directory: Path, pair: Pair) -> None:
    """The pair's tls.key, tls.crt and ca.crt into `directory`, each replaced atomically, the
    key first: a reader that sees the new certificate finds its key (CertReloader builds from
    both, and defers a mismatched pair to its next look)."""
    directory.mkdir(parents=True, exist_ok=True)
    _write(directory / TLS_KEY, pair.key, private=True)
    _write(directory / TLS_CERT, pair.cert)
    _write(directory / CA_CERT, pair.ca_cert)


class CertReloader:
    """Serves the current tls.crt/tls.key, picking up rotated files at the next handshake."""

    def __init__(self, directory: Path, interval: float = 2.0) -> None:
        self._cert = directory / TLS_CERT
        self._key = directory / TLS_KEY
        self._interval = interval
        self._lock = threading.Lock()
        self._stamp = self._file_stamp()
        self._checked = time.monotonic()
        self._current, self.expires = self._build()
        self._current.sni_callback = self._on_handshake
        self._fresh: ssl.SSLContext | None = None
        self.reloads = 0

    @property
    def context(self) -> ssl.SSLContext:
        """The context to give the server; it stays the entry point for every handshake."""
        return self._current

    def _file_stamp(self) -> tuple[tuple[int, int, int], ...]:
        stamps = []
        for path in (self._cert, self._key):
            st = path.stat()
            stamps.append((st.st_ino, st.st_mtime_ns, st.st_size))
        return tuple(stamps)

    def _build(self) -> tuple[ssl.SSLContext, dt.datetime | None]:
        """A context for the files, and when their certificate expires (None: unreadable by
        cryptography, which the TLS library accepted: never judged expired)."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(self._cert, self._key)
        ctx.set_alpn_protocols(["http/1.1"])
        try:
            expires: dt.datetime | None = not_after(self._cert.read_bytes())
        except ValueError:
            expires = None
        return ctx, expires

    def expired(self) -> bool:
        """The certificate in use has expired (every handshake is then refused)."""
        return self.expires is not None and dt.datetime.now(dt.UTC) >= self.expires

    def maybe_reload(self) -> ssl.SSLContext | None:
        """A new context if the files changed since the last look, else None."""
        now = time.monotonic()
        if now - self._checked < self._interval:
            return None
        with self._lock:
            if now - self._checked < self._interval:
                return None
            self._checked = now
            try:
                stamp = self._file_stamp()
                if stamp == self._stamp:
                    return None
                fresh, expires = self._build()
            except (OSError, ssl.SSLError) as exc:
                # Mid-rotation (key written, certificate not yet) or a bad pair: keep serving.
                logger.warning("certificate reload deferred", extra={"error": str(exc)})
                return None
            self._stamp = stamp
            if expires is not None and dt.datetime.now(dt.UTC) >= expires:
                logger.warning(
                    "rotated certificate has expired: not loaded", extra={"cert": str(self._cert)}
                )
                return None
            self.expires = expires
            self._fresh = fresh
            self.reloads += 1
            logger.info("serving certificate reloaded", extra={"cert": str(self._cert)})
            return fresh

    def _on_handshake(
        self, conn: ssl.SSLObject | ssl.SSLSocket, server_name: str | None, ctx: ssl.SSLContext
    ) -> int | None:
        self.maybe_reload()
        if self.expired():
            # Never an expired certificate: the client gets an alert, not a pair it must reject.
            return ssl.ALERT_DESCRIPTION_INTERNAL_ERROR
        if self._fresh is not None:
            conn.context = self._fresh
        return None
