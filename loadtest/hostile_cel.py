"""Hostile CEL: claims that ask the webhook to compile too much, and everyone else on the worker.

    loadtest/hostile_cel.py                 # = make hostile-cel: 20 s per shape, 4 connections
    loadtest/hostile_cel.py --duration 3 --baseline

1. Starts `dra-webhook serve` on 127.0.0.1 (fresh certificates, one worker, the embedded demo
   cluster and the default policy, the health listener on its own free port) and waits for
   /readyz.
2. Sends each hostile claim (`SHAPES`, built here, as a server-side dry-run create sends them
   to POST /validate) alone, once: its answer and how long it took.
3. Then one phase per shape, `--duration` seconds each (after one with no hostile review at
   all, with `--baseline`): `--hostile` connections send that claim back to back (the third
   shape's selectors new in every review); one connection (its own process) sends the captured
   pod creates (tests/fixtures/apiserver-v1.36.2/pod-create-*.json) every `--interval` ms; a
   prober (its own process) asks GET /healthz on the health port every 50 ms, a new connection
   each time, as the kubelet does.
4. Prints the figures and writes them to `hostile-cel.json` (into `--out`, default
   loadtest/results/hostile-cel-<time>/): per shape, the answer and its time alone; per phase,
   the hostile answers', the ordinary reviews' and the probes' p50, p99 and max.

The shapes: 8,192 distinct selectors (32 requests x 8 `firstAvailable` alternatives x 32
selectors, every count within the API server's limits, every expression valid); 10,000 requests
of one selector each (past the API server's limit of 32 requests); 1,024 selectors never seen
before in every review (32 x 8 x 4: within the compile budget's bytes, so the webhook compiles
until its count or time runs out).

Exits 1 unless, in every phase: every hostile review is answered 200 with a denial naming the
budget or the limit it reached, each within `--hostile-within` seconds (1 s); the ordinary
reviews' p99 is under `--ordinary-p99-ms` (50) and the probes' under `--probe-p99-ms` (100),
none failed.

Bounded: at most 120 s per phase and 16 hostile connections, 127.0.0.1 only; the server is
stopped by its pid whatever happens. The clients share the machine with the server.
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import itertools
import json
import multiprocessing
import socket
import ssl
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from loadtest.overload import HOST, Options, _free_port, _ms, _pct, _start, _stop  # noqa: E402

MAX_DURATION_S = 120
MAX_HOSTILE = 16
PROBE_INTERVAL_S = 0.05
FIXTURES = ROOT / "tests" / "fixtures" / "apiserver-v1.36.2"
NAMESPACE = "gpu-e2e"  # dra-only in the embedded demo cluster
NAMED = ("(cel.compileBudget.", "(cel.reviewBudget)", "must have at most 32 items")
"""What a hostile answer names: a compile budget, the review budget, or the API's list limit."""


# -- the claims --------------------------------------------------------------------------------


def _selector(number: str) -> dict[str, Any]:
    return {"cel": {"expression": f'device.attributes["gpu.nvidia.com"].index == {number}'}}


def _numbers(start: int = 0) -> Iterator[str]:
    return (str(n) for n in itertools.count(start))


def first_available_claim(
    requests: int, alternatives: int, selectors: int, numbers: Iterator[str] | None = None
) -> bytes:
    """A ResourceClaim review: `requests` x `alternatives` firstAvailable subrequests x
    `selectors` distinct valid selectors (`index == <number>`, one number each)."""
    numbers = numbers if numbers is not None else _numbers()
    spec = {
        "devices": {
            "requests": [
                {
                    "name": f"r{r}",
                    "firstAvailable": [
                        {
                            "name": f"a{a}",
                            "deviceClassName": "gpu.nvidia.com",
                            "selectors": [
                                _selector(n) for n in itertools.islice(numbers, selectors)
                            ],
                        }
                        for a in range(alternatives)
                    ],
                }
                for r in range(requests)
            ]
        }
    }
    return _review(spec)


def exact_claim(requests: int) -> bytes:
    """A ResourceClaim review of `requests` requests, one distinct selector each."""
    spec = {
        "devices": {
            "requests": [
                {
                    "name": f"r{r}",
                    "exactly": {"deviceClassName": "gpu.nvidia.com", "selectors": [_selector(n)]},
                }
                for r, n in zip(range(requests), _numbers(), strict=False)
            ]
        }
    }
    return _review(spec)


@functools.cache
def _new_selectors_template() -> bytes:
    return first_available_claim(32, 8, 4, (f"@@{i:04d}" for i in itertools.count()))


