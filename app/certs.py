"""Certificates: mint a development CA and serving certificate, and reload rotated files.

The file names are the ones cert-manager writes into its Secrets (`ca.crt`, `tls.crt`,
`tls.key`), so a mounted Secret works unchanged.

Reloading: the server's SSLContext has an SNI callback that runs at the start of every TLS
handshake. When the certificate files changed (checked at most every `interval` seconds), it
builds a new context and hands it to the handshake in progress; connections already open keep
theirs. No restart, no dropped request, no background task.
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
    """Write atomically (rename), keys readable by the owner only."""
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


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
        ca_cert = (
            x509.CertificateBuilder()
            .subject_name(ca_name)
            .issuer_name(ca_name)
            .public_key(ca_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=days * 10))
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
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False)
            .sign(ca_key, hashes.SHA256())
        )
        _write(ca_key_path, _pem_key(ca_key), private=True)
        _write(ca_cert_path, ca_cert.public_bytes(serialization.Encoding.PEM))

    dns = list(dict.fromkeys((*dns_names, *DEFAULT_DNS)))
    ips = list(dict.fromkeys((*ip_addresses, *DEFAULT_IPS)))
    key = _key()
    serial = x509.random_serial_number()
    sans: list[x509.GeneralName] = [x509.DNSName(name) for name in dns]
    sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, dns[0])]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(serial)
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
        .sign(ca_key, hashes.SHA256())
    )
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


class CertReloader:
    """Serves the current tls.crt/tls.key, picking up rotated files at the next handshake."""

    def __init__(self, directory: Path, interval: float = 2.0) -> None:
        self._cert = directory / TLS_CERT
        self._key = directory / TLS_KEY
        self._interval = interval
        self._lock = threading.Lock()
        self._stamp = self._file_stamp()
        self._checked = time.monotonic()
        self._current = self._build()
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

    def _build(self) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(self._cert, self._key)
        ctx.set_alpn_protocols(["http/1.1"])
        return ctx

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
                fresh = self._build()
            except (OSError, ssl.SSLError) as exc:
                # Mid-rotation (key written, certificate not yet) or a bad pair: keep serving.
                logger.warning("certificate reload deferred", extra={"error": str(exc)})
                return None
            self._stamp = stamp
            self._fresh = fresh
            self.reloads += 1
            logger.info("serving certificate reloaded", extra={"cert": str(self._cert)})
            return fresh

    def _on_handshake(
        self, conn: ssl.SSLObject | ssl.SSLSocket, server_name: str | None, ctx: ssl.SSLContext
    ) -> None:
        self.maybe_reload()
        if self._fresh is not None:
            conn.context = self._fresh
