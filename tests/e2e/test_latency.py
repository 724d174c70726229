"""Benchmark latency: `create pod` through the real API server, p50/p99, at 4 and 32 concurrent,
in four namespaces in turn, request by request, so all four share whatever else the machine is
doing:

- none: a DRA pod (a claim template, no extended resource) in an unlabelled namespace: no
  admission webhook or policy applies, the floor;
- policy: the same pod under a ValidatingAdmissionPolicy expressing the dra-only rule, written
  here by hand (the in-tree floor of a policy);
- dra-only: the same pod in a `gpu-mode=dra-only` namespace, dra-webhook as the chart installs
  it (its ValidatingAdmissionPolicy and webhook configurations): no webhook call;
- translate: a legacy pod (`nvidia.com/gpu: 1`) in a `gpu-mode=translate` namespace, with the
  chart: translated into a claim by the mutating call, its only call (the validating entry skips
  what that call judged).

Every pod carries a scheduling gate, so the scheduler leaves them alone. The ratios printed are
dra-only / policy (goal <= 1.05) and translate / none (goal <= 1.3), with the webhook's pod calls
per endpoint while measured (one mutating call per translated pod, no validating one) and the
mean time it spent answering each.

A benchmark, not a timed test: it asserts nothing about the figures and runs only when asked
(`make e2e-bench`, which sets DRA_E2E_BENCH=1). It prints the markdown rows of
docs/benchmarks.md's tables and writes the figures as JSON (DRA_E2E_BENCH_OUT). Knobs:
DRA_E2E_BENCH_CREATES (creates per namespace and concurrency level, 2000),
DRA_E2E_BENCH_SET (chart values to install the webhook configurations with instead, e.g.
`webhook.mutating.reinvocationPolicy=IfNeeded`, comma-separated), DRA_E2E_BENCH_FLOORS=1
(three more namespaces, `FLOORS` below). A create the API server refuses (a webhook call on a
connection the webhook closed as idle at that moment, on a busy machine) is counted and shown,
not timed. Make passes CREATES and BENCH_SET through.

Besides the latencies, the CPU each process used while a concurrency level was measured, from
/proc (user + system): per webhook call for this webhook and the null webhooks (what a call
costs on a machine the control plane shares, which the in-process figures do not show), and in
total for the API server and etcd; and the API server's own admission metrics for each level
(each webhook entry's calls as its client times them, the matchConditions' CEL), which say how
much of a case's latency is inside its webhook call.
"""

from __future__ import annotations

import asyncio
import base64
import json
import multiprocessing
import os
import re
import ssl
import statistics
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tests.e2e import objects as o
from tests.e2e.controlplane import ControlPlane
from tests.e2e.kube import ApiError, Kube
from tests.e2e.webhook import Webhook, render
from tests.helpers import free_port, wrap

pytestmark = [
    pytest.mark.journey("latency"),
    pytest.mark.usefixtures("webhook"),
    pytest.mark.skipif(
        os.environ.get("DRA_E2E_BENCH") != "1", reason="a benchmark: run it with make e2e-bench"
    ),
]

CREATES = int(os.environ.get("DRA_E2E_BENCH_CREATES", "2000"))
"""Creates per namespace and concurrency level."""
CONCURRENCY = (4, 32)
CASES = ("none", "policy", "dra-only", "translate")
FAILED: list[str] = []
"""Creates the API server refused during the run (e.g. a webhook call on a connection closed
under it): reported with the figures."""
FLOORS = os.environ.get("DRA_E2E_BENCH_FLOORS") == "1"
"""Four more namespaces, what a webhook call costs whatever it does: `call-only`, a DRA pod in a
translate namespace (the mutating call with nothing to translate, its patch one annotation);
`null-webhook`, a DRA pod sent to a mutating webhook that answers allowed at once (asyncio over
TLS, in a process of its own): the floor of any webhook call on this machine; `null-patch`, the
same with a patch of one annotation in its answer (what the API server pays to apply a patch,
which call-only's answer carries and null-webhook's does not); `ours-noop`, a DRA pod sent by a
configuration of its own to this webhook's /mutate in a namespace with no mode label: this
server, its transport and its pipeline with nothing to judge (its calls are counted with the
webhook's mutating calls); `ours-replay`, the translate case's legacy pod sent to a null
webhook that answers with the very patch this webhook answers it with (asked of it once before
the runs): the API server's side of a translation (the patch applied, the bigger pod stored)
without this webhook's CPU, so translate / ours-replay is what the webhook's work adds."""
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


