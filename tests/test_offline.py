"""`dra-webhook check` and `dra-webhook report`: the pipeline over files, no cluster."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from app import offline
from app.cli import main
from tests.dra_only_cases import EXCEPTIONS
from tests.helpers import FIXTURES, ROOT, make_view, namespace, policy_from

EXAMPLES = ROOT / "examples" / "manifests.yaml"
GPU = "nvidia.com/gpu"


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(list(args))
    return code, capsys.readouterr().out


def test_check_prints_each_decision_and_fails_when_anything_is_denied(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out = run(capsys, "check", str(EXAMPLES))
    assert code == 1
    assert "Pod gpu-e2e/trainer (" in out
    assert "): DENIED" in out
    assert "spec.initContainers[0].resources.limits[nvidia.com/gpu]" in out
    assert "Deployment ml-audit/inference" in out
    assert (
        "warning: spec.template.spec.containers[0].resources.limits[nvidia.com/mig-1g.10gb]: "
        "container server asks for nvidia.com/mig-1g.10gb: 1" in out
    )
    assert "Pod gpu-e2e/web" in out


def test_check_as_json_and_on_captured_admission_reviews(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out = run(
        capsys,
        "check",
        "--output",
        "json",
        str(FIXTURES / "pod-create-legacy-gpu.json"),
        str(FIXTURES / "pod-create-with-resourceclaims.json"),
    )
    results: list[dict[str, Any]] = orjson.loads(out)
    assert code == 1
    assert [(r["name"], r["namespace"], r["allowed"]) for r in results] == [
        ("gpu-pod", "gpu-e2e", False),
        ("claim-pod", "gpu-e2e", True),
    ]


def test_check_passes_when_everything_is_allowed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = tmp_path / "ok.yaml"
    manifest.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "p", "namespace": "gpu-e2e"},
                "spec": {"containers": [{"name": "c", "image": "x"}]},
            }
        )
    )
    assert run(capsys, "check", str(manifest))[0] == 0


def test_check_reports_an_unreadable_manifest_plainly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("- just: a list\n")
    assert main(["check", str(bad)]) == 2
    assert "object 0 has no kind" in capsys.readouterr().err


def _gpu_pod_yaml(name: str, namespace: str) -> str:
    return yaml.safe_dump(_pod(name, namespace, {GPU: "1"}))


@pytest.mark.parametrize(
    ("bad", "said"),
    [
        (
            b"kind: Pod\nmetadata:\n  name: bad\n   namespace: x\n",
            "c.yaml:4:13: not valid YAML: a `:` where no mapping can start: quote a value "
            "holding `: `, or check the indentation",
        ),
        (
            b"kind: Pod\nmetadata: {name: caf\xe9}\n",
            "c.yaml: not UTF-8 text (byte 0xe9 at offset 30)",
        ),
        (b"- just: a list\n", "c.yaml: object 0 has no kind"),
        (b"kind: Pod\n---\nmetadata: {}\n", "c.yaml: object 1 has no kind"),
    ],
)
def test_check_judges_every_good_file_of_a_folder_and_lists_each_bad_one(
    bad: bytes,
    said: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    for name in "abd":
        (tmp_path / f"{name}.yaml").write_text(_gpu_pod_yaml(f"pod-{name}", "ml-audit"))
    (tmp_path / "c.yaml").write_bytes(bad)
    code = main(["check", "."])
    out, err = capsys.readouterr()
    assert [line for line in out.splitlines() if not line.startswith(" ")] == [
        f"Pod ml-audit/pod-{name} ({name}.yaml#0): allowed" for name in "abd"
    ]
    assert err.splitlines() == [f"check: not judged: {said}"]
    assert code == 2


def test_check_lists_every_file_it_cannot_judge_in_order_and_exits_2_over_a_denial(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    Path("apps").mkdir()
    Path("apps/denied.yaml").write_text(_gpu_pod_yaml("trainer", "gpu-e2e"))
    Path("apps/list.yaml").write_text("items: [\n")
    Path("apps/tabs.yaml").write_text("kind: Pod\nmetadata:\n\tname: x\n")
    code = main(["check", "--output", "json", "apps", "missing.yaml"])
    out, err = capsys.readouterr()
    assert [(r["name"], r["allowed"]) for r in orjson.loads(out)] == [("trainer", False)]
    assert err.splitlines() == [
        "check: not judged: apps/list.yaml:2:1: not valid YAML: the text ends where a value "
        "should follow (a `[` or `{` left open?)",
        "check: not judged: apps/tabs.yaml:3:1: not valid YAML: a tab: YAML indents with "
        "spaces only",
        "check: not judged: missing.yaml: No such file or directory",
    ]
    assert code == 2


def _pod(name: str, ns: str, resources: dict[str, str], owner: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": ns}
    if owner:
        meta["ownerReferences"] = [{"kind": "ReplicaSet", "name": owner}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {"containers": [{"name": "c", "resources": {"limits": resources}}]},
    }


def test_report_says_which_namespaces_are_ready_for_dra_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    replica_set = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": "rs", "namespace": "ml-audit"},
        "spec": {
            "template": {
                "spec": {
                    "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]
                }
            }
        },
    }
    dump = {
        "apiVersion": "v1",
        "kind": "List",
        "items": [
            namespace("ml-audit", "audit"),  # the mode is the dump's own Namespace's
            replica_set,
            _pod("rs-a", "ml-audit", {"nvidia.com/gpu": "1"}, owner="rs"),
            _pod("rs-b", "ml-audit", {"nvidia.com/gpu": "1"}, owner="rs"),
            _pod("clean", "ml-research", {"cpu": "1"}),
            _pod("gaudi", "default", {"habana.ai/gaudi": "1"}),
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "broken", "namespace": "ml-research"},
                "spec": {"containers": "nope"},
            },
        ],
    }
    path = tmp_path / "dump.json"
    path.write_bytes(orjson.dumps(dump))
    code, out = run(capsys, "report", "--output", "json", str(path))
    assert code == 0
    rows = {row["namespace"]: row for row in orjson.loads(out)}
    assert rows["ml-audit"]["legacy_objects"] == ["ReplicaSet/rs"]  # its pods are not counted twice
    assert rows["ml-audit"]["readyForDraOnly"] is False
    assert rows["ml-audit"]["mode"] == "audit"
    assert rows["default"]["unmapped"] == ["habana.ai/gaudi"]
    assert rows["ml-research"]["legacy_objects"] == []
    assert rows["ml-research"]["invalid"] == ["Pod/broken: spec.containers: must be a list"]
    code, text = run(capsys, "report", str(path))
    assert "habana.ai/gaudi (unmapped)" in text


def test_report_lists_the_objects_an_exception_covers_and_until_when() -> None:
    policy = policy_from(yaml.safe_dump({"exceptions": EXCEPTIONS}))
    view = make_view([namespace("team", "audit", exceptions="allowed")])
    vendor = _pod("vendor", "team", {"nvidia.com/gpu": "1"})
    vendor["metadata"]["labels"] = {"exception": "vendor"}
    ended = _pod("old", "team", {"nvidia.com/gpu": "1"})
    ended["metadata"]["labels"] = {"exception": "ended"}
    objects = [("dump#0", vendor), ("dump#1", ended)]
    now = dt.datetime(2999, 12, 20, tzinfo=dt.UTC)
    (row,) = offline.report(policy, view, objects, clock=lambda: now)
    assert row.legacy_objects == ["Pod/vendor", "Pod/old"]
    assert row.excepted == {
        "Pod/vendor": "vendor-image until 2999-12-31 (end of day UTC, 11 days left)"
    }
    assert not row.ready_for_dra_only  # Pod/old: its exception ended
    (row,) = offline.report(policy, view, objects[:1], clock=lambda: now)
    assert row.ready_for_dra_only
    later = dt.datetime(3000, 1, 1, tzinfo=dt.UTC)
    (row,) = offline.report(policy, view, objects[:1], clock=lambda: later)
    assert row.excepted == {} and not row.ready_for_dra_only


def test_check_reads_folders_recursively_leaving_hidden_ones_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "apps" / "gpu").mkdir(parents=True)
    (tmp_path / ".git").mkdir()
    (tmp_path / "apps" / "gpu" / "all.yaml").write_text(EXAMPLES.read_text())
    (tmp_path / ".git" / "old.yaml").write_text(EXAMPLES.read_text())
    (tmp_path / "apps" / "README.md").write_text("not a manifest")
    code, out = run(capsys, "check", str(tmp_path))
    assert code == 1
    assert out.count("Pod gpu-e2e/trainer (") == 1
    assert f"{tmp_path / 'apps' / 'gpu' / 'all.yaml'}#0" in out


def test_check_says_when_no_mode_applies_to_the_namespace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pods = tmp_path / "pods.yaml"
    legacy = {"containers": [{"name": "c", "image": "x", "resources": {"limits": {GPU: "1"}}}]}
    pods.write_text(
        yaml.safe_dump_all(
            [
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": "a", "namespace": ns},
                    "spec": legacy,
                }
                for ns in ("default", "nowhere", "gpu-e2e")
            ]
        )
    )
    code, out = run(capsys, "check", str(pods))
    assert code == 1  # gpu-e2e is dra-only
    verdicts = [line for line in out.splitlines() if line.startswith("Pod ")]
    assert [line.rsplit(": ", 1)[1] for line in verdicts] == ["allowed", "allowed", "DENIED"]
    assert "note: namespace default has no gpu-mode label: only quotas and admin rules apply" in out
    # offline, a namespace the cluster file lacks is one without a mode: not a webhook that
    # failed closed (failure.unknownNamespace is about the live view lagging the API server)
    nowhere = out.split("Pod nowhere/a", 1)[1].split("Pod gpu-e2e/a", 1)[0]
    assert nowhere.splitlines()[0].endswith(": allowed"), nowhere
    assert "note: namespace nowhere is not in the cluster file: no mode applies" in nowhere
    assert "fail closed" not in out and "cluster view" not in out
    assert out.count("note:") == 2

    code, out = run(capsys, "check", "--output", "json", str(pods))
    results = orjson.loads(out)
    assert [(r["namespace"], r["allowed"]) for r in results] == [
        ("default", True), ("nowhere", True), ("gpu-e2e", False)
    ]  # fmt: skip


def test_check_with_the_chart_s_configmap_warns_in_audit_namespaces_as_no_admission_policy_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The chart's ConfigMap says auditWarnedByAdmissionPolicy when its admission policy warns
    in audit namespaces; offline there is none, so check warns itself."""
    configmap = tmp_path / "configmap.yaml"
    configmap.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "dra-webhook-policy", "namespace": "dra-webhook"},
                "data": {"policy.yaml": "draOnly:\n  auditWarnedByAdmissionPolicy: true\n"},
            }
        )
    )
    pod = tmp_path / "pod.yaml"
    legacy = {"containers": [{"name": "c", "image": "x", "resources": {"limits": {GPU: "1"}}}]}
    pod.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "a", "namespace": "ml-audit"},
                "spec": legacy,
            }
        )
    )
    code, out = run(capsys, "check", "--config", str(configmap), str(pod))
    assert code == 0
    assert "Pod ml-audit/a (" in out and out.splitlines()[0].endswith(": allowed")
    assert (
        "warning: spec.containers[0].resources.limits[nvidia.com/gpu]: container c asks for "
        "nvidia.com/gpu: 1: would be denied in a dra-only namespace (gpu-mode=audit)"
    ) in out


