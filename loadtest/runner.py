"""Headless load test of dra-webhook on loopback, written down as numbers and a plot.

For each target (the webhook, and a bare FastAPI echo under the same uvicorn setup as a
baseline) the runner:

1. mints fresh certificates into the output folder,
2. starts the server on 127.0.0.1 on a free port and waits for /readyz,
3. runs locust headless (loadtest/locustfile.py) for a bounded time with a bounded number of
   users (one keep-alive connection each, back-to-back requests),
4. stops the server by its process id, whatever happened,

then writes `summary.json` and `summary.csv` (requests, failures, RPS, p50/p95/p99/max latency,
server CPU per review) and `latency.png` (percentiles and RPS per second), keeps locust's own
CSV files, and exits 1 if any request failed (wrong HTTP status, malformed answer, wrong uid, or
a wrong decision where the decision is known).

Percentiles come from every request's latency recorded by the locustfile (locust's own CSVs
round sub-100 ms times to whole milliseconds). Locust runs on the same machine as the server, so
with few cores the load generator takes CPU from the server: the server's CPU time per review
(from /proc) is the number that compares fairly across targets.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import os
import platform
import resource
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
LOADTEST = ROOT / "loadtest"
MAX_DURATION_S = 600
MAX_USERS = 512
READY_TIMEOUT_S = 30.0
TARGETS = ("webhook", "echo")

sys.path.insert(0, str(ROOT))
from app.certs import mint  # noqa: E402  (the repository root is not on sys.path by default)


class RunError(Exception):
    """A server or locust did not run as it should; the message says why, from its log."""


def _explain(log: Path) -> str:
    """The line of a process's log that says why it failed: its last error, else its last line."""
    try:
        lines = [line.strip() for line in log.read_text(errors="replace").splitlines()]
    except OSError:
        return f"no log at {log}"
    lines = [line for line in lines if line]
    if not lines:
        return f"nothing in {log}"
    errors = [line for line in lines if "Error" in line or "Exception" in line]
    return f"{(errors or lines)[-1]} (log: {log})"


@dataclass(frozen=True)
class Options:
    users: int
    spawn_rate: float
    duration: int
    workers: int
    locust_processes: int
    out: Path
    targets: tuple[str, ...]
    plot: bool
    rounds: int
    check_decisions: bool | None
    log_level: str


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _process_tree_cpu_seconds(root_pid: int) -> float:
    """User + system CPU seconds of a process and all its descendants (Linux /proc)."""
    ticks = os.sysconf("SC_CLK_TCK")
    parents: dict[int, int] = {}
    times: dict[int, float] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        pid = int(entry.name)
        parents[pid] = int(fields[1])
        times[pid] = (int(fields[11]) + int(fields[12])) / ticks
    total = 0.0
    for pid, seconds in times.items():
        walk = pid
        while walk not in (0, 1) and walk != root_pid:
            walk = parents.get(walk, 0)
        if walk == root_pid:
            total += seconds
    return total


def _start_server(
    target: str, name: str, port: int, certs: Path, opts: Options
) -> subprocess.Popen[bytes]:
    if target == "webhook":
        command = [
            sys.executable, "-m", "app", "serve",
            "--host", "127.0.0.1", "--port", str(port),
            "--health-port", str(_free_port()),  # never 8081, which `make run` may hold
            "--cert-dir", str(certs),
            "--workers", str(opts.workers),
            "--metrics-dir", str(opts.out / f"metrics-{name}"),
        ]  # fmt: skip
    else:
        command = [
            sys.executable, "-m", "uvicorn", "echo_app:app",
            "--app-dir", str(LOADTEST),
            "--host", "127.0.0.1", "--port", str(port),
            "--ssl-certfile", str(certs / "tls.crt"), "--ssl-keyfile", str(certs / "tls.key"),
            "--loop", "uvloop", "--http", "httptools",
            "--workers", str(opts.workers),
            "--no-access-log", "--no-server-header", "--log-level", "warning",
        ]  # fmt: skip
    log = (opts.out / f"server-{name}.log").open("wb")
    env = {**os.environ, "DRA_WEBHOOK_LOG_LEVEL": opts.log_level}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    try:
        return subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env)
    finally:
        log.close()


