"""Overload test: twice the measured capacity, many connections, one worker, on loopback.

    loadtest/overload.py                    # = make overload: 60 s, 1,000 connections
    loadtest/overload.py --duration 3 --connections 50 --capacity-seconds 2 --settle 3

1. Starts `dra-webhook serve` on 127.0.0.1 (fresh certificates, one worker, the embedded demo
   cluster and default policy, the health listener on its own free port) and waits for /readyz.
2. Measures capacity: `--capacity-connections` (32) keep-alive connections sending the load-test
   mix back to back for `--capacity-seconds`; capacity = answers per second.
3. Records the server's RSS, then offers twice that rate (`--factor`) for `--duration` seconds
   over `--connections` connections (open loop: each connection sends at its share of the rate,
   at once when it falls behind; one request in flight per connection, as HTTP/1.1 allows).
   Meanwhile a separate process probes `GET /healthz` on the health port every 100 ms.
4. Closes every connection, samples RSS for `--settle` seconds, stops the server by its pid.

It writes `overload.json` (into `--out`, default loadtest/results/overload-<time>/) and exits 1
unless every property holds:

- no 5xx and no connection error: every request is answered;
- every 200 within the API server's timeout (`--timeout`, 10 s, what the chart's mutating webhook
  waits), every refusal (429) within `--refuse-within` (1 s): refused fast;
- `/healthz` p99 under 100 ms, none failed;
- RSS `--settle` seconds after the load within 20% of its value when the load began.

Bounded: at most 600 s of load, 5,000 connections, 127.0.0.1 only; the server is stopped
whatever happens. The generator shares the machine with the server: on two cores it takes one.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import itertools
import json
import multiprocessing
import os
import random
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from app.certs import mint  # noqa: E402
from loadtest.scenarios import PLACEHOLDER_UID, SCENARIOS  # noqa: E402

MAX_DURATION_S = 600
MAX_CONNECTIONS = 5000
HOST = "127.0.0.1"
PROBE_INTERVAL_S = 0.1


@dataclass
class Options:
    duration: float
    connections: int
    capacity_seconds: float
    capacity_connections: int
    factor: float
    timeout: float
    refuse_within: float
    settle: float
    out: Path
    env: dict[str, str] = field(default_factory=dict)


@dataclass
class Tally:
    """What the clients saw: statuses, latencies by status, connection errors."""

    statuses: Counter[int] = field(default_factory=Counter)
    latencies: dict[int, list[float]] = field(default_factory=dict)
    errors: Counter[str] = field(default_factory=Counter)
    sent: int = 0

    def add(self, status: int, seconds: float) -> None:
        self.statuses[status] += 1
        self.latencies.setdefault(status, []).append(seconds)


# -- the server --------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def _rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def _start(
    opts: Options, port: int, health: int, extra: tuple[str, ...] | list[str] = ()
) -> subprocess.Popen[bytes]:
    """`dra-webhook serve` on 127.0.0.1 (one worker, fresh certificates, `extra` arguments),
    once its /readyz answers."""
    certs = opts.out / "certs"
    mint(certs)
    env = {
        **os.environ,
        "DRA_WEBHOOK_HEALTH_PORT": str(health),
        "DRA_WEBHOOK_LOG_LEVEL": "WARNING",
        **opts.env,
    }
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    command = [sys.executable, "-m", "app", "serve", "--host", HOST, "--port", str(port)]
    command += ["--cert-dir", str(certs), "--workers", "1", *extra]
    with (opts.out / "server.log").open("wb") as log:
        process = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env)
    deadline = time.monotonic() + 30
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"server exited {process.returncode}: see {opts.out}/server.log")
        try:
            with urllib.request.urlopen(f"http://{HOST}:{health}/readyz", timeout=2) as answer:
                if answer.status == 200:
                    return process
        except OSError:
            pass
        if time.monotonic() > deadline:
            _stop(process)
            raise RuntimeError(f"server not ready in 30 s: see {opts.out}/server.log")
        time.sleep(0.1)


def _stop(process: subprocess.Popen[bytes]) -> int:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            return process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
    return process.wait()


# -- the clients -------------------------------------------------------------------------------


def _requests() -> list[bytes]:
    """Ready-to-send HTTP requests of the load-test mix, by weight, in a shuffled cycle."""
    out: list[bytes] = []
    counter = itertools.count()
    for scenario in SCENARIOS:
        for _ in range(scenario.weight):
            body = scenario.body.replace(PLACEHOLDER_UID, f"overload-{next(counter)}".encode())
            head = (
                f"POST /{scenario.endpoint}?timeout=10s HTTP/1.1\r\nHost: webhook\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
            )
            out.append(head.encode() + body)
    random.Random(7).shuffle(out)
    return out


async def _exchange(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes
) -> tuple[int, bool]:
    """Send one request; its status and whether the server keeps the connection."""
    writer.write(request)
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    status = int(lines[0].split(b" ", 2)[1])
    length, close = 0, False
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"content-length":
            length = int(value)
        elif name == b"connection" and value.strip().lower() == b"close":
            close = True
    await reader.readexactly(length)
    return status, not close


async def _client(
    port: int,
    context: ssl.SSLContext,
    requests: list[bytes],
    start: int,
    *,
    interval: float | None,
    stop_at: float,
    tally: Tally,
) -> None:
    """One connection: a request every `interval` seconds (None: back to back) until `stop_at`.

    A refused or closed connection is reopened (a TLS handshake, as a real client would pay).
    """
    loop = asyncio.get_running_loop()
    due = loop.time() + (random.random() * interval if interval else 0.0)
    index = start
    reader: asyncio.StreamReader | None = None
    writer: asyncio.StreamWriter | None = None
    try:
        while loop.time() < stop_at:
            if interval:
                delay = due - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
                due = max(due + interval, loop.time() - interval)
            if writer is None:
                try:
                    reader, writer = await asyncio.open_connection(HOST, port, ssl=context)
                except OSError as exc:
                    tally.errors[f"connect: {type(exc).__name__}"] += 1
                    await asyncio.sleep(0.05)
                    continue
            assert reader is not None
            request = requests[index % len(requests)]
            index += 1
            tally.sent += 1
            sent = time.perf_counter()
            try:
                status, keep = await _exchange(reader, writer, request)
            except (OSError, asyncio.IncompleteReadError, ValueError, IndexError) as exc:
                tally.errors[type(exc).__name__] += 1
                writer.close()
                writer = None
                continue
            tally.add(status, time.perf_counter() - sent)
            if not keep:
                writer.close()
                writer = None
    finally:
        if writer is not None:
            writer.close()


async def _drive(
    port: int, ca: Path, connections: int, seconds: float, rate: float | None
) -> Tally:
    context = ssl.create_default_context(cafile=str(ca))
    requests = _requests()
    tally = Tally()
    loop = asyncio.get_running_loop()
    stop_at = loop.time() + seconds
    interval = connections / rate if rate else None
    await asyncio.gather(
        *(
            _client(port, context, requests, i * 7, interval=interval, stop_at=stop_at, tally=tally)
            for i in range(connections)
        )
    )
    await asyncio.sleep(0.2)  # let the closes go out
    return tally


def _run_drive(port: int, ca: Path, connections: int, seconds: float, rate: float | None) -> Tally:
    try:
        import uvloop

        return uvloop.run(_drive(port, ca, connections, seconds, rate))
    except ImportError:  # pragma: no cover
        return asyncio.run(_drive(port, ca, connections, seconds, rate))


# -- the prober (its own process: the generator's GIL must not slow it down) --------------------


def _probe(port: int, seconds: float, results: Any) -> None:
    took: list[float] = []
    failed = 0
    stop_at = time.monotonic() + seconds
    while time.monotonic() < stop_at:
        started = time.perf_counter()
        try:
            with urllib.request.urlopen(f"http://{HOST}:{port}/healthz", timeout=5) as answer:
                ok = answer.status == 200
        except OSError:
            ok = False
        took.append(time.perf_counter() - started)
        failed += not ok
        time.sleep(max(0.0, PROBE_INTERVAL_S - (time.perf_counter() - started)))
    results.put((took, failed))


# -- the run -----------------------------------------------------------------------------------


def _pct(values: list[float], fraction: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def _ms(value: float | None) -> float | None:
    return None if value is None else round(value * 1000, 1)


def run(opts: Options) -> dict[str, Any]:
    opts.out.mkdir(parents=True, exist_ok=True)
    port, health = _free_port(), _free_port()
    server = _start(opts, port, health)
    ca = opts.out / "certs" / "ca.crt"
    try:
        rss_ready = _rss_bytes(server.pid)
        measured = _run_drive(port, ca, opts.capacity_connections, opts.capacity_seconds, None)
        capacity = measured.statuses[200] / opts.capacity_seconds
        rate = capacity * opts.factor
        time.sleep(1.0)
        rss_start = _rss_bytes(server.pid)
        results: Any = multiprocessing.get_context("spawn").Queue()
        prober = multiprocessing.get_context("spawn").Process(
            target=_probe, args=(health, opts.duration, results), daemon=True
        )
        prober.start()
        rss_peak = rss_start
        started = time.monotonic()

        tally_box: list[Tally] = []
        load = threading.Thread(
            target=lambda: tally_box.append(
                _run_drive(port, ca, opts.connections, opts.duration, rate)
            ),
            daemon=True,
        )
        load.start()
        while load.is_alive():
            rss_peak = max(rss_peak, _rss_bytes(server.pid))
            load.join(0.5)
        elapsed = time.monotonic() - started
        probes, probe_failures = results.get(timeout=30)
        prober.join(10)
        tally = tally_box[0]
        settle_samples = []
        settle_end = time.monotonic() + opts.settle
        while time.monotonic() < settle_end:
            time.sleep(1.0)
            settle_samples.append(_rss_bytes(server.pid))
        rss_end = settle_samples[-1] if settle_samples else _rss_bytes(server.pid)
    finally:
        code = _stop(server)

    ok_latency = tally.latencies.get(200, [])
    refused = tally.latencies.get(429, [])
    fivexx = sum(n for status, n in tally.statuses.items() if status >= 500)
    summary: dict[str, Any] = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "connections": opts.connections,
        "duration_s": opts.duration,
        "capacity_reviews_per_s": round(capacity),
        "offered_reviews_per_s": round(rate),
        "sent": tally.sent,
        "answered_per_s": round(sum(tally.statuses.values()) / elapsed),
        "statuses": {str(k): v for k, v in sorted(tally.statuses.items())},
        "connection_errors": dict(tally.errors),
        "ok_ms": {
            "p50": _ms(_pct(ok_latency, 0.5)),
            "p99": _ms(_pct(ok_latency, 0.99)),
            "max": _ms(max(ok_latency, default=None)),
        },
        "refused_ms": {"p99": _ms(_pct(refused, 0.99)), "max": _ms(max(refused, default=None))},
        "healthz_ms": {
            "probes": len(probes),
            "failed": probe_failures,
            "p50": _ms(_pct(probes, 0.5)),
            "p99": _ms(_pct(probes, 0.99)),
            "max": _ms(max(probes, default=None)),
        },
        "rss_mib": {
            "ready": round(rss_ready / 2**20, 1),
            "load_start": round(rss_start / 2**20, 1),
            "peak": round(rss_peak / 2**20, 1),
            "after_settle": round(rss_end / 2**20, 1),
            "settle_s": opts.settle,
        },
        "server_exit": code,
    }
    checks = {
        "no 5xx": fivexx == 0,
        "every request answered": not tally.errors,
        f"every 200 within {opts.timeout:g} s": max(ok_latency, default=0) <= opts.timeout,
        f"every 429 within {opts.refuse_within:g} s": max(refused, default=0) <= opts.refuse_within,
        "healthz p99 under 100 ms": (_pct(probes, 0.99) or 1.0) < 0.1 and probe_failures == 0,
        "RSS back within 20%": rss_end <= rss_start * 1.2,
    }
    summary["checks"] = checks
    summary["ok"] = all(checks.values())
    (opts.out / "overload.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def _parse(argv: list[str] | None) -> Options:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of overload (60)")
    parser.add_argument("--connections", type=int, default=1000, help="connections (1000)")
    parser.add_argument("--capacity-seconds", type=float, default=10.0)
    parser.add_argument("--capacity-connections", type=int, default=32)
    parser.add_argument("--factor", type=float, default=2.0, help="offered / capacity (2)")
    parser.add_argument("--timeout", type=float, default=10.0, help="the API server's timeout")
    parser.add_argument("--refuse-within", type=float, default=1.0)
    parser.add_argument("--settle", type=float, default=30.0, help="seconds before the RSS check")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    if not 0 < args.duration <= MAX_DURATION_S:
        parser.error(f"--duration must be in (0, {MAX_DURATION_S}]")
    if not 0 < args.connections <= MAX_CONNECTIONS:
        parser.error(f"--connections must be in (0, {MAX_CONNECTIONS}]")
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = args.out or ROOT / "loadtest" / "results" / f"overload-{stamp}"
    return Options(
        duration=args.duration,
        connections=args.connections,
        capacity_seconds=args.capacity_seconds,
        capacity_connections=args.capacity_connections,
        factor=args.factor,
        timeout=args.timeout,
        refuse_within=args.refuse_within,
        settle=args.settle,
        out=out,
    )


def main(argv: list[str] | None = None) -> int:
    opts = _parse(argv)
    summary = run(opts)
    print(json.dumps(summary, indent=2))
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
