"""The Grafana dashboard's picture (docs/dashboard.png), from a real run of the load test.

    .venv/bin/python -m loadtest.dashboard --out docs/dashboard.png     (make dashboard-picture)

Nothing in the picture is drawn by hand; every line is one of the dashboard's own queries
(charts/dra-webhook/dashboards/dra-webhook.json) evaluated by a real Prometheus:

1. a fake API server on 127.0.0.1 (tests/cluster/fake_apiserver.py, plus the PolicyReports list
   the migration gauge reads) holds the embedded demo cluster's objects;
2. `dra-webhook serve --kubeconfig` runs against it (the live source: watches, the migration
   gauge read every 7 s) with the default policy plus two exceptions, on 127.0.0.1 over TLS;
3. Prometheus (hack/get-prometheus) scrapes its /metrics every second, with the target labels
   the chart's ServiceMonitor gives a scrape (job, namespace, endpoint, pod, service), as in a
   cluster (no label of the webhook's own is named like one of them);
4. locust runs the load test's scenarios (loadtest/locustfile.py, through loadtest/runner.py)
   for `--duration` seconds, while this script adds what the scenarios do not send (pods two
   exceptions cover) and plays a migration and an outage on the fake API server: the
   PolicyReports count fewer legacy workloads every few seconds (as successive report runs
   would; their numbers are made up, the gauge that reads them is the webhook's), and the
   ResourceSlice list/watch fails for a while (the view goes stale, then recovers);
5. every panel's queries go to Prometheus' HTTP API (query_range; instant queries at the end),
   with $job and $namespace set to the scrape's labels, $__rate_interval to 10s and $__range to
   the run, and matplotlib draws them in the dashboard's grid (gridPos) on Grafana's dark
   colours. It is not Grafana's renderer: panel types are drawn as time series, stats (last
   value over a sparkline), bar gauges (last values) and tables (one row per series).

Every process started here binds 127.0.0.1 and is stopped by its process id.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import datetime as dt
import io
import json
import math
import os
import shutil
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import yaml
from aiohttp import web

from app.certs import mint
from app.cluster.view import Kind
from app.k8s.policyreports import MANAGED_BY, MANAGED_BY_LABEL, MODE_LABEL
from loadtest.runner import (
    Options,
    RunError,
    _explain,
    _free_port,
    _run_locust,
    _stop,
    _wait_ready,
)
from loadtest.scenarios import AUDIT, DRA_ONLY, TRANSLATE, _fixture, _in_namespace
from tests.cluster.fake_apiserver import FakeApiServer

ROOT = Path(__file__).resolve().parents[1]
DASHBOARD = ROOT / "charts" / "dra-webhook" / "dashboards" / "dra-webhook.json"
DEMO_CLUSTER = ROOT / "app" / "cluster" / "demo-cluster.yaml"
DEFAULT_POLICY = ROOT / "app" / "config" / "default-policy.yaml"
POLICY_REPORTS = "/apis/wgpolicyk8s.io/v1alpha2/policyreports"

JOB = NAMESPACE = "dra-webhook"
"""The scrape's job and namespace labels: the chart's ServiceMonitor's for a release named
dra-webhook in namespace dra-webhook (the dashboard's $job and $namespace)."""
RATE_INTERVAL = "10s"
STEP_SECONDS = 2
SCRAPE = "1s"

Obj = dict[str, Any]


# -- the cluster: the fake API server, with PolicyReports -------------------------------------


class ReportingApiServer(FakeApiServer):
    """The live source's fake API server, also serving the PolicyReports of
    `dra-webhook report --policy-reports` (one page) for the webhook's migration gauge."""

    def __init__(self) -> None:
        super().__init__()
        self.reports: dict[str, tuple[str, int]] = {}
        """namespace -> (its mode label, legacy workloads: the report's fail + warn)."""

    def policy_report(self, namespace: str, mode: str, legacy: int) -> Obj:
        warn = legacy if mode != "dra-only" else 0
        return {
            "metadata": {
                "name": "dra-webhook-migration",
                "namespace": namespace,
                "labels": {MANAGED_BY_LABEL: MANAGED_BY, MODE_LABEL: mode},
            },
            "summary": {"pass": 10, "fail": legacy - warn, "warn": warn, "error": 0, "skip": 0},
        }

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        if request.method == "GET" and request.path == POLICY_REPORTS:
            items = [self.policy_report(ns, *found) for ns, found in sorted(self.reports.items())]
            body = {"kind": "PolicyReportList", "apiVersion": "wgpolicyk8s.io/v1alpha2",
                    "metadata": {"resourceVersion": str(self.version)}, "items": items}  # fmt: skip
            return web.Response(body=orjson.dumps(body), content_type="application/json")
        return await super()._handle(request)


class ApiThread:
    """A ReportingApiServer on an event loop of its own thread; `call` steers it from outside."""

    def __init__(self) -> None:
        self.server = ReportingApiServer()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    def __enter__(self) -> ApiThread:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self.server.start(), self._loop).result(10)
        return self

    def __exit__(self, *_: object) -> None:
        asyncio.run_coroutine_threadsafe(self.server.stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def call(self, steer: Callable[[ReportingApiServer], object]) -> None:
        """Run `steer(server)` on the server's loop (its state is the loop's) and wait."""

        async def run() -> None:
            steer(self.server)

        asyncio.run_coroutine_threadsafe(run(), self._loop).result(10)


def demo_objects() -> list[Obj]:
    """The embedded demo cluster's objects, namespaces labelled with their name as the API
    server labels them (kubernetes.io/metadata.name: the exceptions select by it)."""
    objects: list[Obj] = yaml.safe_load(DEMO_CLUSTER.read_text())["items"]
    for obj in objects:
        if obj["kind"] == "Namespace":
            labels = obj["metadata"].setdefault("labels", {})
            labels["kubernetes.io/metadata.name"] = obj["metadata"]["name"]
    return objects


# -- the policy: the default one, with two exceptions the side traffic uses --------------------

EXCEPTIONS = (
    # (name, namespace, app label, days left, reason)
    (
        "vendor-inference",
        DRA_ONLY,
        "vendor-inference",
        9,
        "vendor image reads CUDA_VISIBLE_DEVICES",
    ),
    ("nightly-render", TRANSLATE, "nightly-render", 40, "renderer pinned to a device plugin"),
)


def dashboard_policy(today: dt.date) -> str:
    """The default policy file with `EXCEPTIONS`, ending that many days after `today`."""
    policy = yaml.safe_load(DEFAULT_POLICY.read_text())
    policy["exceptions"] = [
        {
            "name": name,
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
            "objectSelector": {"matchLabels": {"app": app}},
            "kinds": ["Pod"],
            "until": (today + dt.timedelta(days=days)).isoformat(),
            "reason": reason,
        }
        for name, namespace, app, days, reason in EXCEPTIONS
    ]
    return yaml.safe_dump(policy, sort_keys=False)


def excepted_reviews() -> list[tuple[str, Obj]]:
    """(endpoint, review) of a legacy GPU pod each exception covers: allowed in the dra-only
    namespace, left untranslated in the translate one."""
    found = []
    for _, namespace, app, _, _ in EXCEPTIONS:
        review = _in_namespace(_fixture("pod-create-legacy-gpu"), namespace)
        review["request"]["object"]["metadata"]["labels"] = {"app": app}
        found.append(("mutate" if namespace == TRANSLATE else "validate", review))
    return found


# -- the scripted migration and outage ---------------------------------------------------------

MIGRATION_START = {
    # namespace: (mode, legacy workloads at the start, at the end)
    "batch": ("audit", 14, 6),
    AUDIT: ("audit", 9, 2),
    "vision": ("translate", 8, 1),
    TRANSLATE: ("translate", 6, 3),
    "inference": ("none", 4, 4),
    DRA_ONLY: ("dra-only", 2, 0),
}


def migration_counts(progress: float) -> dict[str, tuple[str, int]]:
    """The legacy workloads per namespace `progress` (0..1) of the way through the run."""
    return {
        namespace: (mode, round(start - (start - end) * min(1.0, max(0.0, progress))))
        for namespace, (mode, start, end) in MIGRATION_START.items()
    }


@dataclass(frozen=True)
class Script:
    duration: float
    outage: tuple[float, float]
    """Seconds into the run when the ResourceSlice list/watch starts failing, and stops."""


def _post(base: str, context: ssl.SSLContext, endpoint: str, review: Obj) -> None:
    review = copy.deepcopy(review)
    review["request"]["uid"] = str(uuid.uuid4())
    request = urllib.request.Request(
        f"{base}/{endpoint}?timeout=10s",
        data=orjson.dumps(review),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, context=context, timeout=10) as answer:
        answer.read()


def play(api: ApiThread, base: str, ca: Path, script: Script, stop: threading.Event) -> None:
    """Until `stop`: the excepted pods (one every 0.5 s), the migration's PolicyReports, the
    ResourceSlice outage."""
    context = ssl.create_default_context(cafile=str(ca))
    reviews = excepted_reviews()
    started = time.monotonic()
    outage_on = False
    tick = 0
    while not stop.wait(0.5):
        elapsed = time.monotonic() - started
        endpoint, review = reviews[tick % len(reviews)]
        tick += 1
        try:
            _post(base, context, endpoint, review)
        except (OSError, urllib.error.URLError) as error:
            print(f"dashboard: side review failed: {error}", file=sys.stderr)
        counts = migration_counts(elapsed / script.duration)
        api.call(lambda server, counts=counts: server.reports.update(counts))
        in_outage = script.outage[0] <= elapsed < script.outage[1]
        if in_outage and not outage_on:
            api.call(_start_outage)
            outage_on = True
        elif outage_on and not in_outage:
            api.call(lambda server: server.refuse.pop(Kind.RESOURCE_SLICE, None))
            outage_on = False


def _start_outage(server: ReportingApiServer) -> None:
    server.refuse[Kind.RESOURCE_SLICE] = (503, "ServiceUnavailable")
    server.drop_watches()


# -- the processes: the webhook and Prometheus -------------------------------------------------


def start_webhook(work: Path, port: int, kubeconfig: Path) -> subprocess.Popen[bytes]:
    policy = work / "policy.yaml"
    policy.write_text(dashboard_policy(dt.datetime.now(dt.UTC).date()))
    command = [
        sys.executable, "-m", "app", "serve",
        "--host", "127.0.0.1", "--port", str(port),
        "--cert-dir", str(work / "certs"),
        "--kubeconfig", str(kubeconfig),
        "--config", str(policy),
    ]  # fmt: skip
    env = {
        **os.environ,
        "DRA_WEBHOOK_LOG_LEVEL": "WARNING",
        "DRA_WEBHOOK_HEALTH_PORT": str(_free_port()),
        "DRA_WEBHOOK_MIGRATION_GAUGE_INTERVAL_SECONDS": "7",
        "DRA_WEBHOOK_STALE_AFTER_SECONDS": "5",
        "DRA_WEBHOOK_BACKOFF_MAX_SECONDS": "1",
    }
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    with (work / "server-webhook.log").open("wb") as log:
        return subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env)