def _chart_with(kube: Kube, webhook: Webhook, helm: str, values: str) -> None:
    """Install the webhook configurations rendered with more chart values."""
    ca = base64.b64encode((webhook.server.cert_dir / "ca.crt").read_bytes()).decode()
    sets = [f"--set={v.strip()}" for v in values.split(",") if v.strip()]
    for doc in render(
        helm,
        "--show-only=templates/webhooks.yaml",
        f"--set=webhook.url={webhook.server.base_url}",
        f"--set=webhook.caBundle={ca}",
        *sets,
    ):
        kube.apply(doc)


def _null_webhook(
    kube: Kube, webhook: Webhook, name: str, *, patch: str = "", url: str = ""
) -> int | None:
    """A mutating webhook for the pods of namespaces labelled `name`=yes that answers allowed
    at once (`patch`: with that JSONPatch, base64 as on the wire, e.g. `_ANNOTATION_PATCH`),
    in a process of its own (the webhook's certificates), stopped with the session (a daemon
    child of this process); with `url`, that server is called instead. Returns the id of the
    process started (None with `url`)."""
    pid = None
    if not url:
        port = free_port()
        process = multiprocessing.get_context("fork").Process(
            target=_serve_null, args=(webhook.server.cert_dir, port, patch), daemon=True
        )
        process.start()
        pid = process.pid
        url = f"https://127.0.0.1:{port}/mutate"
    ca = base64.b64encode((webhook.server.cert_dir / "ca.crt").read_bytes()).decode()
    kube.apply(
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": name},
            "webhooks": [
                {
                    "name": f"{name}.bench.example.com",
                    "admissionReviewVersions": ["v1"],
                    "sideEffects": "None",
                    "failurePolicy": "Fail",
                    "clientConfig": {"url": url, "caBundle": ca},
                    "namespaceSelector": {"matchLabels": {name: "yes"}},
                    "rules": [
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE"],
                            "resources": ["pods"],
                        }
                    ],
                }
            ],
        }
    )
    time.sleep(2)  # the API server picks new configurations up from its informers
    return pid


_ANNOTATION_PATCH = base64.b64encode(
    b'[{"op":"add","path":"/metadata/annotations","value":{"bench/patched":"yes"}}]'
).decode()


def _floors(
    kube: Kube, webhook: Webhook, namespaces: dict[str, str], pids: dict[str, int]
) -> list[str]:
    """The namespaces and null webhooks of the DRA pods' floors (`FLOORS`), their servers'
    process ids into `pids`; returns their cases."""
    namespaces["call-only"] = kube.namespace("bench-call", **{"gpu-mode": "translate"})
    namespaces["null-webhook"] = kube.namespace("bench-null", **{"bench-null": "yes"})
    namespaces["null-patch"] = kube.namespace("bench-patch", **{"bench-patch": "yes"})
    namespaces["ours-noop"] = kube.namespace("bench-ours", **{"bench-ours": "yes"})
    pids["null-webhook"] = _null_webhook(kube, webhook, "bench-null") or 0
    pids["null-patch"] = _null_webhook(kube, webhook, "bench-patch", patch=_ANNOTATION_PATCH) or 0
    _null_webhook(kube, webhook, "bench-ours", url=f"{webhook.server.base_url}/mutate")
    return ["call-only", "null-webhook", "null-patch", "ours-noop"]


def _translation_patch(
    kube: Kube, webhook: Webhook, namespaces: dict[str, str], spec: dict[str, object]
) -> str:
    """The JSONPatch (base64) this webhook answers the translate case's pod with: the pod as
    the API server defaults it (a dry run where no admission applies), sent to /mutate as a
    CREATE in the translate namespace."""
    pod = kube.create(o.pod("replay", namespaces["none"], spec), dry_run=True).obj
    pod["metadata"]["namespace"] = namespaces["translate"]
    review = wrap(pod, uid="bench-replay")
    ca = ssl.create_default_context(cafile=str(webhook.server.cert_dir / "ca.crt"))
    with httpx.Client(verify=ca) as client:
        answer = client.post(f"{webhook.server.base_url}/mutate", json=review).json()
    response = answer["response"]
    assert response["allowed"] and response.get("patch"), f"not translated: {response}"
    return str(response["patch"])


