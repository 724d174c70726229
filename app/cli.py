"""The `dra-webhook` command: serve | certs."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pydantic import ValidationError

from app import __version__
from app.certs import ensure_dev_certs, mint
from app.cluster.static import StaticSource
from app.cluster.view import ClusterView
from app.config import Settings, load_policy
from app.config.settings import ClusterSource
from app.errors import ConfigError
from app.logs import configure_logging


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dra-webhook",
        description="Admission webhook that moves GPU workloads from device plugins to DRA.",
    )
    parser.add_argument("--version", action="version", version=f"dra-webhook {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="serve the admission webhook over HTTPS")
    serve.add_argument("--host", default=None, help="address to listen on (default 0.0.0.0)")
    serve.add_argument("--port", type=int, default=None, help="port (default 8443)")
    serve.add_argument(
        "--cert-dir",
        type=Path,
        default=None,
        help="folder with tls.crt and tls.key (default certs/; minted if absent)",
    )
    serve.add_argument(
        "--config",
        type=Path,
        default=None,
        help="policy YAML file (default: the embedded default policy)",
    )
    source = serve.add_mutually_exclusive_group()
    source.add_argument(
        "--cluster-file",
        type=Path,
        default=None,
        help="static cluster view from a YAML dump (default: embedded demo cluster)",
    )
    source.add_argument(
        "--kubeconfig", type=Path, default=None, help="watch the cluster of this kubeconfig"
    )
    source.add_argument(
        "--in-cluster", action="store_true", help="watch the cluster this pod runs in"
    )
    serve.add_argument("--workers", type=int, default=None, help="worker processes (default 1)")

    certs = sub.add_parser("certs", help="mint a CA and a serving certificate")
    certs.add_argument("--out", type=Path, default=Path("certs"), help="folder (default certs/)")
    certs.add_argument(
        "--dns",
        action="append",
        default=[],
        metavar="NAME",
        help="DNS name for the certificate (repeatable)",
    )
    certs.add_argument(
        "--ip",
        action="append",
        default=[],
        metavar="ADDR",
        help="IP address for the certificate (repeatable)",
    )
    certs.add_argument("--days", type=int, default=365, help="validity of the serving cert")
    return parser


def _serve_settings(args: argparse.Namespace) -> Settings:
    overrides: dict[str, object] = {}
    for flag, key in (
        ("host", "host"),
        ("port", "port"),
        ("cert_dir", "cert_dir"),
        ("config", "policy_file"),
        ("workers", "workers"),
    ):
        if getattr(args, flag) is not None:
            overrides[key] = getattr(args, flag)
    if args.cluster_file is not None:
        overrides.update(cluster_source=ClusterSource.STATIC, cluster_file=args.cluster_file)
    elif args.kubeconfig is not None:
        overrides.update(cluster_source=ClusterSource.KUBECONFIG, kubeconfig=args.kubeconfig)
    elif args.in_cluster:
        overrides["cluster_source"] = ClusterSource.IN_CLUSTER
    base = Settings()
    return base.model_copy(update=overrides) if overrides else base


def _preflight(settings: Settings) -> None:
    """Fail before binding the port, with a plain message, on bad config or cluster file."""
    load_policy(settings.policy_file)
    if settings.cluster_source is ClusterSource.STATIC:
        StaticSource(ClusterView(), settings.cluster_file).load()
    else:
        from app.cluster.factory import build_source

        build_source(settings, ClusterView())


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "certs":
            minted = mint(args.out, tuple(args.dns), tuple(args.ip), days=args.days)
            print(f"wrote {CA_FILES} to {minted.directory}", file=sys.stderr)
            print(minted.ca_bundle)
            return 0
        settings = _serve_settings(args)
        _preflight(settings)
        if ensure_dev_certs(settings.cert_dir):
            print(f"minted development certificates into {settings.cert_dir}/", file=sys.stderr)
        from app.server import serve

        configure_logging(settings.log_level)
        serve(settings)
        return 0
    except ConfigError as exc:
        print(f"dra-webhook: {exc}", file=sys.stderr)
        return 2
    except ValidationError as exc:
        print(f"dra-webhook: invalid setting: {exc}", file=sys.stderr)
        return 2


CA_FILES = "ca.crt, ca.key, tls.crt, tls.key"

if __name__ == "__main__":
    sys.exit(main())