def prometheus_config(webhook_port: int, ca: Path) -> Obj:
    """One job scraping the webhook every second, labelled as the ServiceMonitor's scrapes are."""
    return {
        "global": {
            "scrape_interval": SCRAPE, "scrape_timeout": SCRAPE, "evaluation_interval": SCRAPE
        },
        "scrape_configs": [
            {
                "job_name": JOB,
                "scheme": "https",
                "metrics_path": "/metrics",
                "tls_config": {"ca_file": str(ca)},
                "static_configs": [
                    {
                        "targets": [f"127.0.0.1:{webhook_port}"],
                        # target labels, as prometheus-operator sets them (a scraped label of the
                        # same name would become exported_*: the webhook has none)
                        "labels": {
                            "namespace": NAMESPACE,
                            "endpoint": "https",
                            "service": JOB,
                            "pod": f"{JOB}-0",
                        },
                    }
                ],
            }
        ],
    }  # fmt: skip


def prometheus_binary() -> str:
    result = subprocess.run(
        [str(ROOT / "hack" / "get-prometheus")],
        capture_output=True, text=True, check=False, timeout=900,
    )  # fmt: skip
    if result.returncode != 0:
        raise RunError(result.stderr.strip() or "hack/get-prometheus failed")
    return result.stdout.strip()


