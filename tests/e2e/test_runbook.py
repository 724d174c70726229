"""Journey runbook: docs/runbook.md walked in order, as a platform engineer walks it on the
development control plane (docs/control-plane.md), for one namespace and back.

The namespace (`runbook-ml`) starts unlabelled with its manifests in a folder standing for Git: a
training pod asking for `nvidia.com/gpu: 2`. A node of its own (`runbook-plugin-node`) is where
the device plugin still serves: it advertises `nvidia.com/gpu` and publishes no ResourceSlice, so
legacy pods land there and DRA pods on the fleet's nodes (tests/e2e/fleet.py). A notebook made by
a tool (`kubectl run`) is the pod that cannot change in Git. Then, section by section:

- "Before you start": each row's check, as written; "Nothing changes yet" before the label.
- "The order, for each namespace": audit (warning, the API server's metric, `report`), migrate
  (`dra-webhook migrate --write` on the folder, rolled out), translate (the notebook rewritten,
  its template made by the webhook), then dra-only (the legacy manifest refused with the fix, the
  migrated one admitted, scheduled, its claim allocated).
- "Is a namespace ready?": `report`, `report --fail-on legacy`, the PolicyReports, the gauge and
  `check`, each asked the way the section says, both before (audit) and after the move.
- "When can a node's device plugin go?": the section's command, on the plugin's node.
- "Going back": relabel, disable and uninstall with what each leaves, and the cleanup commands.

Every command a step runs is first found in the section it follows (`Runbook.says`,
`Runbook.block`), then run with NS, NODE, DIR and the file names filled in: when the runbook's
steps change, this walk fails naming the section until it is changed with them.

What the suite cannot do as written: it does not `helm install` (the session's webhook runs
outside the cluster, registered from the chart's templates), so `helm upgrade` and `helm
uninstall` are checked on what the chart renders with the runbook's values; the gauge is read
from a second webhook process started with what the chart renders for `report.enabled` (its
environment and the ClusterRole rule), since the session's webhook runs without it.

The walk does not wait for the namespaces earlier journeys deleted (the report journey's fifty):
`report --policy-reports` skips a namespace being deleted, says so, and writes the others.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from app.cli.parser import DUMP_COMMAND
from tests.assets import k8s_tool, missing, third_party
from tests.e2e import objects as o
from tests.e2e.controlplane import WEBHOOK, ControlPlane
from tests.e2e.fleet import NODES, node
from tests.e2e.kube import ApiError, Kube, release_devices
from tests.e2e.webhook import ENV, REPO, Webhook, render
from tests.helpers import start_server, stop_server

pytestmark = [pytest.mark.journey("runbook"), pytest.mark.usefixtures("webhook")]

Obj = dict[str, Any]
RUNBOOK = REPO / "docs" / "runbook.md"
CRD = "wgpolicyk8s.io_policyreports.yaml"
"""In `crds/` of DRA_WEBHOOK_TEST_DATA (charts/dra-webhook/README.md names its upstream)."""
NS = "runbook-ml"
NODE = "runbook-plugin-node"
MANAGED = "app.kubernetes.io/managed-by"

BEFORE = "Before you start"
ORDER = "The order, for each namespace"
READY = "Is a namespace ready?"
PLUGIN_GOES = "When can a node's device plugin go?"
BACK = "Going back"

TRAINER = f"""\
# The team's training pod, as kept in Git before the move.
apiVersion: v1
kind: Pod
metadata:
  name: trainer
  namespace: {NS}
spec:
  terminationGracePeriodSeconds: 0
  containers:
    - name: cuda
      image: {o.IMAGE}
      resources:
        limits:
          nvidia.com/gpu: 2   # two whole GPUs
"""
FIX = "container cuda asks for nvidia.com/gpu: 2 -> use DeviceClass gpu.nvidia.com (count 2)"
"""The offence and its fix, as the chart's admission policy words them (warning and denial)."""
NOTEBOOK_SPEC = {
    "spec": {
        "terminationGracePeriodSeconds": 0,
        "containers": [
            {
                "name": "notebook",
                "image": o.IMAGE,
                "resources": {"limits": {"nvidia.com/gpu": "1"}},
            }
        ],
    }
}
NOTEBOOK = (
    f"kubectl -n {NS} run notebook --image={o.IMAGE} --restart=Never "
    f"--overrides='{json.dumps(NOTEBOOK_SPEC)}'"
)
"""A pod made by a tool, not kept in Git (docs/control-plane.md, "Try it")."""