def new_selectors_claim(turn: int) -> bytes:
    """32 x 8 x 4 selectors no review sent before: numbered `<turn + 1><four digits>`."""
    return _new_selectors_template().replace(b"@@", str(turn + 1).encode())


def _review(spec: dict[str, Any]) -> bytes:
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "hostile", "namespace": NAMESPACE},
        "spec": spec,
    }
    group, version = "resource.k8s.io", "v1"
    kind = {"group": group, "version": version, "kind": "ResourceClaim"}
    return orjson.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "hostile",
                "kind": kind,
                "resource": {"group": group, "version": version, "resource": "resourceclaims"},
                "requestKind": kind,
                "name": "hostile",
                "namespace": NAMESPACE,
                "operation": "CREATE",
                "userInfo": {"username": "tenant"},
                "object": claim,
                "dryRun": True,
            },
        }
    )


@dataclass(frozen=True)
class Shape:
    name: str
    body: Callable[[int], bytes]
    """The review for the `n`th time this shape is sent (its selectors numbered from it)."""


@functools.cache
def _selectors_8192() -> bytes:
    return first_available_claim(32, 8, 32)


@functools.cache
def _requests_10000() -> bytes:
    return exact_claim(10_000)


SHAPES = (
    Shape("8,192 selectors (32 x 8 x 32)", lambda turn: _selectors_8192()),
    Shape("10,000 requests", lambda turn: _requests_10000()),
    Shape("1,024 new selectors (32 x 8 x 4)", new_selectors_claim),
)
"""Built once each (the first two are the same every time; the third is new every time)."""


def ordinary_reviews() -> list[bytes]:
    """The captured pod creates (bodies as the API server sent them)."""
    return [path.read_bytes() for path in sorted(FIXTURES.glob("pod-create-*.json"))]


# -- HTTP over TLS on one kept-alive connection ------------------------------------------------