def _wait_ready(process: subprocess.Popen[bytes], port: int, ca: Path, log: Path) -> None:
    context = ssl.create_default_context(cafile=str(ca))
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        if process.poll() is not None:
            raise RunError(
                f"server exited with {process.returncode} before it was ready: {_explain(log)}"
            )
        try:
            with urllib.request.urlopen(
                f"https://127.0.0.1:{port}/readyz", context=context, timeout=2
            ) as answer:
                if answer.status == 200:
                    return
        except (OSError, urllib.error.URLError):
            pass
        if time.monotonic() > deadline:
            raise RunError(f"server not ready after {READY_TIMEOUT_S:.0f} s: {_explain(log)}")
        time.sleep(0.1)


def _stop(process: subprocess.Popen[bytes]) -> str | None:
    """SIGTERM by pid (graceful drain), then SIGKILL if it does not exit in time.

    Returns what went wrong (None when the server drained and exited 0).
    """
    if process.poll() is not None:
        return f"exited with {process.returncode} before it was stopped"
    process.terminate()
    try:
        code = process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        return "did not stop within 30 s of SIGTERM and was killed"
    # uvicorn re-raises the signal once it has drained, so -SIGTERM is a clean stop too.
    return None if code in (0, -signal.SIGTERM) else f"exited with {code} after SIGTERM"


def _run_locust(
    target: str, name: str, port: int, ca: Path, *, samples: Path, opts: Options
) -> int:
    check = opts.check_decisions if opts.check_decisions is not None else target == "webhook"
    env = {
        **os.environ,
        "DRA_LOADTEST_CA": str(ca),
        "DRA_LOADTEST_SAMPLES_DIR": str(samples),
        "DRA_LOADTEST_CHECK_DECISIONS": "1" if check else "0",
    }
    command = [
        sys.executable, "-m", "locust",
        "-f", str(LOADTEST / "locustfile.py"),
        "--headless", "--only-summary",
        "--users", str(opts.users), "--spawn-rate", str(opts.spawn_rate),
        "--run-time", f"{opts.duration}s", "--stop-timeout", "5",
        "--host", f"https://127.0.0.1:{port}",
        "--csv", str(opts.out / f"locust-{name}"), "--csv-full-history",
        "--exit-code-on-error", "1",
        "--loglevel", "WARNING",
    ]  # fmt: skip
    if opts.locust_processes > 1:
        command += ["--processes", str(opts.locust_processes)]
    with (opts.out / f"locust-{name}.log").open("wb") as log:
        locust = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env)
        try:
            return locust.wait(timeout=opts.duration + 60)
        except subprocess.TimeoutExpired:
            locust.kill()
            locust.wait()
            raise RunError(
                f"locust did not finish in time: {_explain(opts.out / f'locust-{name}.log')}"
            ) from None


def _percentile(ordered: list[float], fraction: float) -> float:
    """Nearest-rank percentile of an ascending list."""
    if not ordered:
        return float("nan")
    rank = max(0, min(len(ordered) - 1, round(fraction * len(ordered) + 0.5) - 1))
    return ordered[rank]


def _read_samples(folder: Path) -> list[Sample]:
    rows: list[Sample] = []
    for path in sorted(folder.glob("samples-*.csv")):
        with path.open(newline="") as f:
            for row in csv.DictReader(f):
                end, ms = float(row["end"]), float(row["ms"])
                rows.append((end, row["name"], ms, row["failed"] == "1"))
    rows.sort()
    return rows


Sample = tuple[float, str, float, bool]
"""(end time, scenario, latency ms, failed)"""


@dataclass(frozen=True)
class Round:
    """One run of locust against one freshly started server."""

    samples: list[Sample]
    server_cpu_seconds: float
    locust_cpu_seconds: float
    locust_exit_code: int
    server_pid: int
    wall_seconds: float
    locust_aggregate: dict[str, str]

    @property
    def span(self) -> float:
        return self.samples[-1][0] - self.samples[0][0] if len(self.samples) > 1 else 0.0