class RunbookChangedError(Exception):
    """A step's command is no longer in its section: not an assertion (an expected failure of
    the product never hides it)."""


class Runbook:
    """docs/runbook.md by section: the commands each step runs must be found there."""

    def __init__(self, path: Path) -> None:
        self.text = path.read_text()

    def section(self, title: str) -> str:
        found = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", self.text, re.M | re.S)
        if not found:
            raise RunbookChangedError(
                f"docs/runbook.md has no section {title!r}: walk it here again"
            )
        return found.group(1)

    def says(self, title: str, command: str) -> str:
        """`command` as section `title` writes it (table pipes unescaped, lines joined)."""
        prose = " ".join(self.section(title).replace("\\|", "|").split())
        if command not in prose:
            raise RunbookChangedError(f"docs/runbook.md, {title!r}, no longer says `{command}`")
        return command

    def block(self, title: str) -> str:
        """The section's shell block, as written."""
        found = re.search(r"```sh\n(.*?)```", self.section(title), re.S)
        if not found:
            raise RunbookChangedError(f"docs/runbook.md, {title!r}, has no sh block any more")
        return found.group(1)


@dataclass
class Shell:
    """bash with the engineer's PATH (kubectl, dra-webhook, jq) and KUBECONFIG; the runbook's
    placeholders become this walk's names."""

    env: dict[str, str]
    cwd: Path
    places: dict[str, str]

    def run(self, command: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        for placeholder, value in self.places.items():
            pattern = rf"(?<![\w./~-]){re.escape(placeholder)}(?![\w./-])"
            command = re.sub(pattern, value.replace("\\", "\\\\"), command)
        return subprocess.run(
            ["bash", "-o", "pipefail", "-c", command],
            capture_output=True, text=True, check=False, timeout=timeout, env=self.env,
            cwd=self.cwd,
        )  # fmt: skip

    def ok(self, command: str) -> subprocess.CompletedProcess[str]:
        done = self.run(command)
        assert done.returncode == 0, f"{command}: exit {done.returncode}\n{done.stderr}"
        return done


@dataclass
class Walk:
    kube: Kube
    webhook: Webhook
    book: Runbook
    sh: Shell
    git: Path
    """The manifests as kept in Git (DIR)."""
    history: Path
    """The same folder before the migration (what `git show HEAD~1` would give)."""
    done: set[str] = field(default_factory=set)

    def after(self, step: str) -> None:
        """Skip when an earlier step failed: this one starts where that one ended."""
        if step not in self.done:
            pytest.skip(f"the runbook's earlier step {step!r} did not pass")


def _dra_webhook_bin(folder: Path) -> Path:
    """The folder of the `dra-webhook` command: the venv's, else a shim for `python -m app`."""
    if Path(sys.executable).with_name("dra-webhook").exists():
        return Path(sys.executable).parent
    folder.mkdir(exist_ok=True)
    shim = folder / "dra-webhook"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m app "$@"\n')
    shim.chmod(0o755)
    return folder


def _plugin_node() -> tuple[Obj, Obj]:
    """A Ready node whose device plugin advertises four `nvidia.com/gpu` (no DRA driver)."""
    amounts = {"cpu": "16", "memory": "64Gi", "pods": "110", "nvidia.com/gpu": "4"}
    ready = {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "test"}
    status = {"status": {"capacity": amounts, "allocatable": amounts, "conditions": [ready]}}
    return node(NODE), status


@pytest.fixture(scope="module")
def walk(
    control_plane: ControlPlane,
    kube: Kube,
    webhook: Webhook,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Walk]:
    jq = shutil.which("jq")
    if jq is None:
        missing("jq is not on PATH (the runbook's node check pipes kubectl into jq)")
    kube.install_crd(yaml.safe_load((third_party("crds") / CRD).read_text()))
    manifest, status = _plugin_node()
    kube.apply(manifest)
    kube.patch("Node", NODE, None, {"spec": {"taints": None}})  # TaintNodesByCondition's
    kube.patch("Node", NODE, None, status, subresource="status")
    kube.namespace(NS)

    work = tmp_path_factory.mktemp("runbook")
    git, history = work / "git", work / "history"
    for folder in (git, history):
        folder.mkdir()
        (folder / "trainer.yaml").write_text(TRAINER)
    tools = [_dra_webhook_bin(work / "bin"), Path(k8s_tool("kubectl")).parent, Path(jq).parent]
    env = {
        **os.environ,
        "PATH": os.pathsep.join([*map(str, tools), os.environ.get("PATH", "")]),
        "KUBECONFIG": str(control_plane.kubeconfig()),
    }
    places = {
        "NS": NS,
        "NODE": NODE,
        "DIR": str(git),
        "~/.kube/config": str(control_plane.kubeconfig()),
        "policy.yaml": str(webhook.policy),
        "cluster.yaml": str(work / "cluster.yaml"),
        "dump.json": str(work / "dump.json"),
    }
    yield Walk(kube, webhook, Runbook(RUNBOOK), Shell(env, work, places), git, history)
    release_devices(kube, NS)
    kube.delete("Namespace", NS)
    kube.delete("Node", NODE)


@pytest.fixture(scope="module")
def gauge(
    control_plane: ControlPlane,
    kube: Kube,
    webhook: Webhook,
    helm: str,
    walk: Walk,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Webhook]:
    """A webhook replica as the chart runs it with `report.enabled=true`: the gauge's interval
    from the rendered Deployment (1 s here), its ClusterRole's `list` on policyreports; not
    registered. The session's ClusterRole is put back afterwards."""
    docs = render(
        helm,
        "--show-only=templates/rbac.yaml",
        "--show-only=templates/deployment.yaml",
        "--set=report.enabled=true",
        "--set=report.gaugeIntervalSeconds=1",
    )
    role = next(d for d in docs if d["kind"] == "ClusterRole")
    assert any("policyreports" in rule["resources"] for rule in role["rules"])
    (container,) = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"][
        "containers"
    ]
    variable = "DRA_WEBHOOK_MIGRATION_GAUGE_INTERVAL_SECONDS"
    (interval,) = [e["value"] for e in container["env"] if e["name"] == variable]
    kube.apply(role)
    server = start_server(
        tmp_path_factory.mktemp("runbook-gauge"),
        "--kubeconfig", str(control_plane.kubeconfig(WEBHOOK)), "--config", str(webhook.policy),
        cert_dir=webhook.server.cert_dir, env={**ENV, variable: interval},
    )  # fmt: skip
    yield Webhook(server, [], webhook.policy)
    stop_server(server)
    docs = render(helm, "--show-only=templates/rbac.yaml")
    kube.apply(next(d for d in docs if d["kind"] == "ClusterRole"))


