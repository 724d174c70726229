"""check | report | migrate: the commands that judge manifests or a cluster without serving."""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict
from typing import TYPE_CHECKING

import orjson

from app import offline
from app.cli.parser import DUMP_COMMAND
from app.cluster.release import Feature, ServedRelease
from app.cluster.static import StaticSource, load_dump, named_release
from app.cluster.view import ClusterView, Kind
from app.config import Settings, load_policy
from app.errors import ConfigError
from app.offline import taints
from app.pipeline import Pipeline
from app.policies.builders import legacy_matcher

if TYPE_CHECKING:
    from app.migrate.served import Target

__all__ = ["failing", "run_check", "run_migrate", "run_report"]


def _target(args: argparse.Namespace) -> Target:
    """What the manifests' cluster serves of resource.k8s.io (app/migrate/served.py)."""
    from app.migrate import served

    kubeconfig = getattr(args, "kubeconfig", None)
    if kubeconfig is not None:
        import asyncio

        return asyncio.run(served.discover(kubeconfig))
    return served.for_release(args.kubernetes_version)


def _offline_pipeline(args: argparse.Namespace, view: ClusterView | None = None) -> Pipeline:
    """The pipeline over `view`, or over the cluster file (the demo cluster without one)."""
    if view is None:
        view = ClusterView()
        StaticSource(view, args.cluster_file).load()
    named_release(view, getattr(args, "kubernetes_version", None))
    policy = offline.offline_policy(load_policy(args.config))  # no admission policy offline
    return Pipeline(policy, view, own_namespace=Settings().namespace)


def run_check(args: argparse.Namespace) -> int:
    """Exit 1 when anything would be denied; 2 when a file could not be judged (each is listed
    on stderr, and every other file judged all the same)."""
    pipeline = _offline_pipeline(args)
    target = _target(args)
    legacy = pipeline.parts.build(legacy_matcher)
    objects, problems = offline.read_manifests(args.manifests, legacy)
    results = offline.check(pipeline, objects, args.namespace, target.verdict)
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
    for problem in problems:
        print(f"check: not judged: {problem}", file=sys.stderr)
    if problems:
        return 2
    return 0 if all(r.allowed for r in results) else 1


def run_report(args: argparse.Namespace) -> int:
    if args.kubeconfig is not None or args.in_cluster:
        return _run_live_report(args)
    if args.policy_reports:
        raise ConfigError("report: --policy-reports needs --kubeconfig or --in-cluster")
    if not args.dump:
        raise ConfigError("report: name cluster dump files, or pass --kubeconfig or --in-cluster")
    dump = list(offline.read_objects(args.dump))
    view = ClusterView()
    load_dump(view, args.cluster_file, dump)
    pipeline = _offline_pipeline(args, view)
    sources = offline.sources_for(pipeline.policy, pipeline.view)
    reports = offline.report(
        pipeline.policy, pipeline.view, dump, served=_target(args).verdict, sources=sources
    )
    found = offline.conflicts(offline.ReportRules.build(pipeline.policy), pipeline.view)
    stored = [o for _, o in dump]
    if args.cluster_file is not None:
        stored += [o for _, o in offline.read_objects([args.cluster_file])]
    rules = taints.rules_in_force(taints.taint_rules(stored), pipeline.view, pipeline.policy)
    label = pipeline.policy.namespace_modes.label
    taints.add_to_reports(
        rules, reports, lambda ns: (pipeline.view.namespace_labels(ns) or {}).get(label, "-")
    )
    if args.nodes:
        code = _print_nodes(sources, args.output, found)
    else:
        code = _print_reports(reports, args.output, args.fail_on)
        _note_unknown_modes(reports, pipeline.view)
        _print_rules(rules, args.output)
        if args.output == "text":
            _print_sources(sources, found)
    if pipeline.view.release.version:
        _print_release(pipeline.view.release, args.output)
    return code