def _serve_null(cert_dir: Path, port: int, patch: str) -> None:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert_dir / "tls.crt", cert_dir / "tls.key")

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                size = re.search(rb"(?i)content-length: *(\d+)", head)
                body = await reader.readexactly(int(size.group(1)) if size else 0)
                uid = re.search(rb'"uid":"([^"]+)"', body)
                response: dict[str, object] = {
                    "uid": uid.group(1).decode() if uid else "",
                    "allowed": True,
                }
                if patch:
                    response.update(patchType="JSONPatch", patch=patch)
                review = {
                    "apiVersion": "admission.k8s.io/v1",
                    "kind": "AdmissionReview",
                    "response": response,
                }
                out = json.dumps(review).encode()
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                    b"content-length: %d\r\n\r\n%s" % (len(out), out)
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    async def main() -> None:
        server = await asyncio.start_server(answer, "127.0.0.1", port, ssl=context)
        await server.serve_forever()

    asyncio.run(main())


def _percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def test_create_pod_latency_none_policy_dra_only_and_translate(
    control_plane: ControlPlane, kube: Kube, webhook: Webhook, helm: str, tmp_path: Path
) -> None:
    _policy(kube)
    extra = os.environ.get("DRA_E2E_BENCH_SET", "")
    if extra:
        _chart_with(kube, webhook, helm, extra)
    namespaces = {
        "none": kube.namespace("bench-none"),
        "policy": kube.namespace("bench-policy", **{"bench-policy": "dra-only"}),
        "dra-only": kube.namespace("bench-webhook", **{"gpu-mode": "dra-only"}),
        "translate": kube.namespace("bench-translate", **{"gpu-mode": "translate"}),
    }
    dra_cases = ["none", "policy", "dra-only"]
    pids = {
        "webhook": webhook.server.process.pid,
        "kube-apiserver": control_plane.processes["kube-apiserver"].pid,
        "etcd": control_plane.processes["etcd"].pid,
    }
    if FLOORS:
        dra_cases += _floors(kube, webhook, namespaces, pids)
    for case in dra_cases:
        template = o.claim_template("one", namespaces[case], o.claim_spec(o.exactly()))
        kube.create(template)
    gate = [{"name": "bench"}]  # the scheduler leaves them alone
    dra = o.pod_spec(
        o.container("cuda", claims=("gpu",)),
        claims=[{"name": "gpu", "resourceClaimTemplateName": "one"}],
    )
    legacy = o.pod_spec(o.container("cuda", limits={"nvidia.com/gpu": "1"}))
    specs = {case: {**dra, "schedulingGates": gate} for case in dra_cases}
    specs["translate"] = {**legacy, "schedulingGates": gate}
    if FLOORS:
        specs["ours-replay"] = specs["translate"]
    # before anything is measured: the policy denies a legacy pod, the chart translates one
    # (which also makes the translate namespace's template: every timed pod reuses it)
    kube.wait(lambda: _denied(kube, o.pod("l", namespaces["policy"], legacy)), "the policy")
    kube.wait(
        lambda: kube.create(o.pod("warm", namespaces["translate"], specs["translate"])).obj,
        "a first translated pod",
    )
    if FLOORS:
        namespaces["ours-replay"] = kube.namespace("bench-replay", **{"bench-replay": "yes"})
        for made in kube.list("ResourceClaimTemplate", namespaces["translate"]):
            # the templates the patch names, there too, as translation made them: the
            # controllers find in both namespaces what they find in one
            meta = {"name": made["metadata"]["name"], "namespace": namespaces["ours-replay"]}
            made.update(
                apiVersion="resource.k8s.io/v1", kind="ResourceClaimTemplate", metadata=meta
            )
            kube.create(made)
        patch = _translation_patch(kube, webhook, namespaces, specs["translate"])
        pids["ours-replay"] = _null_webhook(kube, webhook, "bench-replay", patch=patch) or 0
    calls_before = _calls(webhook)
    scraped = [_admission_seconds(kube)]  # before the levels, then after each

    results: dict[str, dict[str, float]] = {}
    cpu: dict[str, dict[str, float]] = {}
    levels: dict[str, dict[str, tuple[float, float]]] = {}
    for concurrency in CONCURRENCY:
        mutating = _calls(webhook)["mutate"]
        used = {name: _cpu_seconds(pid) for name, pid in pids.items()}
        samples = _run(control_plane, namespaces, specs, concurrency)
        scraped.append(_admission_seconds(kube))
        levels[str(concurrency)] = _admission_delta(scraped[-2], scraped[-1])
        calls_here = {"webhook": _calls(webhook)["mutate"] - mutating}
        for null in ("null-webhook", "null-patch", "ours-replay"):  # one call per timed create
            calls_here[null] = len(samples.get(null, ()))
        cpu[str(concurrency)] = _cpu_use(pids, used, calls_here)
        for case, values in samples.items():
            results[f"{case}@{concurrency}"] = {
                "n": len(values),
                "p50_ms": _percentile(values, 50) * 1000,
                "p99_ms": _percentile(values, 99) * 1000,
            }
    after = _calls(webhook)
    admission = _admission_delta(scraped[0], scraped[-1])
    calls = {k: after[k] - calls_before[k] for k in ("mutate", "validate")}
    answering = (after["seconds"] - calls_before["seconds"]) / max(1, calls["mutate"]) * 1000
    out = Path(os.environ.get("DRA_E2E_BENCH_OUT", tmp_path / "latency.json"))
    out.write_text(
        json.dumps(
            {
                "results": results,
                "webhook_calls": calls,
                "webhook_ms_per_call": answering,
                "refused": FAILED,
                "api_server_admission_ms": admission,
                "api_server_admission_ms_per_level": levels,
                "cpu": cpu,
            },
            indent=2,
        )
    )
    extra = [
        f"{case}@{c}: {results[f'{case}@{c}']['p50_ms']:.1f} / "
        f"{results[f'{case}@{c}']['p99_ms']:.1f} ms"
        for case in ("call-only", "null-webhook", "null-patch", "ours-noop", "ours-replay")
        for c in CONCURRENCY
        if FLOORS
    ]
    print(
        "\n"
        + _table(results)
        + "\n"
        + "; ".join(extra)
        + f"\nwebhook calls while measured: {calls}, "
        f"{answering:.2f} ms each in the webhook (read to answered)\n"
        f"{len(FAILED)} creates refused{': ' if FAILED else ''}{'; '.join(FAILED[:5])}\n"
        + "".join(
            f"CPU at {c} concurrent: "
            + ", ".join(f"{what} {value:.3f}" for what, value in row.items())
            + "\n"
            for c, row in cpu.items()
        )
        + "in the API server, while measured (mean ms per call, calls):\n"
        + "".join(
            f"  {what}: {mean:.3f} ms x {count:.0f}\n" for what, (mean, count) in admission.items()
        )
        + "".join(
            f"  at {c} concurrent, {what}: {mean:.3f} ms x {count:.0f}\n"
            for c, rows in levels.items()
            for what, (mean, count) in rows.items()
            if what.startswith(("webhook_admission", "match_condition"))
        )
        + f"(written to {out})"
    )