def _sample(text: str, name: str, **labels: str) -> float | None:
    """The value of the first sample of `name` whose labels include `labels`; None if absent."""
    for line in text.splitlines():
        found = re.match(r"^([a-zA-Z_:][\w:]*)(\{[^}]*\})? (\S+)$", line)
        if found and found.group(1) == name:
            have = dict(re.findall(r'(\w+)="([^"]*)"', found.group(2) or ""))
            if all(have.get(k) == v for k, v in labels.items()):
                return float(found.group(3))
    return None


def _warned_in_audit(kube: Kube) -> float:
    """The API server's count of the chart's admission policy warnings (audit namespaces)."""
    metrics = kube.http.get("/metrics").text
    binding = "dra-webhook-dra-only-warn"
    name = "apiserver_validating_admission_policy_check_total"
    return _sample(metrics, name, enforcement_action="warn", policy_binding=binding) or 0.0


def _row(table: str, first: str) -> list[str]:
    """The whitespace-split row of a `report` or `kubectl get` table starting with `first`."""
    for line in table.splitlines():
        if line.split()[:1] == [first]:
            return line.split()
    raise AssertionError(f"no row for {first} in:\n{table}")


def _gone(kube: Kube, kind: str, name: str) -> None:
    kube.wait(lambda: kube.find(kind, name, NS) is None, f"{kind} {NS}/{name} to be gone")