def _note_unknown_modes(reports: list[offline.NamespaceReport], view: ClusterView) -> None:
    """One line on stderr when namespaces were judged without their labels (MODE `-`)."""
    unknown = [r.namespace for r in reports if view.namespace_labels(r.namespace) is None]
    if not unknown:
        return
    if not view.objects(Kind.NAMESPACE):
        print(
            "dra-webhook: note: the dump holds no Namespaces, so no namespace's mode is known "
            f"(MODE -): include namespaces in the dump ({DUMP_COMMAND})",
            file=sys.stderr,
        )
        return
    print(
        f"dra-webhook: note: mode unknown (MODE -) for {len(unknown)} namespace"
        f"{'s' if len(unknown) != 1 else ''} not in the dump or the cluster file: "
        + ", ".join(unknown),
        file=sys.stderr,
    )


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
    found = outcome.tally.conflicts()
    if args.nodes:
        code = _print_nodes(outcome.tally.sources, args.output, found)
    else:
        code = _print_reports(
            [entry.report for entry in outcome.tally.reports()], args.output, args.fail_on
        )
        _print_rules(list(outcome.rules), args.output)
        if args.output == "text":
            _print_sources(outcome.tally.sources, found)
    _print_release(outcome.release, args.output)
    if outcome.nodes_unread:
        print(
            f"dra-webhook: note: Nodes not read, so no per-node view: {outcome.nodes_unread}",
            file=sys.stderr,
        )
    if outcome.classes_unread:
        print(
            "dra-webhook: note: PriorityClasses not read, so only the policy's "
            f"preemption.priorityClasses are known: {outcome.classes_unread}",
            file=sys.stderr,
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


def _print_rules(rules: list[taints.RuleInForce], output: str) -> None:
    """The DeviceTaintRules in force, what each evicts or keeps off: after the namespaces in
    text, on stderr beside JSON (whose rows carry each namespace's part, `device_taints`)."""
    if not rules:
        return
    if output == "text":
        print()
        for rule in rules:
            print(rule.line())
        return
    for rule in rules:
        print(f"dra-webhook: note: {rule.line()}", file=sys.stderr)


def _print_release(release: ServedRelease, output: str) -> None:
    """The release and the DRA features it serves: last on stdout in text, on stderr beside
    JSON (which stays the reports alone)."""
    features = ", ".join(f"{f.value} {'on' if release.keeps(f) else 'off'}" for f in Feature)
    versions = ", ".join(release.resource_versions) or "unknown"
    rules = ", ".join(release.taint_rules) or "not served"
    line = (
        f"Kubernetes {release.version or 'release unknown'} ({release.source}): "
        f"resource.k8s.io {versions}; DRA features: {features}; DeviceTaintRule: {rules}"
    )
    print(
        line if output == "text" else f"dra-webhook: note: {line}",
        file=sys.stdout if output == "text" else sys.stderr,
    )


def _print_sources(sources: offline.Sources, conflicts: list[str]) -> None:
    """After the namespaces: which nodes' device plugins still serve pods, whether any node
    needs one for a name the scheduler serves from DRA (app.offline.sources), and the
    DeviceClass extendedResourceName collisions."""
    lines = [*sources.node_lines(), *sources.name_lines(), *(f"conflict: {c}" for c in conflicts)]
    if lines:
        print()
        for line in lines:
            print(line)


def _print_nodes(sources: offline.Sources, output: str, conflicts: list[str]) -> int:
    if output == "json":
        print(orjson.dumps(sources.rows(), option=orjson.OPT_INDENT_2).decode())
        return 0
    nodes = list(sources.node_lines())
    for line in [*nodes, *sources.name_lines(), *(f"conflict: {c}" for c in conflicts)]:
        print(line)
    if not nodes:
        print(
            "no node's device plugin advertises a legacy name (a dump needs the Nodes too: "
            "kubectl get nodes -o json)"
        )
    return 0


def failing(reports: list[offline.NamespaceReport], fail_on: str | None) -> bool:
    """`report --fail-on`: legacy requests no exception allows and dra-only would not let through
    to the scheduler (`draOnly.mappedNames: allow`), or none at all (`excepted`)."""
    if fail_on is None:
        return False
    if fail_on == "excepted":
        return any(r.legacy_objects or r.invalid or r.unserved for r in reports)
    return any(
        r.invalid
        or r.unrewritable
        or r.unserved
        or any(o not in r.excepted and o not in r.mapped for o in r.legacy_objects)
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
        return 1 if failing(reports, fail_on) else 0
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
        for problem in r.near_misses:
            print(f"  near miss: {problem}")
        for line in r.counted:
            print(f"  not a request: {line}")
        for name, exception in r.excepted.items():
            print(f"  excepted: {name} by exception {exception}")
        for name, classes in r.mapped.items():
            print(f"  left to the scheduler: {name}: {classes} (draOnly.mappedNames: allow)")
        for problem in r.tenancy:
            print(f"  tenancy: {problem}")
        for line in r.group_claims:
            print(f"  group claim: {line}")
        for line in r.device_taints:
            print(f"  device taint: {line}")
        for workload in r.preempting:
            print(f"  preemption: {workload.describe()}")
        if r.gpu_pods:
            served = ", ".join(f"{n} {source}" for source, n in sorted(r.gpu_pods.items()))
            print(f"  gpu pods: {served}")
    return 1 if failing(reports, fail_on) else 0


def run_migrate(args: argparse.Namespace) -> int:
    from app import migrate

    options = migrate.Options(
        paths=tuple(args.paths),
        write=args.write,
        templates_out=args.templates_out,
        tools={"kubectl": args.kubectl, "helm": args.helm},
        leave_mapped=args.leave_mapped,
    )
    return migrate.main(
        options,
        args.config,
        args.cluster_file,
        sys.stdout,
        sys.stderr,
        kubernetes_version=args.kubernetes_version,
    )
