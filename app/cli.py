"""The `dra-webhook` command: serve | certs | check | report | migrate."""

from __future__ import annotations

import argparse
import errno
import socket
import ssl
import sys
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import orjson
from pydantic import ValidationError

from app import __version__, offline
from app.certs import TLS_CERT, TLS_KEY, ensure_dev_certs, mint
from app.cluster.static import StaticSource
from app.cluster.view import ClusterView
from app.config import Settings, load_policy
from app.config.settings import ClusterSource
from app.errors import ConfigError
from app.pipeline import Pipeline

if TYPE_CHECKING:
    from app.migrate.served import Target


class _Parser(argparse.ArgumentParser):
    """argparse, with a mistake said in one line naming the command's own help, exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see `{self.prog} --help`)\n")


def _examples(*lines: str) -> str:
    return "examples:\n" + "\n".join(f"  {line}" for line in lines)


def _parser() -> argparse.ArgumentParser:
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
            "dra-webhook serve --kubeconfig ~/.kube/config --config policy-configmap.yaml",
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
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
            "dra-webhook check apps/ml/                           # exit 1 when anything is denied",
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
            "kubectl get pods,deployments,jobs,cronjobs -A -o json > dump.json",
            "dra-webhook report dump.json --cluster-file cluster.yaml",
            "dra-webhook report --kubeconfig ~/.kube/config --fail-on legacy    # for CI",
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    report.add_argument(
        "dump",
        nargs="*",
        type=Path,
        help="output of kubectl get pods,deployments,statefulsets,daemonsets,"
        "replicasets,jobs,cronjobs -A -o json (or yaml); or --kubeconfig / --in-cluster",
    )
    _offline_args(report)
    report.add_argument(
        "--fail-on",
        choices=("legacy", "excepted"),
        default=None,
        help="exit 1 when a namespace still has device-plugin requests (legacy: those no active "
        "policy exception allows, and any that cannot be rewritten; excepted: also the allowed "
        "ones) or DRA objects of an API version the target does not serve, for CI",
    )
    report.add_argument("--kubernetes-version", **_KUBERNETES_VERSION)

    migrate = sub.add_parser(
        "migrate",
        help="rewrite manifests from device-plugin requests to DRA claims (docs/migrate.md)",
        epilog=_examples(
            "dra-webhook migrate --diff apps/ml/        # exit 1 while anything is left to move",
            "dra-webhook migrate --write --config policy.yaml apps/ml/",
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
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
    migrate.add_argument("--kubectl", default="kubectl", help="renders kustomize overlays")
    migrate.add_argument("--helm", default="helm", help="renders Helm charts")
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


def _offline_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, default=None, help="policy YAML file")
    parser.add_argument(
        "--cluster-file",
        type=Path,
        default=None,
        help="cluster objects (namespaces, DeviceClasses...); default: demo cluster",
    )
    parser.add_argument("--output", choices=("text", "json"), default="text")


_KUBERNETES_VERSION: dict[str, Any] = {
    "default": None,
    "metavar": "1.N",
    "help": "the release the manifests go to: a DRA object of a resource.k8s.io version it "
    "does not serve by default is flagged (default: any release from 1.34, which serves only "
    "v1 by default)",
}


def _target(args: argparse.Namespace) -> Target:
    """What the manifests' cluster serves of resource.k8s.io (app/migrate/served.py)."""
    from app.migrate import served

    kubeconfig = getattr(args, "kubeconfig", None)
    if kubeconfig is not None:
        import asyncio

        return asyncio.run(served.discover(kubeconfig))
    return served.for_release(args.kubernetes_version)


def _offline_pipeline(args: argparse.Namespace) -> Pipeline:
    view = ClusterView()
    StaticSource(view, args.cluster_file).load()
    policy = offline.offline_policy(load_policy(args.config))  # no admission policy offline
    return Pipeline(policy, view, own_namespace=Settings().namespace)