def _replace(walk: Walk, pod: str) -> None:
    """Take a pod down for its replacement, waiting until its devices are free again."""
    claims = [c["metadata"]["name"] for c in walk.kube.list("ResourceClaim", NS)]
    claims = [c for c in claims if c.startswith(f"{pod}-")]
    walk.kube.delete("Pod", pod, NS, now=True)
    _gone(walk.kube, "Pod", pod)
    for claim in claims:
        _gone(walk.kube, "ResourceClaim", claim)


def _policy_report(walk: Walk) -> list[str]:
    """The namespace's row of `kubectl get policyreports -A`: NAMESPACE NAME PASS FAIL WARN..."""
    return _row(walk.sh.ok(walk.book.says(READY, "kubectl get policyreports -A")).stdout, NS)


def _legacy_workloads(gauge: Webhook, mode: str) -> float | None:
    _, text = gauge.get("/metrics")
    return _sample(text, "dra_webhook_legacy_workloads", workload_namespace=NS, mode=mode)


def _plugin_pods(walk: Walk) -> list[str]:
    """The runbook's check of a node, run on the device plugin's node: pods still using it."""
    return walk.sh.ok(walk.book.block(PLUGIN_GOES)).stdout.split()


def _check(walk: Walk, folder: Path) -> subprocess.CompletedProcess[str]:
    """`check` on a folder against a dump of the cluster as it is now ("Is a namespace ready?")."""
    dump = walk.book.says(
        READY,
        "kubectl get namespaces,nodes,deviceclasses,resourceslices,resourceclaims,"
        "resourceclaimtemplates,resourcequotas -A -o yaml",
    )
    walk.sh.ok(f"{dump} > cluster.yaml")
    command = walk.book.says(
        READY, "dra-webhook check --config policy.yaml --cluster-file cluster.yaml DIR"
    )
    return walk.sh.run(command.replace("DIR", str(folder)))


def test_before_you_start_dra_is_served_and_the_driver_publishes_the_gpus_the_policy_names(
    walk: Walk,
) -> None:
    book, sh = walk.book, walk.sh
    version = sh.ok(book.says(BEFORE, "kubectl version")).stdout
    server = re.search(r"Server Version: v1\.(\d+)\.", version)
    assert server and int(server.group(1)) >= 34, version

    gates = sh.ok(book.says(BEFORE, "kubectl get --raw /metrics | grep kubernetes_feature_enabled"))
    for gate in ("DRAConsumableCapacity", "DRAPartitionableDevices"):
        assert re.search(rf'name="{gate}".*\}} 1$', gates.stdout, re.M), gate

    slices = sh.ok(book.says(BEFORE, "kubectl get resourceslices")).stdout
    for name in NODES:  # the nodes moved: the driver runs there; not on the plugin's node
        assert _row(slices, f"{name}-gpu.nvidia.com")[1:3] == [name, "gpu.nvidia.com"]
    assert NODE not in slices

    classes = sh.ok(book.says(BEFORE, "kubectl get deviceclasses")).stdout.split()
    policy = yaml.safe_load(walk.webhook.policy.read_text())
    named = {m["deviceClassName"] for m in policy["mappings"] + policy.get("sharing", [])}
    for name in ("gpu.nvidia.com", "mig.nvidia.com", "gpu-shared.nvidia.com"):
        assert book.says(BEFORE, name) and name in named and name in classes, name

    served = sh.ok(book.says(BEFORE, "kubectl api-resources")).stdout
    for kind in ("DeviceClass", "ResourceSlice", "ResourceClaim", "ResourceClaimTemplate"):
        assert re.search(rf"resource\.k8s\.io/v1\s+\S+\s+{kind}$", served, re.M), kind

    # "Install the chart ... Nothing changes yet": the namespace has no mode label yet
    book.says(BEFORE, "Nothing changes yet: only namespaces with the mode label are sent to it.")
    reviews = walk.webhook.reviews()
    dry_run = sh.ok("kubectl apply --dry-run=server -f DIR")
    assert "Warning" not in dry_run.stderr
    assert walk.webhook.reviews() == reviews
    walk.done.add("before")