def _series(rounds: list[Round]) -> list[dict[str, Any]]:
    """Per-second percentiles and counts, the rounds laid end to end."""
    series: list[dict[str, Any]] = []
    offset = 0
    for run in rounds:
        per_second: dict[int, list[float]] = defaultdict(list)
        start, full = (run.samples[0][0], int(run.span)) if run.samples else (0.0, 0)
        for end, _, ms, _ in run.samples:
            second = int(end - start)
            if second < full or full == 0:  # the last, partial second would read as a drop
                per_second[second].append(ms)
        for second in sorted(per_second):
            values = sorted(per_second[second])
            series.append(
                {
                    "second": offset + second,
                    "requests": len(values),
                    "p50_ms": _percentile(values, 0.50),
                    "p95_ms": _percentile(values, 0.95),
                    "p99_ms": _percentile(values, 0.99),
                }
            )
        offset += max(full, 1)
    return series


def _summarize_latencies(samples: list[Sample]) -> dict[str, float | None]:
    latencies = sorted(ms for _, _, ms, _ in samples)
    count = len(latencies)
    return {
        "p50": round(_percentile(latencies, 0.50), 3),
        "p95": round(_percentile(latencies, 0.95), 3),
        "p99": round(_percentile(latencies, 0.99), 3),
        "max": round(latencies[-1], 3) if latencies else None,
        "mean": round(sum(latencies) / count, 3) if count else None,
    }


def _analyse(rounds: list[Round]) -> dict[str, Any]:
    samples = [sample for run in rounds for sample in run.samples]
    count = len(samples)
    span = sum(run.span for run in rounds)
    cpu = sum(run.server_cpu_seconds for run in rounds)
    scenarios: dict[str, dict[str, int]] = defaultdict(lambda: {"requests": 0, "failures": 0})
    for _, name, _, failed in samples:
        scenarios[name]["requests"] += 1
        scenarios[name]["failures"] += int(failed)
    return {
        "requests": count,
        "failures": sum(1 for *_, failed in samples if failed),
        "rps": round(count / span, 1) if span else 0.0,
        "latency_ms": _summarize_latencies(samples),
        "server_cpu_seconds": round(cpu, 2),
        "server_cpu_us_per_review": round(cpu / count * 1e6, 1) if count else None,
        "load_generator_cpu_seconds": round(sum(run.locust_cpu_seconds for run in rounds), 2),
        "wall_seconds": round(sum(run.wall_seconds for run in rounds), 1),
        "locust_exit_codes": [run.locust_exit_code for run in rounds],
        "server_pids": [run.server_pid for run in rounds],
        "rounds": [
            {
                "requests": len(run.samples),
                "rps": round(len(run.samples) / run.span, 1) if run.span else 0.0,
                "p99_ms": _summarize_latencies(run.samples)["p99"],
                "server_cpu_us_per_review": (
                    round(run.server_cpu_seconds / len(run.samples) * 1e6, 1)
                    if run.samples
                    else None
                ),
                "locust_aggregate": run.locust_aggregate,
            }
            for run in rounds
        ],
        "scenarios": dict(sorted(scenarios.items())),
        "per_second": _series(rounds),
    }


def _locust_aggregate(prefix: Path) -> dict[str, str]:
    """Locust's own 'Aggregated' row (its percentiles are rounded to whole milliseconds)."""
    path = prefix.with_name(prefix.name + "_stats.csv")
    if not path.exists():
        return {}
    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            if row.get("Name") == "Aggregated":
                keep = ("Request Count", "Failure Count", "Requests/s", "50%", "95%", "99%", "100%")
                return {key: row[key] for key in keep if key in row}
    return {}


def _machine() -> dict[str, Any]:
    model = platform.processor() or "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "system": f"{platform.system()} {platform.machine()}",
    }


