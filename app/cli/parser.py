"""The command line's grammar: every command, flag and example of `dra-webhook --help`."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, NoReturn

from app import __version__

__all__ = ["DUMP_COMMAND", "build"]

DUMP_COMMAND = (
    "kubectl get namespaces,nodes,deviceclasses,priorityclasses,pods,deployments,statefulsets,"
    "daemonsets,replicasets,jobs,cronjobs -A -o json > dump.json"
)
"""The dump `report` reads offline, as README and docs/runbook.md give it: the Namespaces'
labels give the modes, the Nodes what their device plugins advertise, the DeviceClasses the
names they map."""


class _Parser(argparse.ArgumentParser):
    """argparse, with a mistake said in one line naming the command's own help, exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see `{self.prog} --help`)\n")


def _examples(*lines: str) -> str:
    return "examples:\n" + "\n".join(f"  {line}" for line in lines)


def build() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="dra-webhook",
        description="Admission webhook that moves GPU workloads from device plugins to DRA.",
    )
    parser.add_argument("--version", action="version", version=f"dra-webhook {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser(
        "serve",
        help="serve the admission webhook over HTTPS",
        epilog=_examples(
            "dra-webhook serve --host 127.0.0.1      # the embedded demo cluster and policy",
            "dra-webhook serve --host 127.0.0.1 --port 9443 --health-port 9081   # beside another",
            "dra-webhook serve --kubeconfig ~/.kube/config --config policy-configmap.yaml",
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    serve.add_argument("--host", default=None, help="address to listen on (default 0.0.0.0)")
    serve.add_argument("--port", type=int, default=None, help="HTTPS port (default 8443)")
    serve.add_argument(
        "--health-port",
        type=int,
        default=None,
        help="plain-HTTP port of the probes, /healthz and /readyz (default 8081; 0: none; "
        "also DRA_WEBHOOK_HEALTH_PORT)",
    )
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
    serve.add_argument(
        "--metrics-dir",
        type=Path,
        default=None,
        help="with --workers > 1: folder for the workers' metric files, emptied at start "
        "(default: a fresh temporary folder)",
    )

    certs = sub.add_parser(
        "certs",
        help="mint a CA and a serving certificate",
        epilog=_examples(
            "dra-webhook certs --out /tmp/dev-certs --dns webhook.example.internal --ip 10.0.0.5"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
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

    check = sub.add_parser(
        "check",
        help="run manifests through the webhook offline and print what it decides",
        epilog=_examples(
            "dra-webhook check apps/ml/        # exit 1: something denied; 2: a file not judged",
            "dra-webhook check --config policy.yaml --cluster-file cluster.yaml deploy.yaml",
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    check.add_argument(
        "manifests", nargs="+", type=Path, help="YAML or JSON files, or folders of them"
    )
    _offline_args(check)
    check.add_argument(
        "--namespace",
        default="default",
        help="namespace for objects that name none (default: default)",
    )
    target = check.add_mutually_exclusive_group()
    target.add_argument("--kubernetes-version", **_KUBERNETES_VERSION)
    target.add_argument(
        "--kubeconfig",
        type=Path,
        default=None,
        help="ask this cluster which resource.k8s.io versions it serves (discovery only; the "
        "cluster view still comes from --cluster-file)",
    )

    report = sub.add_parser(
        "report",
        help="say which namespaces are ready for dra-only, from a cluster dump or the live cluster",
        epilog=_examples(
            DUMP_COMMAND,
            "dra-webhook report dump.json",
            "dra-webhook report dump.json --cluster-file cluster.yaml  # + its ResourceSlices",
            "dra-webhook report --kubeconfig ~/.kube/config --fail-on legacy    # for CI",
            "dra-webhook report --kubeconfig ~/.kube/config --nodes  # device plugins left",
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    report.add_argument(
        "dump",
        nargs="*",
        type=Path,
        help="output of kubectl get namespaces,nodes,deviceclasses,priorityclasses,pods,"
        "deployments,statefulsets,daemonsets,replicasets,jobs,cronjobs -A -o json (or yaml): its "
        "Namespaces, Nodes, DeviceClasses and PriorityClasses are the cluster view, over "
        "--cluster-file's (never the demo cluster); or --kubeconfig / --in-cluster",
    )
    _offline_args(report, "none, only the dump's own")
    report.add_argument(
        "--fail-on",
        choices=("legacy", "excepted"),
        default=None,
        help="exit 1 when a namespace still has device-plugin requests (legacy: those no active "
        "policy exception allows, and any that cannot be rewritten; excepted: also the allowed "
        "ones) or DRA objects of an API version the target does not serve, for CI",
    )
    report.add_argument("--kubernetes-version", **_KUBERNETES_VERSION)
    report.add_argument(
        "--nodes",
        action="store_true",
        help="per node instead of per namespace: the legacy names its device plugin advertises "
        "and the running pods it serves them to (a dump needs `kubectl get nodes -o json` too)",
    )

    migrate = sub.add_parser(
        "migrate",
        help="rewrite manifests from device-plugin requests to DRA claims (docs/migrate.md)",
        epilog=_examples(
            "dra-webhook migrate --diff apps/ml/        # exit 1 while anything is left to move",
            "dra-webhook migrate --write --config policy.yaml apps/ml/",
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _migrate_args(migrate)
    live = report.add_mutually_exclusive_group()
    live.add_argument(
        "--kubeconfig", type=Path, default=None, help="list the cluster of this kubeconfig"
    )
    live.add_argument("--in-cluster", action="store_true", help="list the cluster this pod runs in")
    report.add_argument(
        "--policy-reports",
        action="store_true",
        help="with --kubeconfig/--in-cluster: create or update one PolicyReport "
        "(wgpolicyk8s.io/v1alpha2) per namespace",
    )
    report.add_argument(
        "--page-size",
        type=int,
        default=500,
        help="objects per list request (default 500): the most the report holds at once",
    )
    for command in (serve, certs, check, report, migrate):
        command.set_defaults(command_parser=command)
    return parser


def _migrate_args(migrate: argparse.ArgumentParser) -> None:
    migrate.add_argument("paths", nargs="+", type=Path, help="YAML or JSON files and folders")
    migrate.add_argument("--config", type=Path, default=None, help="policy YAML file")
    migrate.add_argument(
        "--cluster-file",
        type=Path,
        default=None,
        help="cluster objects (DeviceClasses...) as `serve --cluster-file` reads them",
    )
    mode = migrate.add_mutually_exclusive_group()
    mode.add_argument(
        "--diff",
        action="store_true",
        help="print a unified diff; exit 1 when something would change (the default)",
    )
    mode.add_argument("--write", action="store_true", help="edit the files in place")
    migrate.add_argument(
        "--templates-out",
        type=Path,
        default=None,
        help="write the ResourceClaimTemplates here, not next to the objects using them",
    )
    migrate.add_argument(
        "--leave-mapped",
        action="store_true",
        help="leave a legacy name as written where a DeviceClass of --cluster-file maps it and "
        "the scheduler serves it alike (as the policy's translation.leaveMapped: true); says "
        "what it left",
    )
    migrate.add_argument(
        "--kubernetes-version",
        default=None,
        metavar="1.N",
        help="the release the manifests go to: what its API server keeps by default decides "
        "what is written (a GPU share needs 1.36+: docs/control-plane.md); default: the "
        "cluster file's serverVersion, else the newest",
    )
    migrate.add_argument("--kubectl", default="kubectl", help="renders kustomize overlays")
    migrate.add_argument("--helm", default="helm", help="renders Helm charts")


def _offline_args(parser: argparse.ArgumentParser, cluster_default: str = "demo cluster") -> None:
    parser.add_argument("--config", type=Path, default=None, help="policy YAML file")
    parser.add_argument(
        "--cluster-file",
        type=Path,
        default=None,
        help=f"cluster objects (namespaces, DeviceClasses...); default: {cluster_default}",
    )
    parser.add_argument("--output", choices=("text", "json"), default="text")


_KUBERNETES_VERSION: dict[str, Any] = {
    "default": None,
    "metavar": "1.N",
    "help": "the release the manifests go to: a DRA object of a resource.k8s.io version it "
    "does not serve by default is flagged (default: any release from 1.34, which serves only "
    "v1 by default)",
}