def start_prometheus(work: Path, port: int, webhook_port: int) -> subprocess.Popen[bytes]:
    config = work / "prometheus.yml"
    config.write_text(yaml.safe_dump(prometheus_config(webhook_port, work / "certs" / "ca.crt")))
    command = [
        prometheus_binary(),
        f"--config.file={config}",
        f"--storage.tsdb.path={work / 'tsdb'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--storage.tsdb.retention.time=1d",
        "--log.level=warn",
    ]
    with (work / "prometheus.log").open("wb") as log:
        return subprocess.Popen(command, cwd=work, stdout=log, stderr=subprocess.STDOUT)


class Prometheus:
    """Prometheus' HTTP API on 127.0.0.1."""

    def __init__(self, port: int) -> None:
        self.base = f"http://127.0.0.1:{port}"

    def _get(self, path: str, **params: str) -> Any:
        url = f"{self.base}{path}?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=30) as answer:
            body = json.loads(answer.read())
        if body.get("status") != "success":
            raise RunError(f"prometheus {path} {params}: {body}")
        return body["data"]

    def wait_ready(self, process: subprocess.Popen[bytes], log: Path) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RunError(f"prometheus exited with {process.returncode}: {_explain(log)}")
            try:
                with urllib.request.urlopen(f"{self.base}/-/ready", timeout=2) as answer:
                    if answer.status == 200:
                        return
            except (OSError, urllib.error.URLError):
                pass
            time.sleep(0.2)
        raise RunError(f"prometheus not ready after 30 s: {_explain(log)}")

    def wait_scraped(self, seconds: float = 30) -> None:
        """Until the webhook's first scrape has landed (up == 1)."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self._get("/api/v1/query", query=f'up{{job="{JOB}"}} == 1')["result"]:
                return
            time.sleep(0.5)
        raise RunError("prometheus never scraped the webhook (up != 1)")

    def range(self, expr: str, start: float, end: float) -> list[Obj]:
        data = self._get(
            "/api/v1/query_range", query=expr, start=f"{start:.3f}", end=f"{end:.3f}",
            step=str(STEP_SECONDS),
        )  # fmt: skip
        result: list[Obj] = data["result"]
        return result

    def instant(self, expr: str, at: float) -> list[Obj]:
        data = self._get("/api/v1/query", query=expr, time=f"{at:.3f}")
        result = data["result"]
        if data["resultType"] == "scalar":
            return [{"metric": {}, "value": result}]
        return list(result)


# -- the dashboard's queries -------------------------------------------------------------------


def panels(dashboard: Obj) -> Iterator[Obj]:
    """Every panel, rows' nested panels included."""
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])


