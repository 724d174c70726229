"""`serve`: its settings from flags and environment, the checks made before it starts (the
policy, the cluster source and the TLS pair first, then the addresses and ports), then the server
process."""

from __future__ import annotations

import argparse
import errno
import socket
import ssl
import sys
from pathlib import Path

from app.certs import TLS_CERT, TLS_KEY, ensure_dev_certs
from app.cluster.static import StaticSource
from app.cluster.view import ClusterView
from app.config import Settings, load_policy
from app.config.settings import ClusterSource
from app.errors import ConfigError

__all__ = ["run_serve"]


def run_serve(args: argparse.Namespace) -> int:
    settings = _serve_settings(args)
    _judge_files(settings)
    _check_ports(settings)
    if settings.managed_certs_secret:
        import asyncio

        from app.cluster.certificates import bootstrap

        asyncio.run(bootstrap(settings))
    elif _ensure_dev_certs(settings.cert_dir):
        print(f"minted development certificates into {settings.cert_dir}/", file=sys.stderr)
    from app.server.run import serve

    serve(settings)
    return 0


def _serve_settings(args: argparse.Namespace) -> Settings:
    overrides: dict[str, object] = {}
    for flag, key in (
        ("host", "host"),
        ("port", "port"),
        ("health_port", "health_port"),
        ("cert_dir", "cert_dir"),
        ("config", "policy_file"),
        ("workers", "workers"),
        ("metrics_dir", "metrics_dir"),
    ):
        if getattr(args, flag) is not None:
            overrides[key] = getattr(args, flag)
    if args.cluster_file is not None:
        overrides.update(cluster_source=ClusterSource.STATIC, cluster_file=args.cluster_file)
    elif args.kubeconfig is not None:
        overrides.update(cluster_source=ClusterSource.KUBECONFIG, kubeconfig=args.kubeconfig)
    elif args.in_cluster:
        overrides["cluster_source"] = ClusterSource.IN_CLUSTER
    # validated (model_copy would not be): --workers 0 is refused here, naming the flag
    return Settings.model_validate({**Settings().model_dump(), **overrides})


def _judge_files(settings: Settings) -> None:
    """Read and judge what the server would load (the policy, the cluster source, the TLS pair)
    before any port is bound: a typo in the policy is said as such, whatever holds the port."""
    load_policy(settings.policy_file)
    if settings.cluster_source is ClusterSource.STATIC:
        StaticSource(ClusterView(), settings.cluster_file).load()
    else:
        from app.cluster.factory import build_source

        build_source(settings, ClusterView())
    if settings.managed_certs_secret:
        _check_managed(settings)
    else:
        _check_cert_pair(settings.cert_dir)


def _check_managed(settings: Settings) -> None:
    """Managed certificates live in the cluster: they need its API and the configurations' name."""
    if settings.cluster_source is ClusterSource.STATIC:
        raise ConfigError(
            "DRA_WEBHOOK_MANAGED_CERTS_SECRET: managed certificates need the cluster "
            "(--kubeconfig or --in-cluster)"
        )
    if not settings.managed_certs_webhook:
        raise ConfigError(
            "DRA_WEBHOOK_MANAGED_CERTS_WEBHOOK: name the webhook configurations whose caBundle "
            "the managed certificates keep current"
        )


def _check_ports(settings: Settings) -> None:
    """The webhook's and the probes' ports can be listened on now, and are two ports."""
    if settings.health_port and settings.health_port == settings.port:
        raise ConfigError(
            f"--health-port {settings.health_port}: the same port as --port; give the probes "
            "a port of their own (0: no health listener)"
        )
    _check_listen(settings.host, settings.port, "--port")
    if settings.health_port:
        _check_listen(settings.host, settings.health_port, "--health-port")


def _check_listen(host: str, port: int, what: str) -> None:
    """`host:port` can be listened on now: the host is an address of this machine and nothing
    holds the port (a second server would otherwise fail only after its whole startup, or, on
    the probes' port, which every worker shares with SO_REUSEPORT, share it silently)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError) as exc:
        reason = exc.strerror if isinstance(exc, socket.gaierror) else str(exc)
        raise ConfigError(f"--host {host}: not an address to listen on ({reason})") from None
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(address)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise ConfigError(
                    f"{what} {port}: {host}:{port} is already in use (another dra-webhook?)"
                ) from None
            raise ConfigError(
                f"--host {host}: cannot listen on {host}:{port}: {exc.strerror}"
            ) from None


def _check_cert_pair(cert_dir: Path) -> None:
    """tls.crt and tls.key both there and a pair the TLS library accepts: a half pair is never
    replaced by a new development pair (it is someone's certificate), and a broken one is named
    before the server starts, not in a traceback from the TLS library."""
    cert, key = cert_dir / TLS_CERT, cert_dir / TLS_KEY
    present = [p.name for p in (cert, key) if p.exists()]
    if len(present) == 1:
        missing = TLS_KEY if present == [TLS_CERT] else TLS_CERT
        raise ConfigError(
            f"{cert_dir.absolute()} holds {present[0]} but no {missing}: add it (both come from "
            "the same TLS Secret), or empty the folder to have a development pair minted"
        )
    if not present:
        return
    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(cert, key)
    except (ssl.SSLError, OSError) as exc:
        reason = getattr(exc, "reason", None) or exc.strerror or str(exc)
        raise ConfigError(
            f"{cert_dir.absolute()}: {TLS_CERT} and {TLS_KEY} are not a usable pair ({reason}); "
            "mount the TLS Secret's files, or empty the folder to have a development pair minted"
        ) from None


def _ensure_dev_certs(cert_dir: Path) -> bool:
    """Mint development certificates when absent; a folder it cannot write is a setting error.

    With a read-only root filesystem and no tls.crt/tls.key mounted, the default certs/ folder
    cannot be written: say which folder and what fixes it, in one line, not with a traceback.
    """
    try:
        return ensure_dev_certs(cert_dir)
    except OSError as exc:
        raise ConfigError(
            f"no tls.crt and tls.key in {cert_dir.absolute()}, and development certificates "
            f"cannot be written there: {exc.strerror}; point --cert-dir (DRA_WEBHOOK_CERT_DIR) "
            "at the mounted TLS Secret, or at a writable folder"
        ) from None
