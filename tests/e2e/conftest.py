"""The control-plane suite's fixtures and its one-line-per-journey report.

One control plane per test session (tests/e2e/controlplane.py), stopped by PID at the end; when a
test that used it fails, the tail of each process's log is attached to the failure. Tests belong
to a journey by `pytestmark = pytest.mark.journey("<name>")`; the terminal summary prints one line
per journey with its verdict, and `DRA_E2E_JOURNEYS_OUT=<file>` writes them as JSON with the
release (hack/e2e-matrix reads it). `DRA_E2E_JOURNEYS=dra-only,translate` runs only those journeys.

A test that needs what a release serves from some minor on carries
`pytest.mark.since(36, "why")`: on an older control plane it is skipped saying the release and why.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import time
from collections import defaultdict
from collections.abc import Callable, Iterator

import pytest

from tests.assets import control_plane_assets, control_plane_release, k8s_tool
from tests.e2e.controlplane import ControlPlane, ControlPlaneError
from tests.e2e.fleet import publish
from tests.e2e.kube import Kube, release_devices
from tests.e2e.webhook import Webhook, start_webhook, stop_webhook

_PLANE: list[ControlPlane] = []
"""The session's control plane, for the failure hook and the summary (fixtures cannot reach
hooks any other way)."""
_WEBHOOK: list[Webhook] = []


JOURNEYS = (
    "dra-only",
    "translate",
    "operators",
    "sharing",
    "migrate",
    "quotas",
    "defaults",
    "satisfiability",
    "cel-cost",
    "report",
    "runbook",
    "extended-resources",
    "releases",
    "tenancy",
    "certificates",
    "preemption",
    "group-claims",
    "device-taints",
    "faults",
    "latency",
)
"""The order journeys run in: faults stops the API server, and latency is best measured last."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        marker = item.get_closest_marker("journey")
        return JOURNEYS.index(marker.args[0]) + 1 if marker else 0

    items.sort(key=rank)  # stable: the order within a journey is the file's
    wanted = {j for j in os.environ.get("DRA_E2E_JOURNEYS", "").split(",") if j}
    if not wanted:
        return
    unknown = wanted - set(JOURNEYS)
    if unknown:
        raise pytest.UsageError(f"DRA_E2E_JOURNEYS: no journey {', '.join(sorted(unknown))}")
    kept, dropped = [], []
    for item in items:
        marker = item.get_closest_marker("journey")
        (kept if marker is not None and marker.args[0] in wanted else dropped).append(item)
    config.hook.pytest_deselected(items=dropped)
    items[:] = kept


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "journey(name): the user journey a control-plane test walks")
    config.addinivalue_line(
        "markers", "since(minor, why): needs Kubernetes 1.<minor> or later (skipped before)"
    )


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """etcd, kube-apiserver, kube-controller-manager and kube-scheduler on loopback."""
    assets = control_plane_assets()  # skips with the how-to, or fails under CI=true
    plane = ControlPlane(
        assets, tmp_path_factory.mktemp("control-plane"), control_plane_release()[0]
    )
    _PLANE.append(plane)
    try:
        plane.start()
    except ControlPlaneError as error:
        plane.stop()
        pytest.fail(f"the control plane did not start: {error}")
    yield plane
    plane.stop()


@pytest.fixture(scope="session")
def kube(control_plane: ControlPlane) -> Iterator[Kube]:
    """The admin's client (system:masters)."""
    client = Kube(control_plane)
    yield client
    client.close()


@pytest.fixture(scope="session")
def fleet(kube: Kube) -> None:
    """Two Ready nodes with NVIDIA GPUs and MIG devices, and their DeviceClasses."""
    publish(kube, control_plane_release()[0])


@pytest.fixture(scope="session")
def helm() -> str:
    return k8s_tool("helm")