def substitute(expr: str, variables: dict[str, str]) -> str:
    """`expr` with Grafana's variables replaced, longest names first ($__rate_interval before
    a hypothetical $__rate)."""
    for name in sorted(variables, key=len, reverse=True):
        expr = expr.replace(f"${{{name}}}", variables[name]).replace(f"${name}", variables[name])
    return expr


def legend(template: str, labels: dict[str, str]) -> str:
    if template in ("", "__auto"):
        shown = {k: v for k, v in labels.items() if k != "__name__"}
        return ", ".join(f"{k}={v}" for k, v in sorted(shown.items())) or "value"
    text = template
    for key, value in labels.items():
        text = text.replace(f"{{{{{key}}}}}", value)
    return text


@dataclass
class Series:
    name: str
    times: list[float]
    values: list[float]


def evaluate(
    prometheus: Prometheus, dashboard: Obj, start: float, end: float
) -> dict[int, list[Series]]:
    """Every panel's targets, by panel id."""
    variables = {
        "job": JOB,
        "namespace": NAMESPACE,
        "__rate_interval": RATE_INTERVAL,
        "__range": f"{math.ceil(end - start)}s",
        "datasource": "prometheus",
    }
    found: dict[int, list[Series]] = {}
    for panel in panels(dashboard):
        for target in panel.get("targets", []):
            expr = substitute(target["expr"], variables)
            if target.get("instant"):
                rows = [
                    {"metric": r["metric"], "values": [r["value"]]}
                    for r in prometheus.instant(expr, end)
                ]
            else:
                rows = prometheus.range(expr, start, end)
            for row in rows:
                points = [(float(t), float(v)) for t, v in row["values"]]
                found.setdefault(panel["id"], []).append(
                    Series(
                        legend(target.get("legendFormat", ""), row["metric"]),
                        [t for t, _ in points],
                        [v for _, v in points],
                    )
                )
    return found