_ADMISSION_METRICS = (
    "apiserver_admission_webhook_admission_duration_seconds",
    "apiserver_admission_match_condition_evaluation_seconds",
    "apiserver_admission_controller_admission_duration_seconds",
)
"""What the API server spends on admission, per webhook (`name`) and per plugin: a webhook call
as the API server sees it (its HTTP client, TLS, encoding), the CEL of matchConditions, and
each admission plugin in total (all the namespaces' pods together)."""
_SAMPLE = re.compile(r"^(\w+)_(sum|count)\{([^}]*)\} (\S+)$")


def _admission_seconds(kube: Kube) -> dict[str, dict[str, float]]:
    """{metric{labels}: {"sum": s, "count": n}} of `_ADMISSION_METRICS` from /metrics."""
    found: dict[str, dict[str, float]] = {}
    for line in kube.http.get("/metrics").text.splitlines():
        match = _SAMPLE.match(line)
        if match is None or match.group(1) not in _ADMISSION_METRICS:
            continue
        name, which, labels, value = match.groups()
        short = name.removeprefix("apiserver_admission_").removesuffix("_seconds")
        found.setdefault(f"{short}{{{labels}}}", {})[which] = float(value)
    return found


def _admission_delta(
    before: dict[str, dict[str, float]], after: dict[str, dict[str, float]]
) -> dict[str, tuple[float, float]]:
    """Mean ms per call and calls of every series that counted calls in between."""
    out = {}
    for key, now in sorted(after.items()):
        then = before.get(key, {})
        count = now.get("count", 0) - then.get("count", 0)
        if count > 0:
            seconds = now.get("sum", 0) - then.get("sum", 0)
            out[key] = (seconds / count * 1000, count)
    return out


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a process has used so far (/proc/PID/stat); 0 without one."""
    if not pid:
        return 0.0
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = stat.rsplit(")", 1)[1].split()  # from the third field on: state, ppid, ...
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _cpu_use(
    pids: dict[str, int], before: dict[str, float], calls: dict[str, float]
) -> dict[str, float]:
    """What each process used since `before`: ms per call where its calls are counted
    (`<name> ms/call`), CPU seconds in total otherwise (`<name> s`)."""
    row = {}
    for name, pid in pids.items():
        if not pid:
            continue
        seconds = _cpu_seconds(pid) - before[name]
        if calls.get(name):
            row[f"{name} ms/call"] = seconds / calls[name] * 1000
        else:
            row[f"{name} s"] = seconds
    return row


def _calls(webhook: Webhook) -> dict[str, float]:
    """Pod reviews answered so far, per endpoint, and the seconds the mutating ones took."""
    name = "dra_webhook_admission_duration_seconds"
    found = {
        e: webhook.metric(f"{name}_count", webhook=e, kind="Pod") for e in ("mutate", "validate")
    }
    found["seconds"] = webhook.metric(f"{name}_sum", webhook="mutate", kind="Pod")
    return found


def _table(results: dict[str, dict[str, float]]) -> str:
    """The rows docs/benchmarks.md keeps: p50 / p99 per case and concurrency, and the two
    ratios the goals are about."""
    lines = [
        "| concurrency | none p50 / p99 ms | policy | dra-only (chart) | translate (chart) "
        "| dra-only / policy p50, p99 | translate / none p50, p99 |",
        "| ---: | --- | --- | --- | --- | --- | --- |",
    ]
    for concurrency in CONCURRENCY:
        row = {case: results[f"{case}@{concurrency}"] for case in CASES}

        def pair(case: str, row: dict[str, dict[str, float]] = row) -> str:
            return f"{row[case]['p50_ms']:.1f} / {row[case]['p99_ms']:.1f}"

        def ratio(a: str, b: str, row: dict[str, dict[str, float]] = row) -> str:
            p50 = row[a]["p50_ms"] / row[b]["p50_ms"]
            p99 = row[a]["p99_ms"] / row[b]["p99_ms"]
            return f"{p50:.2f}, {p99:.2f}"

        cells = [pair(case) for case in CASES]
        lines.append(
            f"| {concurrency} | {' | '.join(cells)} "
            f"| {ratio('dra-only', 'policy')} | {ratio('translate', 'none')} |"
        )
    return "\n".join(lines)


def _denied(kube: Kube, pod: dict[str, object]) -> bool:
    try:
        kube.create(pod, dry_run=True)
    except Exception as error:
        return "ValidatingAdmissionPolicy" in str(error)
    return False


def _run(
    plane: ControlPlane,
    namespaces: dict[str, str],
    specs: dict[str, dict[str, object]],
    concurrency: int,
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
                pod = o.pod(f"p{concurrency}-{i}", namespaces[case], specs[case])
                began = time.perf_counter()
                try:
                    kube.create(pod)
                except ApiError as error:  # counted and shown, not timed: the run goes on
                    with lock:
                        FAILED.append(f"{case}: {error}")
                    continue
                elapsed = time.perf_counter() - began
                with lock:
                    samples[case].append(elapsed)
        finally:
            kube.close()

    run: Callable[[int], None] = worker
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(run, range(concurrency)))
    return samples