def _run_round(target: str, index: int, opts: Options) -> Round:
    name = target if index == 0 else f"{target}-{index + 1}"
    certs = opts.out / "certs"
    samples = opts.out / f"samples-{name}"
    samples.mkdir()
    port = _free_port()
    server = _start_server(target, name, port, certs, opts)
    try:
        _wait_ready(server, port, certs / "ca.crt", opts.out / f"server-{name}.log")
        cpu_before = _process_tree_cpu_seconds(server.pid)
        children_before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.time()
        exit_code = _run_locust(target, name, port, certs / "ca.crt", samples=samples, opts=opts)
        wall = time.time() - started
        children_after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu_after = _process_tree_cpu_seconds(server.pid)
        if server.poll() is not None:
            raise RunError(
                f"{target} server exited with {server.returncode} during the run: "
                f"{_explain(opts.out / f'server-{name}.log')}"
            )
    finally:
        stopped = _stop(server)
    if stopped is not None:
        raise RunError(f"{target} server {stopped}: {_explain(opts.out / f'server-{name}.log')}")
    samples_read = _read_samples(samples)
    if not samples_read:
        # Locust that sent nothing died before its first request (a bad locustfile, a missing
        # fixture): its log, not an empty summary, says why.
        raise RunError(
            f"locust sent no request to the {target} (exit code {exit_code}): "
            f"{_explain(opts.out / f'locust-{name}.log')}"
        )
    locust_cpu = (children_after.ru_utime + children_after.ru_stime) - (
        children_before.ru_utime + children_before.ru_stime
    )
    return Round(
        samples=samples_read,
        server_cpu_seconds=cpu_after - cpu_before,
        locust_cpu_seconds=locust_cpu,
        locust_exit_code=exit_code,
        server_pid=server.pid,
        wall_seconds=wall,
        locust_aggregate=_locust_aggregate(opts.out / f"locust-{name}"),
    )