# -- drawing -----------------------------------------------------------------------------------

BACKGROUND, PANEL, BORDER, TEXT, FAINT = "#111217", "#181b1f", "#2c3235", "#ccccdc", "#8e8e9e"
PALETTE = ("#73bf69", "#f2cc0c", "#8ab8ff", "#ff780a", "#f2495c", "#5794f2", "#b877d9",
           "#705da0", "#37872d", "#fade2a", "#ff9830", "#c4162a")  # fmt: skip
UNIT_HEIGHT = 0.34
"""Inches per grid row (Grafana: 30 px a row, 24 columns across the width)."""
WIDTH_IN = 18.0


def _format(value: float, unit: str) -> str:
    if math.isnan(value):
        return "NaN"
    if unit == "s":
        if abs(value) >= 86400:
            return f"{value / 86400:.1f} days"
        if abs(value) >= 1:
            return f"{value:.2f} s"
        if abs(value) >= 0.001:
            return f"{value * 1e3:.2f} ms"
        return f"{value * 1e6:.0f} µs"
    if unit == "percentunit":
        return f"{value * 100:.1f}%"
    suffix = {"reqps": " req/s", "ops": " ops/s"}.get(unit, "")
    return f"{value:,.1f}{suffix}" if abs(value) < 100 else f"{value:,.0f}{suffix}"


def _unit(panel: Obj) -> str:
    return str(panel.get("fieldConfig", {}).get("defaults", {}).get("unit", "short"))


def _dates(seconds: list[float]) -> list[dt.datetime]:
    return [dt.datetime.fromtimestamp(s) for s in seconds]


def _draw_series(axis: Any, panel: Obj, series: list[Series], start: float, end: float) -> None:
    import matplotlib.dates as mdates
    import matplotlib.ticker as mticker

    unit = _unit(panel)
    stacked = (
        panel["fieldConfig"]["defaults"].get("custom", {}).get("stacking", {}).get("mode")
        == "normal"
    )
    if stacked and series:
        grid = sorted({t for s in series for t in s.times})
        stacks = [
            [dict(zip(s.times, s.values, strict=True)).get(t, 0.0) for t in grid] for s in series
        ]
        axis.stackplot(
            _dates(grid), stacks, colors=PALETTE, alpha=0.35, labels=[s.name for s in series]
        )
        total = [0.0] * len(grid)
        for index, stack in enumerate(stacks):
            total = [a + b for a, b in zip(total, stack, strict=True)]
            axis.plot(_dates(grid), total, color=PALETTE[index % len(PALETTE)], linewidth=1)
    else:
        for index, line in enumerate(series):
            axis.plot(
                _dates(line.times),
                line.values,
                color=PALETTE[index % len(PALETTE)],
                linewidth=1.1,
                label=line.name,
            )
    axis.set_xlim(dt.datetime.fromtimestamp(start), dt.datetime.fromtimestamp(end))
    highest = max((v for s in series for v in s.values if not math.isnan(v)), default=0.0)
    axis.set_ylim(bottom=0, top=None if highest > 0 else 1)
    axis.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M:%S"))
    axis.xaxis.set_major_locator(mticker.MaxNLocator(5))
    axis.yaxis.set_major_locator(mticker.MaxNLocator(4))
    axis.yaxis.set_major_formatter(mticker.FuncFormatter(lambda v, _: _format(v, unit)))
    axis.grid(color=BORDER, linewidth=0.6)
    axis.tick_params(colors=FAINT, labelsize=7, length=0)
    for spine in axis.spines.values():
        spine.set_visible(False)
    if series:
        axis.legend(
            loc="upper center",
            bbox_to_anchor=(0.5, -0.13),
            ncol=min(3, len(series)),
            fontsize=7,
            frameon=False,
            labelcolor=TEXT,
            handlelength=1.2,
            columnspacing=1.0,
        )