def test_the_order_1_audit_admits_legacy_pods_with_a_warning_and_a_metric_and_report_lists_them(
    walk: Walk, gauge: Webhook
) -> None:
    walk.after("before")
    book, sh, kube = walk.book, walk.sh, walk.kube
    sh.ok(book.says(ORDER, "kubectl label namespace NS gpu-mode=audit"))
    warned = _warned_in_audit(kube)
    applied = sh.ok("kubectl apply -f DIR")
    assert "pod/trainer created" in applied.stdout
    assert f"namespace {NS} is in audit mode (gpu-mode=audit): would be denied" in applied.stderr
    assert FIX in applied.stderr
    assert _warned_in_audit(kube) == warned + 1
    notebook = sh.ok(NOTEBOOK)
    assert "container notebook asks for nvidia.com/gpu: 1" in notebook.stderr
    for pod in ("trainer", "notebook"):  # on the device plugin's GPUs
        assert o.scheduled(kube, NS, pod)["spec"]["nodeName"] == NODE

    # "Before you start", a policy that says what your names become: nothing `unmapped`
    sh.ok(book.says(READY, DUMP_COMMAND))
    offline = sh.ok(book.says(BEFORE, "dra-webhook report dump.json --config policy.yaml")).stdout
    row = _row(offline, NS)
    assert row[1] == "audit" and row[5:] == ["nvidia.com/gpu"]  # the mode: the dump's Namespace

    # "Is a namespace ready?", asked now: not yet, by every measure the section names
    report = book.says(READY, "dra-webhook report --kubeconfig ~/.kube/config")
    assert _row(sh.ok(report).stdout, NS) == [NS, "audit", "2", "2", "no", "nvidia.com/gpu"]
    assert book.says(READY, "report --fail-on legacy")
    assert sh.run(f"{report} --fail-on legacy").returncode == 1
    sh.ok(f"{report} {book.says(READY, '--policy-reports')}")
    assert _policy_report(walk)[2:5] == ["0", "0", "2"]  # PASS FAIL WARN: audit warns
    kube.wait(lambda: _legacy_workloads(gauge, "audit") == 2, "the gauge to read 2 in audit")
    # "When can a node's device plugin go?": not yet, these two still use it
    assert _plugin_pods(walk) == [f"{NS}/notebook", f"{NS}/trainer"]
    walk.done.add("audit")


def test_the_order_2_migrate_writes_the_dra_manifest_and_its_template_which_roll_out(
    walk: Walk,
) -> None:
    walk.after("audit")
    book, sh, kube = walk.book, walk.sh, walk.kube
    written = sh.ok(book.says(ORDER, "dra-webhook migrate --write --config policy.yaml DIR"))
    assert "rewrote" in written.stderr
    text = (walk.git / "trainer.yaml").read_text()
    assert "- name: gpu-cuda  # two whole GPUs" in text  # the comment moves with the change
    pod, template = yaml.safe_load_all(text)
    (cuda,) = pod["spec"]["containers"]
    assert cuda["resources"] == {"claims": [{"name": "gpu-cuda"}]}
    assert pod["spec"]["resourceClaims"] == [
        {"name": "gpu-cuda", "resourceClaimTemplateName": "dra-gpu-nvidia-com-2"}
    ]
    assert template["kind"] == "ResourceClaimTemplate"
    assert template["metadata"] == {"name": "dra-gpu-nvidia-com-2", "namespace": NS}  # yours
    (request,) = template["spec"]["spec"]["devices"]["requests"]
    assert (request["exactly"]["deviceClassName"], request["exactly"]["count"]) == (
        "gpu.nvidia.com",
        2,
    )

    # merged and synced: the templates go in with the workloads
    _replace(walk, "trainer")
    applied = sh.ok("kubectl apply -f DIR")
    assert "Warning" not in applied.stderr
    assert "resourceclaimtemplate.resource.k8s.io/dra-gpu-nvidia-com-2 created" in applied.stdout
    assert kube.get("Pod", "trainer", NS)["spec"]["resourceClaims"] == pod["spec"]["resourceClaims"]
    walk.done.add("migrate")


