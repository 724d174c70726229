"""A namespace's totals as a PolicyReport: verdict per mode, summary, the etcd size bound."""

from __future__ import annotations

import datetime as dt

import pytest

from app.config.policy import NamespaceModes
from app.k8s.policyreports import GPU_PODS_ANNOTATION, PREEMPTING_ANNOTATION
from app.offline import NamespaceReport
from app.report.policyreport import MAX_RESULTS, TRUNCATED_ANNOTATION, policy_report, verdict
from app.report.tally import Finding, Namespace

MODES = NamespaceModes()
NOW = dt.datetime(2026, 11, 24, tzinfo=dt.UTC)


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("dra-only", ("fail", "high")),
        ("audit", ("warn", "medium")),
        ("translate", ("warn", "low")),
        ("-", ("warn", "info")),
    ],
)
def test_the_verdict_follows_what_the_namespaces_mode_does_to_the_next_pod(
    mode: str, expected: tuple[str, str]
) -> None:
    assert verdict(mode, MODES) == expected


def _namespace(legacy: int, invalid: int = 0, passed: int = 0) -> Namespace:
    findings = [Finding("Pod", "v1", f"p{i}", f"u{i}", ("nvidia.com/gpu",)) for i in range(legacy)]
    findings += [
        Finding("Pod", "v1", f"bad{i}", "", invalid="spec.containers: must be a list")
        for i in range(invalid)
    ]
    return Namespace(NamespaceReport("train", "dra-only"), passed=passed, findings=findings)


def test_results_count_in_the_summary_with_the_passing_workloads() -> None:
    report = policy_report(_namespace(2, invalid=1, passed=7), MODES, lambda r: "fix it", NOW)
    assert report["summary"] == {"pass": 7, "fail": 2, "warn": 0, "error": 1, "skip": 0}
    assert [r["rule"] for r in report["results"]] == [
        "no-legacy-extended-resources",
        "no-legacy-extended-resources",
        "pod-spec-parses",
    ]
    assert report["results"][0]["message"].endswith("nvidia.com/gpu: fix it.")
    assert report["results"][0]["timestamp"] == {"seconds": int(NOW.timestamp()), "nanos": 0}
    assert "uid" not in report["results"][2]["resources"][0]
    assert report["metadata"]["annotations"] == {
        TRUNCATED_ANNOTATION: "0",
        GPU_PODS_ANNOTATION: "",
        PREEMPTING_ANNOTATION: "0",
    }


def test_a_namespace_with_more_results_than_etcd_holds_keeps_the_failures_and_counts_all() -> None:
    report = policy_report(_namespace(MAX_RESULTS + 5, invalid=3), MODES, lambda r: "fix", NOW)
    assert len(report["results"]) == MAX_RESULTS
    assert report["summary"]["fail"] == MAX_RESULTS + 5
    assert report["summary"]["error"] == 3
    assert {r["result"] for r in report["results"]} == {"fail"}
    assert report["metadata"]["annotations"] == {
        TRUNCATED_ANNOTATION: "8",
        GPU_PODS_ANNOTATION: "",
        PREEMPTING_ANNOTATION: "0",
    }


def test_a_workload_a_policy_exception_allows_is_a_skip_naming_the_exception() -> None:
    entry = _namespace(1)
    entry.findings.append(
        Finding(
            "Deployment",
            "apps/v1",
            "vendor",
            "u",
            ("nvidia.com/gpu",),
            excepted="vendor-x until 2027-01-31",
        )
    )
    report = policy_report(entry, MODES, lambda r: "fix", NOW)
    assert report["summary"] == {"pass": 0, "fail": 1, "warn": 0, "error": 0, "skip": 1}
    skipped = report["results"][1]
    assert (skipped["result"], skipped["severity"]) == ("skip", "info")
    assert "policy exception vendor-x until 2027-01-31" in skipped["message"]