def _draw_stat(axis: Any, panel: Obj, series: list[Series]) -> None:
    values = [v for s in series for v in s.values]
    if not series or not values:
        return
    line = series[0]
    last = next((v for v in reversed(line.values) if not math.isnan(v)), float("nan"))
    steps = panel["fieldConfig"]["defaults"]["thresholds"]["steps"]
    colour = {"green": "#73bf69", "orange": "#ff9830", "red": "#f2495c"}
    shown = colour[steps[0]["color"]]
    for step in steps[1:]:
        if not math.isnan(last) and last >= step["value"]:
            shown = colour[step["color"]]
    finite = [v for v in line.values if not math.isnan(v)]
    if finite and len(finite) > 1:
        top = max(finite) or 1.0
        axis.fill_between(
            range(len(line.values)),
            [v / top * 0.45 if not math.isnan(v) else 0 for v in line.values],
            color=shown,
            alpha=0.18,
            linewidth=0,
        )
        axis.set_xlim(0, len(line.values) - 1)
    axis.set_ylim(0, 1)
    axis.text(
        0.5,
        0.55,
        _format(last, _unit(panel)),
        color=shown,
        fontsize=20,
        fontweight="bold",
        ha="center",
        va="center",
        transform=axis.transAxes,
    )
    axis.set_axis_off()


def _draw_bars(axis: Any, panel: Obj, series: list[Series]) -> None:
    rows = [(s.name, s.values[-1]) for s in series if s.values]
    if not rows:
        return
    top = max(v for _, v in rows) or 1.0
    unit = _unit(panel)
    for index, (name, value) in enumerate(rows):
        y = len(rows) - 1 - index
        axis.barh(y, 1.0, color=BORDER, height=0.4)
        axis.barh(y, value / top, color=PALETTE[index % len(PALETTE)], height=0.4, alpha=0.85)
        axis.text(0.0, y + 0.24, name, color=TEXT, fontsize=7, va="bottom")
        axis.text(
            1.0, y + 0.24, _format(value, unit), color=TEXT, fontsize=7, va="bottom", ha="right"
        )
    axis.set_xlim(0, 1.0)
    axis.set_ylim(-0.5, len(rows) - 0.1)
    axis.set_axis_off()


def _draw_table(axis: Any, panel: Obj, series: list[Series]) -> None:
    """A table of one instant query: a row per series (its legend, its value), soonest first,
    the value's cell coloured by the panel's thresholds."""
    rows = sorted(((s.name, s.values[-1]) for s in series if s.values), key=lambda r: r[1])
    if not rows:
        return
    unit = _unit(panel)
    steps = panel["fieldConfig"]["defaults"]["thresholds"]["steps"]
    colour = {"green": "#73bf69", "orange": "#ff9830", "red": "#f2495c"}
    renamed = next(
        (t["options"].get("renameByName", {}) for t in panel.get("transformations", [])),
        {},
    )
    label = str(panel["targets"][0]["legendFormat"]).strip("{}")
    heads = (renamed.get(label, label), renamed.get("Value", "Value"))
    height = 1.0 / (len(rows) + 1)
    for column, text in zip((0.02, 0.62), heads, strict=True):
        axis.text(column, 1 - height / 2, text, color=FAINT, fontsize=7.5, va="center")
    for index, (name, value) in enumerate(rows):
        top = 1 - height * (index + 1)
        shown = colour[steps[0]["color"]]
        for step in steps[1:]:
            if value >= step["value"]:
                shown = colour[step["color"]]
        axis.axhspan(top - height, top, xmin=0.6, xmax=1.0, color=shown, alpha=0.85)
        axis.axhline(top, color=BORDER, linewidth=0.6)
        axis.text(0.02, top - height / 2, name, color=TEXT, fontsize=7.5, va="center")
        axis.text(0.62, top - height / 2, _format(value, unit), color=BACKGROUND, fontsize=7.5,
                  va="center", fontweight="bold")  # fmt: skip
    axis.set_xlim(0, 1)
    axis.set_ylim(0, 1)
    axis.set_axis_off()


