"""Memory soak: distinct large selectors through the HTTPS port must not grow the process past
its one cache budget.

    loadtest/soak_memory.py                       # = make soak-memory: 100,000 selectors
    loadtest/soak_memory.py --selectors 3000 --every 1000 --slices 50

1. Writes a static cluster of `--slices` ResourceSlices (8 GPUs each, NVIDIA-shaped) with its
   DeviceClass and namespace, and starts `dra-webhook serve` on 127.0.0.1 (fresh certificates,
   one worker, the default policy with a compile budget large enough that every review is
   compiled whole (`WHOLE_REVIEWS`), `DRA_WEBHOOK_CACHE_MAX_BYTES` at `--budget-mib`).
2. Sends ResourceClaim reviews to `POST /validate`, back to back over `--connections` keep-alive
   connections, as a server-side dry-run create sends them: `--per-review` distinct selectors
   of ~`--selector-bytes` each, every one never seen before (string comparisons on long
   literals, prefix tests, quantity chains, attributes of made-up names): what a hostile tenant
   allowed to dry-run claims can make the webhook compile, match and judge. By default a
   review stays under the per-review memo bound (app.cel.cost.MEMO_TEXT_PER_REVIEW), so all of
   it is memoized: the worst case for the caches. (`--per-review 100 --selector-bytes 10000`
   sends reviews over it: answered alike, nothing kept.)
3. Every `--every` selectors: the server's RSS (VmRSS of its pid) and the caches' bytes from
   /metrics (`dra_webhook_cache_bytes`, summed).

It writes `soak.json` (into `--out`, default loadtest/results/soak-memory-<time>/) and exits 1
unless every property holds:

- every review answered 200 (a 429, the server shedding load, is sent again after 0.5 s, up to
  20 times), no connection error;
- at every sample, the caches' bytes sum to at most the budget;
- RSS at the end no more than baseline (RSS when ready) + budget + `--headroom-mib`;
- flat once the budget is full: RSS at the end within `--flat-mib` of RSS at half-way.

Bounded: at most `--max-seconds` (1,800) of sending, then it stops and reports what it reached;
127.0.0.1 only; the server is stopped by its pid whatever happens.
"""

from __future__ import annotations

import argparse
import datetime as dt
import http.client
import itertools
import json
import signal
import ssl
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from loadtest.overload import HOST, Options, _free_port, _rss_bytes, _start, _stop  # noqa: E402

MIB = 1024 * 1024
WHOLE_REVIEWS = (
    "cel:\n  compileBudget: {expressions: 100000, milliseconds: 3600000, bytes: 8388608}\n"
)
"""The policy's compile budget lifted: the default stops a review of 30 selectors of 2 KB a
few compiles in (`cel.compileBudget`), and this soak is about what the caches hold when every
selector is compiled."""
DRIVER = "gpu.nvidia.com"
NAMESPACE = "soak"
MAX_SECONDS = 1800
RETRIES = 20


@dataclass
class Soak:
    selectors: int
    every: int
    per_review: int
    selector_bytes: int
    slices: int
    connections: int
    budget_mib: int
    headroom_mib: int
    flat_mib: int
    max_seconds: float
    out: Path


@dataclass
class Sample:
    selectors: int
    seconds: float
    rss_mib: float
    cache_mib: float
    by_cache: dict[str, float] = field(default_factory=dict)


def cluster(slices: int) -> dict[str, Any]:
    """A static cluster: the namespace, the DeviceClass, `slices` node slices of 8 GPUs."""
    items: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": DRIVER},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
        },
    ]
    for n in range(slices):
        node = f"node-{n:05d}"
        devices = [
            {
                "name": f"gpu-{i}",
                "attributes": {
                    "productName": {"string": ("NVIDIA H100 80GB HBM3", "NVIDIA A100")[n % 2]},
                    "architecture": {"string": "Hopper"},
                    "uuid": {"string": f"GPU-{node}-{i}"},
                    "index": {"int": i},
                },
                "capacity": {"memory": {"value": "80Gi"}},
            }
            for i in range(8)
        ]
        items.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": f"{node}-gpu"},
                "spec": {
                    "driver": DRIVER,
                    "nodeName": node,
                    "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                    "devices": devices,
                },
            }
        )
    return {"apiVersion": "v1", "kind": "List", "items": items}