@pytest.mark.parametrize(("fail_on", "code"), [(None, 0), ("legacy", 1), ("excepted", 1)])
def test_report_fail_on_gives_ci_an_exit_code(
    fail_on: str | None, code: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["report", str(EXAMPLES)] + (["--fail-on", fail_on] if fail_on else [])
    assert run(capsys, *argv)[0] == code


@pytest.mark.parametrize(
    ("report", "legacy", "excepted"),
    [
        (offline.NamespaceReport("ns", "audit"), False, False),
        (
            offline.NamespaceReport(
                "ns", "audit", legacy_objects=["Pod/a"], excepted={"Pod/a": "vendor until x"}
            ),
            False,
            True,
        ),
        (offline.NamespaceReport("ns", "audit", legacy_objects=["Pod/a"]), True, True),
        (
            offline.NamespaceReport(
                "ns", "audit", legacy_objects=["TrainJob/t"], unrewritable=["TrainJob/t: ..."]
            ),
            True,
            True,
        ),
        (offline.NamespaceReport("ns", "audit", invalid=["Pod/a: spec: ..."]), True, True),
    ],
    ids=["clean", "all excepted", "legacy", "not rewritable", "invalid"],
)
def test_fail_on_legacy_spares_what_an_exception_allows_and_excepted_does_not(
    report: offline.NamespaceReport, legacy: bool, excepted: bool
) -> None:
    from app.cli.commands import failing as _failing

    assert _failing([report], None) is False
    assert _failing([report], "legacy") is legacy
    assert _failing([report], "excepted") is excepted