@pytest.fixture(scope="session")
def webhook(
    control_plane: ControlPlane,
    kube: Kube,
    fleet: None,
    helm: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Webhook]:
    """`dra-webhook serve --kubeconfig` with the chart's RBAC and policy, registered from the
    chart's webhook configurations (tests/e2e/webhook.py)."""
    running = start_webhook(control_plane, kube, helm, tmp_path_factory.mktemp("webhook"))
    _WEBHOOK.append(running)
    yield running
    stop_webhook(running)


_NAMES = itertools.count(1)


@pytest.fixture
def namespace(kube: Kube, request: pytest.FixtureRequest) -> Iterator[Callable[..., str]]:
    """Make a fresh namespace with labels, named after the test: namespace("dra-only", **labels).

    Afterwards its devices go back to the fleet (four whole GPUs are soon gone otherwise): the
    workloads are deleted, the pods too at once (no kubelet would confirm their end), and the
    claims, whose allocation the scheduler then forgets.
    """
    made: list[str] = []

    def make(mode: str | None = None, **labels: str) -> str:
        base = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower().removeprefix("test_"))[:40]
        name = f"{base.strip('-')}-{next(_NAMES)}"
        if mode is not None:
            labels = {"gpu-mode": mode, **labels}
        made.append(name)
        return kube.namespace(name, **labels)

    yield make
    for name in made:
        release_devices(kube, name)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:  # type: ignore[misc]
    report: pytest.TestReport = yield
    if report.failed and _PLANE and "control_plane" in getattr(item, "fixturenames", ()):
        report.sections.append(("control-plane logs", _PLANE[0].log_tails()))
        if _WEBHOOK:
            tail = _WEBHOOK[0].server.log.read_text(errors="replace").splitlines()[-40:]
            report.sections.append(("webhook log", "\n".join(tail)))
    return report  # type: ignore[return-value]


_JOURNEYS: dict[str, list[pytest.TestReport]] = defaultdict(list)
_STARTED = time.monotonic()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    journey = _journey_of(report)
    if journey and (report.when == "call" or report.outcome != "passed"):
        _JOURNEYS[journey].append(report)


def _journey_of(report: pytest.TestReport) -> str | None:
    for key, value in report.user_properties:
        if key == "journey":
            return str(value)
    return None


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    marker = item.get_closest_marker("journey")
    if marker is not None:
        item.user_properties.append(("journey", marker.args[0]))
    since = item.get_closest_marker("since")
    if since is not None:
        minor, version = control_plane_release()
        if minor < since.args[0]:
            pytest.skip(f"Kubernetes {version}: {since.args[1]}")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _JOURNEYS and not _PLANE:
        return
    write = terminalreporter.write_line
    terminalreporter.section("journeys through the control plane")
    if _PLANE and _PLANE[0].startup_seconds:
        version = control_plane_release()[1]
        write(
            f"control plane: Kubernetes {version}, API server answered "
            f"{_PLANE[0].startup_seconds:.1f} s after start"
        )
    verdicts: dict[str, dict[str, object]] = {}
    for journey, reports in _JOURNEYS.items():
        outcomes: dict[str, int] = defaultdict(int)
        for report in reports:
            outcome = "xfailed" if hasattr(report, "wasxfail") else report.outcome
            outcomes[outcome] += 1
        verdict = "FAILED" if outcomes.get("failed") else "passed"
        if set(outcomes) == {"skipped"}:
            verdict = "skipped"
        counts = ", ".join(f"{n} {o}" for o, n in sorted(outcomes.items()))
        seconds = sum(r.duration for r in reports)
        write(f"journey {journey:<18} {verdict:<8} ({counts}; {seconds:.1f} s)")
        skips = sorted(
            {str(r.longrepr[2]) for r in reports if r.skipped and isinstance(r.longrepr, tuple)}
        )
        verdicts[journey] = {"verdict": verdict, "outcomes": dict(outcomes), "skipped": skips}
    write(f"session: {time.monotonic() - _STARTED:.1f} s")
    out = os.environ.get("DRA_E2E_JOURNEYS_OUT")
    if out and _PLANE:
        release = control_plane_release()[1]
        with open(out, "w") as file:
            json.dump({"release": release, "journeys": verdicts}, file, indent=1)
