"""A namespace's migration progress as a PolicyReport (wgpolicyk8s.io/v1alpha2).

The format Kyverno and Policy Reporter write and read (kubernetes-sigs/wg-policy-prototypes,
`policy-report/crd/v1alpha2`): one report per namespace, named `dra-webhook-migration` so a
second run updates it in place; one result per workload that still asks for a legacy extended
resource (or whose pod spec does not parse), and the workloads that pass counted in the summary
only, as Kyverno does for its background scans.

What a result says depends on the namespace's mode, since that decides what happens to the
workload's next pod:

| mode | result | severity | why |
| --- | --- | --- | --- |
| dra-only | fail | high | its next pod is denied |
| audit | warn | medium | admitted with a warning; denied once the namespace moves on |
| translate | warn | low | translated at admission; the stored spec still has to move |
| none | warn | info | the namespace has not opted in yet |

A DeviceTaintRule in force that evicts pods of the namespace (NoExecute: `warn`, severity high)
or keeps their devices off new claims (NoSchedule: medium) is a result of rule
`device-taint-rules` naming the rule and the pods, whatever the mode.

A GPU workload whose pods may preempt today gets a second result, rule `relies-on-preemption`,
`warn` in every mode (app.offline.preempting): nothing refuses it, but on DRA claims its pods
no longer evict lower-priority ones. The annotation PREEMPTING_ANNOTATION counts them.

The labels carry the mode, so the webhook's gauge of legacy workloads per namespace and mode
(`app.cluster.progress`) reads the reports without classifying anything itself.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

from app.config.policy import NamespaceModes
from app.k8s.policyreports import (
    GPU_PODS_ANNOTATION,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    MODE_LABEL,
    NO_MODE_VALUE,
    PREEMPTING_ANNOTATION,
    REPORT_NAME,
)
from app.report.tally import NO_MODE, Finding, Namespace

Obj = dict[str, Any]

MAX_RESULTS = 1000
"""Results written per report at most (the failing ones first): an object in etcd is limited to
~1.5 MB and a result is ~0.5 KB. The summary still counts every workload; the annotation
TRUNCATED_ANNOTATION says how many results were left out."""
TRUNCATED_ANNOTATION = "dra-webhook/results-omitted"
POLICY = "dra-webhook"
LEGACY_RULE = "no-legacy-extended-resources"
INVALID_RULE = "pod-spec-parses"
TENANCY_RULE = "tenancy-guards"
TAINT_RULE = "device-taint-rules"
PREEMPTION_RULE = "relies-on-preemption"
CATEGORY = "DRA migration"
Fix = Callable[[str], str]
"""How to move one legacy resource name to DRA (one sentence)."""


def verdict(mode: str, modes: NamespaceModes) -> tuple[str, str]:
    """(result, severity) of a legacy request in a namespace of `mode`."""
    if mode == modes.dra_only:
        return "fail", "high"
    if mode == modes.audit:
        return "warn", "medium"
    if mode == modes.translate:
        return "warn", "low"
    return "warn", "info"


def policy_report(entry: Namespace, modes: NamespaceModes, fix: Fix, now: dt.datetime) -> Obj:
    """The PolicyReport of one namespace."""
    mode = entry.report.mode
    result, severity = verdict(mode, modes)
    stamp = {"seconds": int(now.timestamp()), "nanos": 0}
    results = [
        _result(
            f,
            namespace=entry.report.namespace,
            mode=mode,
            result=result,
            severity=severity,
            fix=fix,
            stamp=stamp,
        )
        for f in entry.findings
    ]
    summary = {"pass": entry.passed, "fail": 0, "warn": 0, "error": 0, "skip": 0}
    for item in results:
        summary[item["result"]] += 1
    metadata: Obj = {
        "name": REPORT_NAME,
        "namespace": entry.report.namespace,
        "labels": {
            MANAGED_BY_LABEL: MANAGED_BY,
            MODE_LABEL: NO_MODE_VALUE if mode == NO_MODE else mode,
        },
        # always present, so an apply after a truncated run clears the count
        "annotations": {
            TRUNCATED_ANNOTATION: str(max(0, len(results) - MAX_RESULTS)),
            GPU_PODS_ANNOTATION: ",".join(
                f"{source}={count}" for source, count in sorted(entry.report.gpu_pods.items())
            ),
            PREEMPTING_ANNOTATION: str(sum(r["rule"] == PREEMPTION_RULE for r in results)),
        },
    }
    if len(results) > MAX_RESULTS:
        order = {"fail": 0, "error": 1, "warn": 2, "skip": 3}
        results = sorted(results, key=lambda r: order[r["result"]])[:MAX_RESULTS]
    return {
        "apiVersion": "wgpolicyk8s.io/v1alpha2",
        "kind": "PolicyReport",
        "metadata": metadata,
        "summary": summary,
        "results": results,
    }


def _result(
    finding: Finding,
    *,
    namespace: str,
    mode: str,
    result: str,
    severity: str,
    fix: Fix,
    stamp: dict[str, int],
) -> Obj:
    ref = {
        "apiVersion": finding.api_version,
        "kind": finding.kind,
        "name": finding.name,
        "namespace": namespace,
    }
    if finding.device_taint:
        del ref["namespace"]  # a DeviceTaintRule is cluster-scoped
    if finding.uid:
        ref["uid"] = finding.uid
    item: Obj = {
        "source": POLICY,
        "policy": POLICY,
        "category": CATEGORY,
        "scored": True,
        "timestamp": stamp,
        "resources": [ref],
        "properties": {"mode": NO_MODE_VALUE if mode == NO_MODE else mode},
    }
    if finding.device_taint:
        return {
            **item,
            "rule": TAINT_RULE,
            "result": "warn",
            "severity": "high" if finding.taint_evicts else "medium",
            "message": finding.device_taint,
        }
    if finding.preemption:
        item["properties"]["resources"] = ",".join(finding.resources)
        if finding.priority_class:
            item["properties"]["priorityClass"] = finding.priority_class
        return {
            **item,
            "rule": PREEMPTION_RULE,
            "result": "warn",
            "severity": "medium",
            "message": (
                f"{finding.preemption}: on DRA claims its pods wait until a device frees up "
                "(keep it on the device plugin, give it devices of its own, or lower its "
                'priority need: docs/operations.md, "Preemption")'
            ),
        }
    if finding.tenancy:
        return {
            **item,
            "rule": TENANCY_RULE,
            "result": "warn" if finding.tenancy_warns else "fail",
            "severity": "medium",
            "message": f"{finding.kind}/{finding.name}: {finding.tenancy}",
        }
    if finding.invalid:
        return {
            **item,
            "rule": INVALID_RULE,
            "result": "error",
            "severity": "medium",
            "message": f"{finding.kind}/{finding.name}: {finding.invalid}",
        }
    item["properties"]["resources"] = ",".join(finding.resources)
    if finding.excepted:
        return {
            **item,
            "rule": LEGACY_RULE,
            "result": "skip",
            "severity": "info",
            "message": (
                f"{finding.kind}/{finding.name} requests {', '.join(finding.resources)} through a "
                f"device plugin, allowed by policy exception {finding.excepted}"
            ),
        }
    if finding.unrewritable:
        return {
            **item,
            "rule": LEGACY_RULE,
            "result": result,
            "severity": severity,
            "message": (
                f"{finding.kind}/{finding.name} asks for GPUs where dra-webhook cannot rewrite "
                f"them: {finding.unrewritable}"
            ),
        }
    fixes = " ".join(f"{resource}: {fix(resource)}." for resource in finding.resources)
    return {
        **item,
        "rule": LEGACY_RULE,
        "result": result,
        "severity": severity,
        "message": (
            f"{finding.kind}/{finding.name} requests {', '.join(finding.resources)} through a "
            f"device plugin (extended resource) instead of a DRA claim. {fixes}"
        ),
    }