class Connection:
    """One kept-alive HTTPS connection to the webhook; reopened when the server closes it."""

    def __init__(self, port: int, ca: Path) -> None:
        self.port = port
        self.context = ssl.create_default_context(cafile=str(ca))
        self.sock: ssl.SSLSocket | None = None

    def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        if self.sock is None:
            raw = socket.create_connection((HOST, self.port), timeout=30)
            self.sock = self.context.wrap_socket(raw, server_hostname=HOST)
        head = (
            f"POST {path}?timeout=10s HTTP/1.1\r\nHost: webhook\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        )
        try:
            self.sock.sendall(head.encode() + body)
            return self._answer()
        except OSError:
            self.close()
            raise

    def _answer(self) -> tuple[int, bytes]:
        assert self.sock is not None
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed before the answer")
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        length, close = 0, False
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
            elif name.strip().lower() == b"connection" and b"close" in value.lower():
                close = True
        while len(body) < length:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed in the body")
            body += chunk
        if close:
            self.close()
        return int(lines[0].split(b" ", 2)[1]), body

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None


# -- the clients -------------------------------------------------------------------------------


@dataclass
class Answered:
    """One shape's answers: how long each took, what they said."""

    seconds: list[float] = field(default_factory=list)
    texts: set[str] = field(default_factory=set)
    unnamed: list[str] = field(default_factory=list)
    """Answers that were not a denial naming a budget or a limit."""

    def add(self, seconds: float, status: int, body: bytes) -> None:
        self.seconds.append(seconds)
        text = _verdict(status, body)
        self.texts.add(text)
        if not any(name in text for name in NAMED) or not text.startswith("denied"):
            self.unnamed.append(text)


def _verdict(status: int, body: bytes) -> str:
    if status != 200:
        return f"HTTP {status}: {body[:200]!r}"
    response = orjson.loads(body)["response"]
    message = response.get("status", {}).get("message", "")
    budget = next((part for part in message.split(": ") if any(n in part for n in NAMED)), "")
    return f"{'allowed' if response['allowed'] else 'denied'}: {budget or message[:300]}"


def _hostile(
    port: int, ca: Path, shape: Shape, *, first: int, stop: threading.Event, answered: Answered
) -> None:
    """One connection sending `shape` back to back until `stop`."""
    connection = Connection(port, ca)
    try:
        for turn in itertools.count(first):
            if stop.is_set():
                return
            body = shape.body(turn)
            started = time.perf_counter()
            try:
                status, answer = connection.post("/validate", body)
            except OSError as error:
                answered.unnamed.append(f"connection: {error}")
                continue
            answered.add(time.perf_counter() - started, status, answer)
    finally:
        connection.close()


def _ordinary(port: int, ca: str, seconds: float, interval: float, results: Any) -> None:
    """Its own process: the pod creates, one every `interval` seconds, each timed."""
    connection = Connection(port, Path(ca))
    bodies = ordinary_reviews()
    took: list[float] = []
    failed: list[str] = []
    stop_at = time.monotonic() + seconds
    for body in itertools.cycle(bodies):
        if time.monotonic() >= stop_at:
            break
        started = time.perf_counter()
        try:
            status, _ = connection.post("/validate", body)
        except OSError as error:
            failed.append(str(error))
            continue
        took.append(time.perf_counter() - started)
        if status != 200:
            failed.append(f"HTTP {status}")
        time.sleep(max(0.0, interval - (time.perf_counter() - started)))
    connection.close()
    results.put(("ordinary", took, failed))


def _probe(port: int, seconds: float, results: Any) -> None:
    """Its own process: GET /healthz on the health port, a new connection every 50 ms."""
    took: list[float] = []
    failed: list[str] = []
    stop_at = time.monotonic() + seconds
    while time.monotonic() < stop_at:
        started = time.perf_counter()
        try:
            with socket.create_connection((HOST, port), timeout=5) as sock:
                sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: probe\r\nConnection: close\r\n\r\n")
                data = b""
                while chunk := sock.recv(4096):
                    data += chunk
            if not data.startswith(b"HTTP/1.1 200"):
                failed.append(data[:100].decode(errors="replace"))
        except OSError as error:
            failed.append(str(error))
        took.append(time.perf_counter() - started)
        time.sleep(max(0.0, PROBE_INTERVAL_S - (time.perf_counter() - started)))
    results.put(("probe", took, failed))


# -- the run -----------------------------------------------------------------------------------


@dataclass
class Hostile:
    duration: float
    hostile: int
    interval: float
    hostile_within: float
    ordinary_p99_ms: float
    probe_p99_ms: float
    baseline: bool
    out: Path


def _figures(seconds: list[float]) -> dict[str, Any]:
    return {
        "n": len(seconds),
        "p50": _ms(_pct(seconds, 0.5)),
        "p99": _ms(_pct(seconds, 0.99)),
        "max": _ms(max(seconds, default=None)),
    }


def _alone(port: int, ca: Path) -> Iterator[tuple[str, float, str]]:
    connection = Connection(port, ca)
    try:
        for shape in SHAPES:
            body = shape.body(10**5)
            started = time.perf_counter()
            status, answer = connection.post("/validate", body)
            seconds = time.perf_counter() - started
            yield shape.name, seconds, _verdict(status, answer)
    finally:
        connection.close()


def _phase(port: int, health: int, ca: Path, opts: Hostile, shape: Shape | None) -> dict[str, Any]:
    """`opts.hostile` connections sending `shape` (None: none) while the ordinary reviews and
    the probes are timed for `opts.duration` seconds; the figures and the checks."""
    spawn = multiprocessing.get_context("spawn")
    results: Any = spawn.Queue()
    helpers = [
        spawn.Process(
            target=_ordinary,
            args=(port, str(ca), opts.duration, opts.interval / 1000, results),
            daemon=True,
        ),
        spawn.Process(target=_probe, args=(health, opts.duration, results), daemon=True),
    ]
    for helper in helpers:
        helper.start()
    answered = Answered()
    stop = threading.Event()
    senders = [
        threading.Thread(
            target=_hostile,
            args=(port, ca, shape),
            kwargs={"first": i * 10**4, "stop": stop, "answered": answered},
            daemon=True,
        )
        for i in range(opts.hostile if shape is not None else 0)
    ]
    for sender in senders:
        sender.start()
    measured: dict[str, tuple[list[float], list[str]]] = {}
    try:
        for _ in helpers:
            name, took, failed = results.get(timeout=opts.duration + 60)
            measured[name] = (took, failed)
    finally:
        stop.set()
        for sender in senders:
            sender.join(30)
        for helper in helpers:
            helper.join(10)
    ordinary, ordinary_failed = measured["ordinary"]
    probes, probe_failed = measured["probe"]
    figures: dict[str, Any] = {
        "hostile_ms": {**_figures(answered.seconds), "answers": sorted(answered.texts)},
        "ordinary_ms": {**_figures(ordinary), "failed": len(ordinary_failed)},
        "healthz_ms": {**_figures(probes), "failed": len(probe_failed)},
    }
    figures["checks"] = {
        "every hostile review denied naming its budget or limit": not answered.unnamed
        and (shape is None or bool(answered.seconds)),
        f"every hostile review answered within {opts.hostile_within:g} s": max(
            answered.seconds, default=0.0
        )
        <= opts.hostile_within,
        f"ordinary p99 under {opts.ordinary_p99_ms:g} ms": bool(ordinary)
        and (_pct(ordinary, 0.99) or 1.0) * 1000 < opts.ordinary_p99_ms
        and not ordinary_failed,
        f"healthz p99 under {opts.probe_p99_ms:g} ms": bool(probes)
        and (_pct(probes, 0.99) or 1.0) * 1000 < opts.probe_p99_ms
        and not probe_failed,
    }
    figures["unnamed"] = answered.unnamed[:10]
    return figures


def run(opts: Hostile) -> dict[str, Any]:
    opts.out.mkdir(parents=True, exist_ok=True)
    port, health = _free_port(), _free_port()
    server = _start(Options(0, 0, 0, 0, 0, 0, 0, 0, opts.out), port, health)
    ca = opts.out / "certs" / "ca.crt"
    try:
        warm = Connection(port, ca)
        for body in ordinary_reviews() * 20:
            warm.post("/validate", body)
        warm.close()
        alone = {name: {"ms": _ms(s), "answer": text} for name, s, text in _alone(port, ca)}
        phases = (
            {"no hostile review": _phase(port, health, ca, opts, None)} if opts.baseline else {}
        )
        for shape in SHAPES:
            phases[shape.name] = _phase(port, health, ca, opts, shape)
    finally:
        code = _stop(server)
    checks = {
        "alone: every hostile review denied naming its budget or limit": all(
            v["answer"].startswith("denied") and any(n in v["answer"] for n in NAMED)
            for v in alone.values()
        ),
        f"alone: every hostile review answered within {opts.hostile_within:g} s": all(
            v["ms"] / 1000 <= opts.hostile_within for v in alone.values()
        ),
    }
    for name, phase in phases.items():
        checks.update({f"{name}: {check}": ok for check, ok in phase["checks"].items()})
    summary: dict[str, Any] = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "duration_s": opts.duration,
        "hostile_connections": opts.hostile,
        "ordinary_interval_ms": opts.interval,
        "alone": alone,
        "phases": phases,
        "server_exit": code,
        "checks": checks,
        "ok": all(checks.values()),
    }
    (opts.out / "hostile-cel.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def _parse(argv: list[str] | None) -> Hostile:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--duration", type=float, default=20.0, help="seconds of load (20)")
    parser.add_argument("--hostile", type=int, default=4, help="hostile connections (4)")
    parser.add_argument("--interval", type=float, default=20.0, help="ms between pod creates")
    parser.add_argument("--hostile-within", type=float, default=1.0)
    parser.add_argument("--ordinary-p99-ms", type=float, default=50.0)
    parser.add_argument("--probe-p99-ms", type=float, default=100.0)
    parser.add_argument(
        "--baseline", action="store_true", help="first, the same time with no hostile review"
    )
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    if not 0 < args.duration <= MAX_DURATION_S:
        parser.error(f"--duration must be in (0, {MAX_DURATION_S}]")
    if not 0 < args.hostile <= MAX_HOSTILE:
        parser.error(f"--hostile must be in (0, {MAX_HOSTILE}]")
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = args.out or ROOT / "loadtest" / "results" / f"hostile-cel-{stamp}"
    return Hostile(
        args.duration,
        args.hostile,
        args.interval,
        args.hostile_within,
        args.ordinary_p99_ms,
        args.probe_p99_ms,
        args.baseline,
        out,
    )


def report(summary: dict[str, Any]) -> str:
    """The figures as a table (ms: p50 / p99 / max)."""

    def three(figures: dict[str, Any]) -> str:
        if not figures["n"]:
            return "-"
        return f"{figures['p50']:g} / {figures['p99']:g} / {figures['max']:g} ({figures['n']})"

    lines = [f"{'alone':<34} {'ms':>9}  answer"]
    for name, alone in summary["alone"].items():
        lines.append(f"{name:<34} {alone['ms']:>9g}  {alone['answer']}")
    lines.append("")
    lines.append(f"{'phase':<34} {'hostile':<30} {'ordinary':<30} healthz")
    for name, phase in summary["phases"].items():
        lines.append(
            f"{name:<34} {three(phase['hostile_ms']):<30} {three(phase['ordinary_ms']):<30} "
            f"{three(phase['healthz_ms'])}"
        )
    lines.append("")
    lines.extend(f"{'ok  ' if ok else 'FAIL'} {check}" for check, ok in summary["checks"].items())
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    opts = _parse(argv)
    summary = run(opts)
    print(report(summary))
    print(f"hostile-cel: {opts.out / 'hostile-cel.json'}")
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