def test_the_order_2_translate_rewrites_the_notebook_git_does_not_hold(walk: Walk) -> None:
    walk.after("migrate")
    book, sh, kube = walk.book, walk.sh, walk.kube
    sh.ok(book.says(ORDER, "kubectl label namespace NS gpu-mode=translate --overwrite"))
    _replace(walk, "notebook")
    created = sh.ok(NOTEBOOK)
    assert re.search(
        r"container notebook: nvidia.com/gpu: 1 -> claim gpu-notebook "
        r"\(template dra-gpu-nvidia-com-1-[0-9a-f]+, class gpu.nvidia.com\)",
        created.stderr,
    ), created.stderr
    stored = kube.get("Pod", "notebook", NS)
    (entry,) = stored["spec"]["resourceClaims"]
    assert "nvidia.com/gpu" not in str(stored["spec"]["containers"])
    annotation = stored["metadata"]["annotations"]["dra-webhook/translated"]
    assert annotation.startswith("nvidia.com/gpu=1 -> claim gpu-notebook (template ")
    template = kube.get("ResourceClaimTemplate", entry["resourceClaimTemplateName"], NS)
    assert template["metadata"]["labels"][MANAGED] == "dra-webhook"  # no repository's
    for pod, devices in (("notebook", 1), ("trainer", 2)):
        placed = o.scheduled(kube, NS, pod)["spec"]["nodeName"]
        (claim,) = o.allocated_claims(kube, NS, pod).values()
        assert placed in NODES
        assert [pool for _, pool, _ in o.allocated_devices(claim)] == [placed] * devices
    walk.done.add("translate")


def test_is_a_namespace_ready_report_policy_reports_gauge_and_check_say_yes(
    walk: Walk, gauge: Webhook
) -> None:
    walk.after("translate")
    book, sh, kube = walk.book, walk.sh, walk.kube
    report = book.says(READY, "dra-webhook report --kubeconfig ~/.kube/config")
    table = sh.ok(report).stdout
    assert _row(table, NS) == [NS, "translate", "2", "0", "yes"]
    # --fail-on answers for the whole cluster: other namespaces may still have legacy objects
    namespaces = table.split("\n\n", 1)[0]  # the table, before the nodes and the release
    rows = [line.split() for line in namespaces.splitlines()[1:] if not line[:1].isspace()]
    everywhere = all(row[4] == "yes" for row in rows)
    assert sh.run(f"{report} --fail-on legacy").returncode == (0 if everywhere else 1)

    sh.ok(f"{report} --policy-reports")
    assert _policy_report(walk)[2:5] == ["2", "0", "0"]  # PASS FAIL WARN
    assert book.says(READY, "dra_webhook_legacy_workloads{workload_namespace, mode}")
    kube.wait(lambda: _legacy_workloads(gauge, "translate") == 0, "the gauge to read 0")

    checked = _check(walk, walk.git)
    assert checked.returncode == 0, checked.stdout
    assert "DENIED" not in checked.stdout and "-> claim" not in checked.stdout
    before = _check(walk, walk.history)  # the same check sees the legacy manifest translated
    assert "container cuda: nvidia.com/gpu: 2 -> claim gpu-cuda" in before.stdout
    walk.done.add("ready")


def test_is_a_namespace_ready_the_policy_reports_are_written_while_another_namespace_is_deleted(
    walk: Walk,
) -> None:
    """The chart's report CronJob runs hourly: a namespace being deleted at that time is not a
    reason to leave every other namespace's PolicyReport stale. The namespace being deleted is
    named on stderr, its report is not written (the API server refuses new objects there)."""
    walk.after("ready")
    kube, leaving = walk.kube, "runbook-leaving"
    kube.namespace(leaving)
    held = o.pod("held", leaving, o.pod_spec(o.container("app")))
    held["metadata"]["finalizers"] = ["example.com/held"]  # keeps the namespace terminating
    held["spec"]["schedulerName"] = "none"
    kube.create(held)
    kube.delete("Namespace", leaving)
    try:
        walk.sh.ok("kubectl -n NS delete policyreports dra-webhook-migration")  # written below
        report = walk.book.says(READY, "dra-webhook report --kubeconfig ~/.kube/config")
        done = walk.sh.run(f"{report} --policy-reports")
        assert done.returncode == 0, done.stderr
        assert "grant" not in done.stderr and "terminated" not in done.stderr, done.stderr
        assert (
            f"dra-webhook: note: namespace {leaving} is being deleted; "
            "its PolicyReport was not written"
        ) in done.stderr.splitlines()
        assert _policy_report(walk)[1:5] == ["dra-webhook-migration", "2", "0", "0"]
        assert leaving not in walk.sh.ok("kubectl get policyreports -A").stdout
    finally:  # the namespace goes once the pod has (the namespace controller, shortly)
        kube.patch("Pod", "held", leaving, {"metadata": {"finalizers": None}})


