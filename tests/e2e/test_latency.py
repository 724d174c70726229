"""Benchmark latency: `create pod` through the real API server, p50/p99, with (a) no admission
webhook, (b) an in-tree ValidatingAdmissionPolicy expressing the dra-only rule, written here by
hand, (c) dra-webhook as the chart installs it (its ValidatingAdmissionPolicy and its webhook
configurations), in a dra-only namespace. The pods pass in all three (they use a DRA claim
template: before the chart's admission policy, (c)'s matchConditions sent them to the webhook
twice, /mutate then /validate; now no entry needs them there); requests go to the three
namespaces in turn, one by one, so the three share whatever else the machine is doing.

A benchmark, not a timed test: it asserts nothing about the figures and runs only when asked
(`make e2e-bench`, which sets DRA_E2E_BENCH=1); results go to docs/benchmarks.md by hand.
"""

from __future__ import annotations

import json
import os
import statistics
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.e2e import objects as o
from tests.e2e.controlplane import ControlPlane
from tests.e2e.kube import Kube

pytestmark = [
    pytest.mark.journey("latency"),
    pytest.mark.usefixtures("webhook"),
    pytest.mark.skipif(
        os.environ.get("DRA_E2E_BENCH") != "1", reason="a benchmark: run it with make e2e-bench"
    ),
]

CREATES = int(os.environ.get("DRA_E2E_BENCH_CREATES", "2000"))
"""Creates per namespace and concurrency level."""
CONCURRENCY = (32, 4)
LEGACY = "['nvidia.com/gpu', 'amd.com/gpu', 'habana.ai/gaudi']"
DRA_ONLY_RULE = (
    "(has(object.spec.initContainers) ? object.spec.initContainers : [])"
    " + object.spec.containers).all(c, !has(c.resources) || ("
    f"(!has(c.resources.limits) || !c.resources.limits.exists(r, r in {LEGACY}"
    " || r.startsWith('nvidia.com/mig-') || r.startsWith('gpu.intel.com/'))) && "
    f"(!has(c.resources.requests) || !c.resources.requests.exists(r, r in {LEGACY}"
    " || r.startsWith('nvidia.com/mig-') || r.startsWith('gpu.intel.com/')))))"
)


def _policy(kube: Kube) -> None:
    kube.apply(
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": "dra-only"},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "resourceRules": [
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE"],
                            "resources": ["pods"],
                        }
                    ]
                },
                "validations": [
                    {
                        "expression": "(" + DRA_ONLY_RULE,
                        "message": "request GPUs through DRA resourceClaims, not extended resources",
                    }
                ],
            },
        }
    )
    kube.apply(
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": "dra-only"},
            "spec": {
                "policyName": "dra-only",
                "validationActions": ["Deny"],
                "matchResources": {
                    "namespaceSelector": {"matchLabels": {"bench-policy": "dra-only"}}
                },
            },
        }
    )


def _percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def test_create_pod_latency_without_admission_with_a_policy_and_with_the_webhook(
    control_plane: ControlPlane, kube: Kube, tmp_path: Path
) -> None:
    _policy(kube)
    namespaces = {
        "none": kube.namespace("bench-none"),
        "policy": kube.namespace("bench-policy", **{"bench-policy": "dra-only"}),
        "webhook": kube.namespace("bench-webhook", **{"gpu-mode": "dra-only"}),
    }
    for ns in namespaces.values():
        kube.create(o.claim_template("one", ns, o.claim_spec(o.exactly("gpu.nvidia.com", 1))))
    # the policy must deny a legacy pod before it is measured
    legacy = o.pod(
        "legacy", namespaces["policy"], o.pod_spec(o.container(limits={"nvidia.com/gpu": "1"}))
    )
    kube.wait(lambda: _denied(kube, legacy), "the ValidatingAdmissionPolicy to deny")

    spec = o.pod_spec(
        o.container("cuda", claims=("gpu",)),
        claims=[{"name": "gpu", "resourceClaimTemplateName": "one"}],
    )
    # gated: the scheduler leaves them alone
    spec["schedulingGates"] = [{"name": "bench"}]
    results: dict[str, dict[str, float]] = {}
    for concurrency in CONCURRENCY:
        samples = _run(control_plane, namespaces, spec, concurrency)
        for case, values in samples.items():
            results[f"{case}@{concurrency}"] = {
                "n": len(values),
                "p50_ms": _percentile(values, 50) * 1000,
                "p99_ms": _percentile(values, 99) * 1000,
            }
    out = Path(os.environ.get("DRA_E2E_BENCH_OUT", tmp_path / "latency.json"))
    out.write_text(json.dumps(results, indent=2))
    lines = [f"{'case':<16} {'n':>6} {'p50 ms':>8} {'p99 ms':>8}"]
    lines += [
        f"{k:<16} {v['n']:>6.0f} {v['p50_ms']:>8.2f} {v['p99_ms']:>8.2f}"
        for k, v in results.items()
    ]
    print("\n" + "\n".join(lines) + f"\n(written to {out})")


def _denied(kube: Kube, pod: dict[str, object]) -> bool:
    try:
        kube.create(pod, dry_run=True)
    except Exception as error:
        return "ValidatingAdmissionPolicy" in str(error)
    return False


def _run(
    plane: ControlPlane, namespaces: dict[str, str], spec: dict[str, object], concurrency: int
) -> dict[str, list[float]]:
    cases = list(namespaces)
    total = CREATES * len(cases)
    counter = iter(range(total))
    lock = threading.Lock()
    samples: dict[str, list[float]] = {case: [] for case in cases}

    def worker(_: int) -> None:
        kube = Kube(plane)  # one connection per worker, as separate clients would have
        try:
            while True:
                with lock:
                    i = next(counter, None)
                if i is None:
                    return
                case = cases[i % len(cases)]  # interleaved, request by request
                pod = o.pod(f"p{concurrency}-{i}", namespaces[case], spec)
                began = time.perf_counter()
                kube.create(pod)
                elapsed = time.perf_counter() - began
                with lock:
                    samples[case].append(elapsed)
        finally:
            kube.close()

    run: Callable[[int], None] = worker
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(run, range(concurrency)))
    return samples