def draw(
    dashboard: Obj,
    results: dict[int, list[Series]],
    *,
    start: float,
    end: float,
    out: Path,
    caption: str,
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyBboxPatch
    from PIL import Image

    every = list(panels(dashboard))
    rows = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in every)
    header = 1.2
    height = rows * UNIT_HEIGHT + header
    figure = plt.figure(figsize=(WIDTH_IN, height), facecolor=BACKGROUND)
    figure.text(
        0.008,
        1 - 0.35 / height,
        f"{dashboard['title']}",
        color=TEXT,
        fontsize=15,
        fontweight="bold",
        va="top",
    )
    figure.text(0.008, 1 - 0.8 / height, caption, color=FAINT, fontsize=8.5, va="top")
    pad_x, pad_y = 0.004, 0.06 / height

    def box(grid: Obj) -> tuple[float, float, float, float]:
        left = grid["x"] / 24 + pad_x
        width = grid["w"] / 24 - 2 * pad_x
        top = 1 - (header + grid["y"] * UNIT_HEIGHT) / height - pad_y
        tall = grid["h"] * UNIT_HEIGHT / height - 2 * pad_y
        return left, top - tall, width, tall

    for panel in every:
        left, bottom, width, tall = box(panel["gridPos"])
        if panel["type"] == "row":
            figure.text(
                left,
                bottom + tall / 2,
                panel["title"],
                color=TEXT,
                fontsize=11,
                fontweight="bold",
                va="center",
            )
            continue
        figure.patches.append(
            FancyBboxPatch(
                (left, bottom),
                width,
                tall,
                boxstyle="round,pad=0,rounding_size=0.002",
                transform=figure.transFigure,
                facecolor=PANEL,
                edgecolor=BORDER,
                linewidth=0.8,
                zorder=-1,
            )
        )
        title_room = 0.32 / height
        figure.text(
            left + 0.005,
            bottom + tall - 0.09 / height,
            panel["title"],
            color=TEXT,
            fontsize=9,
            fontweight="bold",
            va="top",
        )
        series = results.get(panel["id"], [])
        kind = panel["type"]
        legend_room = (
            0.0
            if kind != "timeseries"
            else (0.2 + 0.17 * math.ceil(max(1, len(series)) / 3)) / height
        )
        axis = figure.add_axes(
            (
                left + (0.035 if kind == "timeseries" else 0.008),
                bottom + legend_room + 0.08 / height,
                width - (0.043 if kind == "timeseries" else 0.016),
                tall - title_room - legend_room - 0.08 / height,
            )
        )
        axis.set_facecolor(PANEL)
        if not any(s.values for s in series):
            axis.set_axis_off()
            axis.text(
                0.5,
                0.5,
                "No data",
                color=FAINT,
                fontsize=11,
                ha="center",
                va="center",
                transform=axis.transAxes,
            )
            continue
        if kind == "stat":
            _draw_stat(axis, panel, series)
        elif kind == "bargauge":
            _draw_bars(axis, panel, series)
        elif kind == "table":
            _draw_table(axis, panel, series)
        else:
            _draw_series(axis, panel, series, start, end)
    buffer = io.BytesIO()
    figure.savefig(buffer, dpi=80, facecolor=BACKGROUND)
    plt.close(figure)
    buffer.seek(0)
    image = Image.open(buffer).convert("RGB").quantize(colors=96, dither=Image.Dither.NONE)
    out.parent.mkdir(parents=True, exist_ok=True)
    image.save(out, optimize=True)


# -- the run -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Args:
    out: Path
    duration: int
    users: int
    keep: Path | None