def test_the_order_3_dra_only_refuses_the_legacy_manifest_with_the_fix_and_runs_the_migrated(
    walk: Walk,
) -> None:
    walk.after("ready")
    book, sh, kube = walk.book, walk.sh, walk.kube
    sh.ok(book.says(ORDER, "kubectl label namespace NS gpu-mode=dra-only --overwrite"))
    _replace(walk, "trainer")  # a new rollout, now under dra-only

    refused = sh.run(f"kubectl apply -f {walk.history}")
    assert refused.returncode != 0
    message = " ".join(refused.stderr.split())
    assert (
        "ValidatingAdmissionPolicy 'dra-webhook-dra-only' with binding "
        "'dra-webhook-dra-only-deny' denied request" in message
    )
    assert f"namespace {NS} is dra-only (gpu-mode=dra-only)" in message
    assert FIX in message
    assert "resourceClaims:" in message and "resources: {claims: [{name: <claim>}]}" in message
    assert kube.find("Pod", "trainer", NS) is None

    sh.ok("kubectl apply -f DIR")
    placed = o.scheduled(kube, NS, "trainer")["spec"]["nodeName"]
    (claim,) = o.allocated_claims(kube, NS, "trainer").values()
    assert placed in NODES
    assert [pool for _, pool, _ in o.allocated_devices(claim)] == [placed, placed]
    assert claim["status"]["reservedFor"][0]["name"] == "trainer"

    # "Is a namespace ready?", check: no DENIED under a dra-only label (the old manifest is)
    checked = _check(walk, walk.git)
    assert checked.returncode == 0 and "DENIED" not in checked.stdout, checked.stdout
    old = _check(walk, walk.history)
    assert old.returncode == 1 and "DENIED" in old.stdout
    assert "-> use DeviceClass gpu.nvidia.com (count 2)" in old.stdout
    walk.done.add("dra-only")


def test_when_can_a_nodes_device_plugin_go_no_pod_on_it_uses_it_any_more(walk: Walk) -> None:
    walk.after("dra-only")
    assert _plugin_pods(walk) == []  # an empty answer
    # and every namespace that schedules there in dra-only
    on_node = walk.kube.list("Pod", fieldSelector=f"spec.nodeName={NODE}")
    for namespace in {p["metadata"]["namespace"] for p in on_node}:
        labels = walk.kube.get("Namespace", namespace)["metadata"].get("labels", {})
        assert labels.get("gpu-mode") == "dra-only", namespace
    walk.done.add("plugin")


def test_going_back_relabel_leaves_dra_only_at_once_and_translated_pods_keep_their_claims(
    walk: Walk,
) -> None:
    walk.after("plugin")
    kube = walk.kube

    def held() -> dict[str, list[tuple[str, list[tuple[str, str, str]]]]]:
        return {
            pod: [
                (c["metadata"]["uid"], o.allocated_devices(c))
                for c in o.allocated_claims(kube, NS, pod).values()
            ]
            for pod in ("notebook", "trainer")
        }

    claims = held()
    walk.sh.ok(walk.book.says(BACK, "kubectl label namespace NS gpu-mode=audit --overwrite"))

    legacy = o.pod("legacy", NS, o.pod_spec(o.container("cuda", limits={"nvidia.com/gpu": "2"})))

    def admitted() -> list[str] | None:
        try:
            return kube.create(legacy, dry_run=True).warnings
        except ApiError as error:
            assert "dra-only" in error.message, error.message
            return None  # the API server's namespace cache has not seen the label yet

    warnings = kube.wait(admitted, "a legacy pod to be admitted again")
    assert any(f"namespace {NS} is in audit mode" in w for w in warnings), warnings
    assert held() == claims  # what stays: translated (and migrated) pods run as they are
    walk.done.add("relabel")