def selector(n: int, size: int) -> str:
    """The `n`th distinct selector, about `size` characters: four forms, all valid CEL."""
    tag = f"{n:09d}"
    pad = max(0, size - 120)
    form = n % 4
    if form == 0:
        return f'device.attributes["{DRIVER}"].productName == "{tag}{"x" * pad}"'
    if form == 1:
        return f'device.attributes["{DRIVER}"].architecture.startsWith("{tag}{"y" * pad}")'
    if form == 2:
        chain: list[str] = []
        for k in itertools.count():
            mebibytes = (n * 7 + k) % 100_000 + 1
            term = f'device.capacity["{DRIVER}"].memory.compareTo(quantity("{mebibytes}Mi")) >= 0'
            if chain and sum(len(t) + 4 for t in chain) + len(term) > size:
                break
            chain.append(term)
        return " || ".join(chain)
    # an attribute of a made-up name: a device path never seen before
    return f'device.attributes["{DRIVER}"].attr{tag} == "{"z" * pad}"'


def claim_review(uid: str, expressions: list[str]) -> bytes:
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": uid, "namespace": NAMESPACE},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "exactly": {
                            "deviceClassName": DRIVER,
                            "allocationMode": "ExactCount",
                            "count": 1,
                            "selectors": [{"cel": {"expression": e}} for e in expressions],
                        },
                    }
                ]
            }
        },
    }
    resource = {"group": "resource.k8s.io", "version": "v1", "resource": "resourceclaims"}
    kind = {"group": "resource.k8s.io", "version": "v1", "kind": "ResourceClaim"}
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": kind,
            "resource": resource,
            "requestKind": kind,
            "requestResource": resource,
            "name": uid,
            "namespace": NAMESPACE,
            "operation": "CREATE",
            "userInfo": {"username": "tenant"},
            "object": claim,
            "oldObject": None,
            "dryRun": True,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        },
    }
    return json.dumps(review).encode()


def _cache_mib(port: int, context: ssl.SSLContext) -> dict[str, float]:
    connection = http.client.HTTPSConnection(HOST, port, context=context, timeout=30)
    try:
        connection.request("GET", "/metrics")
        text = connection.getresponse().read().decode()
    finally:
        connection.close()
    found = {}
    for line in text.splitlines():
        if line.startswith("dra_webhook_cache_bytes{"):
            name = line.split('cache="', 1)[1].split('"', 1)[0]
            found[name] = float(line.rsplit(" ", 1)[1]) / MIB
    return found


class _Sender:
    """Connections sending reviews back to back; each takes the next selectors from a shared
    counter, so every selector is sent once."""

    def __init__(self, soak: Soak, port: int, context: ssl.SSLContext) -> None:
        self.soak, self.port, self.context = soak, port, context
        self._next = itertools.count()
        self._lock = threading.Lock()
        self.sent = 0
        self.refused = 0
        """Reviews the server refused (429) and that were sent again."""
        self.failures: list[str] = []
        self.deadline = time.monotonic() + soak.max_seconds

    def _take(self) -> int | None:
        with self._lock:
            if self.failures or time.monotonic() > self.deadline:
                return None
            first = next(self._next) * self.soak.per_review
            return first if first < self.soak.selectors else None

    def run(self) -> None:
        soak = self.soak
        connection = http.client.HTTPSConnection(HOST, self.port, context=self.context, timeout=60)
        try:
            while (first := self._take()) is not None:
                expressions = [
                    selector(n, soak.selector_bytes)
                    for n in range(first, min(first + soak.per_review, soak.selectors))
                ]
                body = claim_review(f"soak-{first}", expressions)
                headers = {"Content-Type": "application/json"}
                for _ in range(RETRIES):  # 429: the server sheds load; send it again
                    connection.request("POST", "/validate?timeout=10s", body, headers)
                    answer = connection.getresponse()
                    answer.read()
                    if answer.status != 429:
                        break
                    self.refused += 1
                    time.sleep(0.5)
                if answer.status != 200:
                    with self._lock:
                        self.failures.append(f"selectors {first}: HTTP {answer.status}")
                    return
                with self._lock:
                    self.sent += len(expressions)
        except OSError as error:
            with self._lock:
                self.failures.append(f"connection: {error}")
        finally:
            connection.close()