def _run_check(args: argparse.Namespace) -> int:
    results = offline.check(
        _offline_pipeline(args),
        offline.read_objects(args.manifests),
        args.namespace,
        _target(args).verdict,
    )
    if args.output == "json":
        print(orjson.dumps([asdict(r) for r in results], option=orjson.OPT_INDENT_2).decode())
    else:
        for r in results:
            verdict = "allowed" if r.allowed else "DENIED"
            print(f"{r.kind} {r.namespace}/{r.name} ({r.where}): {verdict}")
            if r.note:
                print(f"  note: {r.note}")
            for line in r.message.splitlines():
                print(f"  {line}")
            for warning in r.warnings:
                print(f"  warning: {warning}")
            for op in r.patch:
                print(f"  patch: {orjson.dumps(op).decode()}")
            for template in r.templates:
                print(f"  creates ResourceClaimTemplate {r.namespace}/{template}")
    return 0 if all(r.allowed for r in results) else 1


def _run_report(args: argparse.Namespace) -> int:
    if args.kubeconfig is not None or args.in_cluster:
        return _run_live_report(args)
    if args.policy_reports:
        raise ConfigError("report: --policy-reports needs --kubeconfig or --in-cluster")
    if not args.dump:
        raise ConfigError("report: name cluster dump files, or pass --kubeconfig or --in-cluster")
    pipeline = _offline_pipeline(args)
    reports = offline.report(
        pipeline.policy,
        pipeline.view,
        offline.read_objects(args.dump),
        served=_target(args).verdict,
    )
    return _print_reports(reports, args.output, args.fail_on)


def _run_live_report(args: argparse.Namespace) -> int:
    import asyncio

    from app.report.run import Options, run

    if args.dump or args.cluster_file is not None or args.kubernetes_version is not None:
        raise ConfigError(
            "report: --kubeconfig/--in-cluster read the cluster itself (what it lists, it "
            "serves); drop the dump files, --cluster-file and --kubernetes-version"
        )
    if args.page_size < 1:
        raise ConfigError("report: --page-size must be at least 1")
    options = Options(
        kubeconfig=None if args.in_cluster else args.kubeconfig,
        policy_reports=args.policy_reports,
        page_size=args.page_size,
    )
    outcome = asyncio.run(run(load_policy(args.config), options, sys.stderr))
    code = _print_reports(
        [entry.report for entry in outcome.tally.reports()], args.output, args.fail_on
    )
    for namespace in outcome.skipped:
        print(
            f"dra-webhook: note: namespace {namespace} is being deleted; "
            "its PolicyReport was not written",
            file=sys.stderr,
        )
    listed = ", ".join(f"{count} {kind}" for kind, count in outcome.listed.items())
    print(
        f"listed {listed}; {outcome.tally.owned} counted under their owner"
        + (f"; {outcome.written} PolicyReports written" if args.policy_reports else ""),
        file=sys.stderr,
    )
    return code


def _failing(reports: list[offline.NamespaceReport], fail_on: str | None) -> bool:
    """`report --fail-on`: legacy requests no exception allows (or none at all, `excepted`)."""
    if fail_on is None:
        return False
    if fail_on == "excepted":
        return any(r.legacy_objects or r.invalid or r.unserved for r in reports)
    return any(
        r.invalid
        or r.unrewritable
        or r.unserved
        or any(o not in r.excepted for o in r.legacy_objects)
        for r in reports
    )


def _print_reports(
    reports: list[offline.NamespaceReport], output: str, fail_on: str | None = None
) -> int:
    if output == "json":
        rows = [
            {
                **asdict(r),
                "resources": sorted(r.resources),
                "unmapped": sorted(r.unmapped),
                "notRewritable": r.unrewritable,
                "readyForDraOnly": r.ready_for_dra_only,
            }
            for r in reports
        ]
        print(orjson.dumps(rows, option=orjson.OPT_INDENT_2).decode())
        return 1 if _failing(reports, fail_on) else 0
    print(f"{'NAMESPACE':<24} {'MODE':<10} {'PODSPECS':>8} {'LEGACY':>6}  READY  RESOURCES")
    for r in reports:
        resources = ", ".join(
            f"{name} (unmapped)" if name in r.unmapped else name for name in sorted(r.resources)
        )
        ready = "yes" if r.ready_for_dra_only else "no"
        print(
            f"{r.namespace:<24} {r.mode:<10} {r.objects:>8} {len(r.legacy_objects):>6}  "
            f"{ready:<5}  {resources}"
        )
        for problem in r.invalid:
            print(f"  invalid: {problem}")
        for problem in r.unrewritable:
            print(f"  not rewritable: {problem}")
        for problem in r.unserved:
            print(f"  not served: {problem}")
        for name, exception in r.excepted.items():
            print(f"  excepted: {name} by exception {exception}")
    return 1 if _failing(reports, fail_on) else 0