def test_going_back_disable_renders_no_webhook_and_no_admission_policy(
    walk: Walk, helm: str
) -> None:
    """`helm upgrade ... --set <the runbook's values>`: what the chart renders with them (the
    suite registers the chart's templates, it installs no release)."""
    walk.after("relabel")
    row = walk.book.says(BACK, "disable (`helm upgrade ... --set ")
    table = " ".join(walk.book.section(BACK).split())
    found = re.search(re.escape(row) + r"([^`\s]+)`", table)
    assert found, row
    kinds = {d["kind"] for d in render(helm, f"--set={found.group(1)}")}
    everything = {d["kind"] for d in render(helm)}
    gone = {
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    }
    assert gone <= everything
    assert not kinds & gone  # no review reaches the webhook, the admission policy is gone
    stays = {"ConfigMap", "ClusterRole", "ClusterRoleBinding", "Deployment"}
    assert stays <= kinds  # the ConfigMap, RBAC, the Deployment
    walk.done.add("disable")


def test_going_back_uninstall_leaves_labels_templates_and_policy_reports_which_the_commands_remove(
    walk: Walk, helm: str
) -> None:
    walk.after("disable")
    book, sh, kube = walk.book, walk.sh, walk.kube
    book.says(BACK, "uninstall (`helm uninstall dra-webhook -n dra-webhook`)")
    chart = render(helm)  # every object the chart made, which uninstall removes
    assert all(d["metadata"]["labels"][MANAGED] == "Helm" for d in chart)
    made = {(d["kind"], d["metadata"]["name"]) for d in chart}
    notebook = kube.get("Pod", "notebook", NS)
    (entry,) = notebook["spec"]["resourceClaims"]
    translated = entry["resourceClaimTemplateName"]
    (claim,) = o.allocated_claims(kube, NS, "notebook").values()
    # what stays: the mode label, the template translation created, the PolicyReport
    assert kube.get("Namespace", NS)["metadata"]["labels"]["gpu-mode"] == "audit"
    assert ("ResourceClaimTemplate", translated) not in made
    assert ("PolicyReport", "dra-webhook-migration") not in made
    assert _policy_report(walk)[1] == "dra-webhook-migration"

    commands = [
        line.split("#")[0].strip()
        for line in book.block(BACK).splitlines()
        if line.split("#")[0].strip()
    ]
    assert [c.split()[:2] for c in commands] == [
        ["kubectl", "get"], ["kubectl", "delete"], ["kubectl", "delete"], ["kubectl", "label"],
    ], f"the runbook's cleanup changed: walk it here\n{commands}"  # fmt: skip
    listed, templates, reports, label = commands

    rows = [line.split()[:2] for line in sh.ok(listed).stdout.splitlines()[1:]]
    assert [NS, translated] in rows
    assert [NS, "dra-gpu-nvidia-com-2"] not in rows  # migrate's templates are yours

    sh.ok(templates)  # once no pod refers to them: the notebook's claim is its own
    assert kube.find("ResourceClaimTemplate", translated, NS) is None
    assert kube.find("ResourceClaimTemplate", "dra-gpu-nvidia-com-2", NS) is not None
    after = kube.get("ResourceClaim", claim["metadata"]["name"], NS)
    assert after["metadata"]["uid"] == claim["metadata"]["uid"]
    assert o.allocated_devices(after) == o.allocated_devices(claim)

    sh.ok(reports)
    assert NS not in sh.ok("kubectl get policyreports -A").stdout

    reviews = walk.webhook.reviews()
    sh.ok(label)
    assert "gpu-mode" not in kube.get("Namespace", NS)["metadata"].get("labels", {})
    legacy = o.pod("legacy", NS, o.pod_spec(o.container("cuda", limits={"nvidia.com/gpu": "2"})))
    kube.wait(lambda: not kube.create(legacy, dry_run=True).warnings, "no audit warning any more")
    assert walk.webhook.reviews() == reviews  # the namespace is not sent to the webhook