def _parse(argv: list[str] | None) -> Args:
    parser = argparse.ArgumentParser(
        prog="python -m loadtest.dashboard",
        description="Draw the Grafana dashboard's panels from a real load-test run "
        "(webhook, Prometheus, locust on 127.0.0.1).",
    )
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "dashboard.png")
    parser.add_argument("--duration", type=int, default=90, help="seconds of load (90)")
    parser.add_argument("--users", type=int, default=4, help="locust connections (4)")
    parser.add_argument("--keep", type=Path, default=None, help="keep the logs in this folder")
    args = parser.parse_args(argv)
    if not 20 <= args.duration <= 600:
        parser.error("--duration must be within 20..600")
    if not 1 <= args.users <= 64:
        parser.error("--users must be within 1..64")
    return Args(args.out.resolve(), args.duration, args.users, args.keep)


def _load(work: Path, args: Args, api: ApiThread, webhook_port: int) -> tuple[float, float, int]:
    """Locust and the side traffic for `args.duration`; (start, end, locust's exit code)."""
    options = Options(
        users=args.users, spawn_rate=float(args.users), duration=args.duration, workers=1,
        locust_processes=1, out=work, targets=("webhook",), plot=False, rounds=1,
        check_decisions=None, log_level="WARNING",
    )  # fmt: skip
    stop = threading.Event()
    script = Script(float(args.duration), (args.duration * 0.45, args.duration * 0.65))
    side = threading.Thread(
        target=play,
        args=(api, f"https://127.0.0.1:{webhook_port}", work / "certs" / "ca.crt", script, stop),
        daemon=True,
    )
    (work / "samples").mkdir()
    start = time.time()
    side.start()
    try:
        code = _run_locust(
            "webhook", "webhook", webhook_port, work / "certs" / "ca.crt",
            samples=work / "samples", opts=options,
        )  # fmt: skip
    finally:
        stop.set()
        side.join(30)
    time.sleep(3)  # the last scrapes
    return start, time.time(), code


def run(args: Args, work: Path) -> int:
    dashboard = json.loads(DASHBOARD.read_text())
    mint(work / "certs")
    webhook_port, prometheus_port = _free_port(), _free_port()
    with ApiThread() as api:
        for obj in demo_objects():
            api.call(lambda server, obj=obj: server.put(obj))
        api.call(lambda server: server.reports.update(migration_counts(0.0)))
        kubeconfig = api.server.write_kubeconfig(work / "kubeconfig")
        webhook = start_webhook(work, webhook_port, kubeconfig)
        prometheus: subprocess.Popen[bytes] | None = None
        try:
            _wait_ready(
                webhook, webhook_port, work / "certs" / "ca.crt", work / "server-webhook.log"
            )
            prometheus = start_prometheus(work, prometheus_port, webhook_port)
            api_client = Prometheus(prometheus_port)
            api_client.wait_ready(prometheus, work / "prometheus.log")
            api_client.wait_scraped()
            start, end, code = _load(work, args, api, webhook_port)
            results = evaluate(api_client, dashboard, start, end)
        finally:
            problems = [
                f"{name} {problem}"
                for name, process in (("prometheus", prometheus), ("webhook", webhook))
                if process is not None and (problem := _stop(process)) is not None
            ]
    for problem in problems:
        print(f"dashboard: {problem}", file=sys.stderr)
    when = dt.datetime.fromtimestamp(start, dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    caption = (
        f"The dashboard's own queries, evaluated by Prometheus over {args.duration} s of "
        f"the load test ({args.users} connections) against dra-webhook on 127.0.0.1, {when}; "
        "drawn with matplotlib, not Grafana.\nThe PolicyReports' counts (the migration) and the "
        "ResourceSlice outage are scripted on a fake API server: python -m loadtest.dashboard."
    )
    draw(dashboard, results, start=start, end=end, out=args.out, caption=caption)
    print(
        f"{args.out}: {args.out.stat().st_size // 1024} KiB, {len(results)} panels with data, "
        f"locust exit code {code}"
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    work = Path(tempfile.mkdtemp(prefix="dra-dashboard-"))
    try:
        return run(args, work)
    except RunError as error:
        print(f"dashboard: {error}", file=sys.stderr)
        return 1
    finally:
        if args.keep is not None:
            shutil.copytree(
                work, args.keep, dirs_exist_ok=True, ignore=shutil.ignore_patterns("tsdb")
            )
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