def run(soak: Soak) -> dict[str, Any]:
    soak.out.mkdir(parents=True, exist_ok=True)
    cluster_file = soak.out / "cluster.json"  # JSON is YAML: the static source reads it
    cluster_file.write_text(json.dumps(cluster(soak.slices)))
    port, health = _free_port(), _free_port()
    env = {"DRA_WEBHOOK_CACHE_MAX_BYTES": str(soak.budget_mib * MIB)}
    options = Options(0, 0, 0, 0, 0, 0, 0, 0, soak.out, env)
    policy_file = soak.out / "policy.yaml"
    policy_file.write_text(WHOLE_REVIEWS)
    extra = ["--cluster-file", str(cluster_file), "--config", str(policy_file)]
    process = _start(options, port, health, extra)
    samples: list[Sample] = []
    try:
        context = ssl.create_default_context(cafile=str(soak.out / "certs" / "ca.crt"))
        context.check_hostname = False
        baseline = _rss_bytes(process.pid) / MIB
        samples.append(Sample(0, 0.0, baseline, sum(_cache_mib(port, context).values())))
        sender = _Sender(soak, port, context)
        threads = [threading.Thread(target=sender.run) for _ in range(soak.connections)]
        started = time.monotonic()
        for thread in threads:
            thread.start()
        mark = soak.every
        while any(t.is_alive() for t in threads):
            time.sleep(0.2)
            if sender.sent >= mark or not any(t.is_alive() for t in threads):
                caches = _cache_mib(port, context)
                samples.append(
                    Sample(
                        sender.sent,
                        round(time.monotonic() - started, 1),
                        _rss_bytes(process.pid) / MIB,
                        sum(caches.values()),
                        {k: round(v, 1) for k, v in caches.items() if v >= 0.1},
                    )
                )
                print(
                    f"{sender.sent:>7} selectors  {samples[-1].seconds:>7.1f} s  "
                    f"RSS {samples[-1].rss_mib:6.1f} MiB  caches {samples[-1].cache_mib:6.1f} MiB",
                    flush=True,
                )
                mark = (sender.sent // soak.every + 1) * soak.every
        for thread in threads:
            thread.join()
    finally:
        _stop(process)
    return _verdict(soak, samples, sender.failures, sender.refused)


def _verdict(
    soak: Soak, samples: list[Sample], failures: list[str], refused: int
) -> dict[str, Any]:
    baseline, last = samples[0], samples[-1]
    half = min(samples, key=lambda s: abs(s.selectors - last.selectors / 2))
    problems = list(failures)
    if last.selectors < soak.selectors:
        problems.append(f"only {last.selectors:,} of {soak.selectors:,} selectors sent in time")
    over = [s for s in samples if s.cache_mib > soak.budget_mib]
    if over:
        problems.append(f"caches at {over[0].cache_mib:.1f} MiB, over the budget")
    ceiling = baseline.rss_mib + soak.budget_mib + soak.headroom_mib
    if last.rss_mib > ceiling:
        problems.append(f"RSS {last.rss_mib:.0f} MiB over baseline + budget + headroom")
    if last.rss_mib - half.rss_mib > soak.flat_mib:
        problems.append(
            f"RSS still rising: {half.rss_mib:.0f} MiB at {half.selectors:,}, "
            f"{last.rss_mib:.0f} MiB at {last.selectors:,}"
        )
    result = {
        "when": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "settings": {k: str(v) for k, v in vars(soak).items()},
        "baseline_rss_mib": round(baseline.rss_mib, 1),
        "ceiling_rss_mib": round(ceiling, 1),
        "refused_and_resent": refused,
        "samples": [vars(s) for s in samples],
        "problems": problems,
    }
    (soak.out / "soak.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


def _parse(argv: list[str] | None) -> Soak:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--selectors", type=int, default=100_000)
    parser.add_argument("--every", type=int, default=10_000, help="sample every N selectors")
    parser.add_argument("--per-review", type=int, default=30)
    parser.add_argument("--selector-bytes", type=int, default=2_000)
    parser.add_argument("--slices", type=int, default=100, help="ResourceSlices of 8 GPUs")
    parser.add_argument("--connections", type=int, default=2)
    parser.add_argument("--budget-mib", type=int, default=128)
    parser.add_argument("--headroom-mib", type=int, default=64)
    parser.add_argument("--flat-mib", type=int, default=16)
    parser.add_argument("--max-seconds", type=float, default=MAX_SECONDS)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    if not 1 <= args.connections <= 8 or not 0 < args.max_seconds <= MAX_SECONDS:
        parser.error(f"--connections is 1 to 8, --max-seconds at most {MAX_SECONDS}")
    if args.selector_bytes > 10_240:
        parser.error("a selector is at most 10 KiB (the API server's limit)")
    out = args.out or ROOT / "loadtest" / "results" / (
        "soak-memory-" + dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    )
    return Soak(
        args.selectors,
        args.every,
        args.per_review,
        args.selector_bytes,
        args.slices,
        args.connections,
        args.budget_mib,
        args.headroom_mib,
        args.flat_mib,
        args.max_seconds,
        out,
    )


def _stop_on_term(*_: Any) -> None:
    raise SystemExit(143)  # unwinds through run()'s finally: the server is stopped by its pid


def main(argv: list[str] | None = None) -> int:
    soak = _parse(argv)
    signal.signal(signal.SIGTERM, _stop_on_term)
    result = run(soak)
    for problem in result["problems"]:
        print(f"soak-memory: {problem}", file=sys.stderr)
    print(f"soak-memory: {soak.out / 'soak.json'}")
    return 1 if result["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