def _plot(runs: dict[str, dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(len(runs), 1, figsize=(10, 3.6 * len(runs)), squeeze=False)
    for axis, (target, run) in zip(axes[:, 0], runs.items(), strict=True):
        series = run["per_second"]
        seconds = [point["second"] for point in series]
        for key, style in (("p50_ms", "-"), ("p95_ms", "--"), ("p99_ms", ":")):
            axis.plot(seconds, [point[key] for point in series], style, label=key[:3])
        axis.set_ylabel("latency (ms)")
        several = len(run["rounds"]) > 1
        axis.set_xlabel("seconds of load" + (" (rounds end to end)" if several else ""))
        axis.set_title(
            f"{target}: {run['rps']:.0f} reviews/s, p99 {run['latency_ms']['p99']:.2f} ms, "
            f"{run['failures']} failures"
        )
        axis.grid(alpha=0.3)
        rps_axis = axis.twinx()
        rps_axis.plot(
            seconds, [p["requests"] for p in series], color="grey", alpha=0.4, label="reviews/s"
        )
        rps_axis.set_ylabel("reviews/s", color="grey")
        rps_axis.set_ylim(bottom=0)
        axis.set_ylim(bottom=0)
        lines, labels = axis.get_legend_handles_labels()
        more_lines, more_labels = rps_axis.get_legend_handles_labels()
        axis.legend(lines + more_lines, labels + more_labels, loc="upper left", fontsize="small")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def _write_summary(opts: Options, runs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    summary: dict[str, Any] = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": _machine(),
        "settings": {
            "users": opts.users,
            "spawn_rate": opts.spawn_rate,
            "duration_s": opts.duration,
            "server_workers": opts.workers,
            "locust_processes": opts.locust_processes,
            "rounds": opts.rounds,
        },
        "runs": runs,
    }
    if "webhook" in runs and "echo" in runs:
        web, echo = runs["webhook"], runs["echo"]
        summary["webhook_vs_echo"] = {
            "cpu_per_review": round(
                web["server_cpu_us_per_review"] / echo["server_cpu_us_per_review"], 2
            ),
            "rps": round(web["rps"] / echo["rps"], 2),
            "p99": round(web["latency_ms"]["p99"] / echo["latency_ms"]["p99"], 2),
        }
    (opts.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    with (opts.out / "summary.csv").open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(
            ("target", "requests", "failures", "rps", "p50_ms", "p95_ms", "p99_ms", "max_ms",
             "server_cpu_us_per_review")
        )  # fmt: skip
        for target, run in runs.items():
            lat = run["latency_ms"]
            writer.writerow(
                (target, run["requests"], run["failures"], run["rps"], lat["p50"], lat["p95"],
                 lat["p99"], lat["max"], run["server_cpu_us_per_review"])
            )  # fmt: skip
    return summary


def _parse(argv: list[str] | None) -> Options:
    parser = argparse.ArgumentParser(
        prog="loadtest/run", description="Load-test dra-webhook on loopback with locust."
    )
    parser.add_argument("--users", type=int, default=32, help="concurrent connections (32)")
    parser.add_argument("--spawn-rate", type=float, default=None, help="users/s (all in 1 s)")
    parser.add_argument("--duration", type=int, default=30, help="seconds per target (30)")
    parser.add_argument("--workers", type=int, default=1, help="server worker processes (1)")
    parser.add_argument("--locust-processes", type=int, default=1, help="locust processes (1)")
    parser.add_argument(
        "--target",
        choices=(*TARGETS, "both"),
        default="both",
        help="the webhook, the bare FastAPI echo, or both in turn (default)",
    )
    parser.add_argument("--out", type=Path, default=None, help="output folder (new, timestamped)")
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="run the targets in turn this many times, each with a fresh server (1); on a "
        "shared machine, alternating spreads other load over both targets",
    )
    parser.add_argument("--no-plot", action="store_true", help="skip latency.png")
    parser.add_argument(
        "--check-decisions",
        choices=("auto", "on", "off"),
        default="auto",
        help="check known decisions (auto: for the webhook only)",
    )
    parser.add_argument("--log-level", default="INFO", help="webhook log level (INFO)")
    args = parser.parse_args(argv)
    if not 1 <= args.duration <= MAX_DURATION_S:
        parser.error(f"--duration must be within 1..{MAX_DURATION_S}")
    if not 1 <= args.rounds <= 10:
        parser.error("--rounds must be within 1..10")
    if not 1 <= args.users <= MAX_USERS:
        parser.error(f"--users must be within 1..{MAX_USERS}")
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = args.out or LOADTEST / "results" / stamp
    return Options(
        users=args.users,
        spawn_rate=args.spawn_rate or float(args.users),
        duration=args.duration,
        workers=args.workers,
        locust_processes=args.locust_processes,
        out=out,
        targets=TARGETS if args.target == "both" else (args.target,),
        plot=not args.no_plot,
        rounds=args.rounds,
        check_decisions={"auto": None, "on": True, "off": False}[args.check_decisions],
        log_level=args.log_level,
    )


def main(argv: list[str] | None = None) -> int:
    opts = _parse(argv)
    opts.out.mkdir(parents=True, exist_ok=False)
    mint(opts.out / "certs")
    rounds: dict[str, list[Round]] = {target: [] for target in opts.targets}
    try:
        for index in range(opts.rounds):
            for target in opts.targets:
                rounds[target].append(_run_round(target, index, opts))
    except RunError as error:
        print(f"loadtest: {error}", file=sys.stderr)
        return 1
    runs = {target: _analyse(done) for target, done in rounds.items()}
    summary = _write_summary(opts, runs)
    if opts.plot:
        _plot(runs, opts.out / "latency.png")
    for target, run in runs.items():
        lat = run["latency_ms"]
        print(
            f"{target:8} {run['requests']:>8} reviews  {run['failures']} failed  "
            f"{run['rps']:>8.1f}/s  p50 {lat['p50']:.2f} ms  p95 {lat['p95']:.2f} ms  "
            f"p99 {lat['p99']:.2f} ms  server CPU {run['server_cpu_us_per_review']} us/review"
        )
    if "webhook_vs_echo" in summary:
        print(f"webhook / echo: {summary['webhook_vs_echo']}")
    print(f"results in {opts.out}")
    failed = [t for t, run in runs.items() if run["failures"] or not run["requests"]]
    failed += [t for t, run in runs.items() if any(run["locust_exit_codes"]) and t not in failed]
    if failed:
        print(f"FAILED: {', '.join(failed)} (see locust-*_failures.csv)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