def _run_migrate(args: argparse.Namespace) -> int:
    from app import migrate

    options = migrate.Options(
        paths=tuple(args.paths),
        write=args.write,
        templates_out=args.templates_out,
        tools={"kubectl": args.kubectl, "helm": args.helm},
    )
    return migrate.main(options, args.config, args.cluster_file, sys.stdout, sys.stderr)


def _serve_settings(args: argparse.Namespace) -> Settings:
    overrides: dict[str, object] = {}
    for flag, key in (
        ("host", "host"),
        ("port", "port"),
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


def _preflight(settings: Settings) -> None:
    """Fail before loading anything, with a plain message: an address that cannot be listened
    on or a port in use (the webhook's and the probes'), then a bad policy or cluster file."""
    _check_listen(settings.host, settings.port, "--port")
    if settings.health_port:
        _check_listen(settings.host, settings.health_port, "DRA_WEBHOOK_HEALTH_PORT")
    load_policy(settings.policy_file)
    if settings.cluster_source is ClusterSource.STATIC:
        StaticSource(ClusterView(), settings.cluster_file).load()
    else:
        from app.cluster.factory import build_source

        build_source(settings, ClusterView())


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
    _check_cert_pair(cert_dir)
    try:
        return ensure_dev_certs(cert_dir)
    except OSError as exc:
        raise ConfigError(
            f"no tls.crt and tls.key in {cert_dir.absolute()}, and development certificates "
            f"cannot be written there: {exc.strerror}; point --cert-dir (DRA_WEBHOOK_CERT_DIR) "
            "at the mounted TLS Secret, or at a writable folder"
        ) from None


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # said by the command's parser, so its help is the one named
        args.command_parser.error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        if args.command == "check":
            return _run_check(args)
        if args.command == "report":
            return _run_report(args)
        if args.command == "migrate":
            return _run_migrate(args)
        if args.command == "certs":
            try:
                minted = mint(args.out, tuple(args.dns), tuple(args.ip), days=args.days)
            except OSError as exc:
                raise ConfigError(
                    f"cannot write certificates to {args.out.absolute()}: {exc.strerror}; "
                    "pass --out a writable folder"
                ) from None
            print(f"wrote {CA_FILES} to {minted.directory}", file=sys.stderr)
            print(minted.ca_bundle)
            return 0
        settings = _serve_settings(args)
        _preflight(settings)
        if _ensure_dev_certs(settings.cert_dir):
            print(f"minted development certificates into {settings.cert_dir}/", file=sys.stderr)
        from app.server.run import serve

        serve(settings)
        return 0
    except ConfigError as exc:
        print(f"dra-webhook: {exc}", file=sys.stderr)
        return 2
    except ValidationError as exc:
        print(f"dra-webhook: invalid setting: {_one_line(exc)}", file=sys.stderr)
        return 2


def _one_line(exc: ValidationError) -> str:
    """pydantic's errors as one line: `--workers 0: must be at least 1`, per setting."""
    parts = []
    for error in exc.errors():
        name = ".".join(str(p) for p in error["loc"])
        flag = f"--{name.replace('_', '-')}" if name in _FLAGS else f"DRA_WEBHOOK_{name.upper()}"
        parts.append(f"{flag} {error.get('input')!r}: {error['msg']}")
    return "; ".join(parts)


_FLAGS = frozenset({"host", "port", "cert_dir", "workers", "metrics_dir"})
"""Settings that `serve` takes as flags (the others only from DRA_WEBHOOK_* variables)."""


CA_FILES = "ca.crt, ca.key, tls.crt, tls.key"

if __name__ == "__main__":
    sys.exit(main())
