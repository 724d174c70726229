"""`report` on a dump: the dump's own Namespaces, Nodes and DeviceClasses are the cluster view,
over `--cluster-file`'s; the embedded demo cluster is never used for it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from app.cli import main
from app.cli.parser import DUMP_COMMAND
from tests.helpers import ROOT, namespace

Obj = dict[str, Any]
GPU = "nvidia.com/gpu"


def _pod(name: str, ns: str, resource: str = GPU, node: str | None = None) -> Obj:
    spec: Obj = {"containers": [{"name": "c", "resources": {"limits": {resource: "1"}}}]}
    if node is not None:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
            "spec": spec, "status": {"phase": "Running"}}  # fmt: skip


def _dump(tmp_path: Path, *items: Obj) -> Path:
    path = tmp_path / "dump.json"
    path.write_bytes(orjson.dumps({"apiVersion": "v1", "kind": "List", "items": list(items)}))
    return path


def _rows(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[dict[str, Obj], str]:
    assert main(["report", "--output", "json", *args]) == 0
    captured = capsys.readouterr()
    return {row["namespace"]: row for row in orjson.loads(captured.out)}, captured.err


def test_a_dump_s_namespaces_are_judged_by_their_own_labels_never_the_demo_cluster_s(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dump = _dump(
        tmp_path,
        namespace("prod-ml", "dra-only"),
        namespace("gpu-e2e"),  # dra-only in the demo cluster; unlabelled in this one
        _pod("trainer", "prod-ml"),
        _pod("web", "gpu-e2e"),
    )
    rows, err = _rows(capsys, str(dump))
    assert set(rows) == {"prod-ml", "gpu-e2e"}
    assert rows["prod-ml"]["mode"] == "dra-only"
    assert rows["gpu-e2e"]["mode"] == "-"
    assert err == ""  # every namespace known: no note


def test_a_dump_without_namespaces_says_in_one_line_that_no_mode_is_known(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dump = _dump(tmp_path, _pod("trainer", "ml-audit"), _pod("web", "prod-ml"))
    rows, err = _rows(capsys, str(dump))
    assert {ns: row["mode"] for ns, row in rows.items()} == {"ml-audit": "-", "prod-ml": "-"}
    assert err.splitlines() == [
        "dra-webhook: note: the dump holds no Namespaces, so no namespace's mode is known "
        f"(MODE -): include namespaces in the dump ({DUMP_COMMAND})"
    ]
    assert main(["report", "--nodes", str(dump)]) == 0  # per node: no mode to miss
    assert "note: the dump holds no Namespaces" not in capsys.readouterr().err


def test_namespaces_neither_the_dump_nor_the_cluster_file_holds_are_named_in_the_note(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(yaml.safe_dump_all([namespace("from-file", "audit"), namespace("both")]))
    dump = _dump(
        tmp_path,
        namespace("both", "translate"),  # the dump's object wins over the file's
        _pod("a", "from-file"),
        _pod("b", "both"),
        _pod("c", "elsewhere"),
        _pod("d", "nowhere"),
    )
    rows, err = _rows(capsys, "--cluster-file", str(cluster), str(dump))
    assert {ns: row["mode"] for ns, row in rows.items()} == {
        "both": "translate", "elsewhere": "-", "from-file": "audit", "nowhere": "-"
    }  # fmt: skip
    assert err.splitlines() == [
        "dra-webhook: note: mode unknown (MODE -) for 2 namespaces not in the dump or the "
        "cluster file: elsewhere, nowhere"
    ]


def test_a_dump_s_device_classes_map_its_names_and_its_nodes_give_the_device_plugins(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    gaudi = "habana.ai/gaudi"
    pods = [namespace("ml", "audit"), _pod("g", "ml", gaudi, node="gaudi-1")]
    rows, _ = _rows(capsys, str(_dump(tmp_path, *pods)))
    assert rows["ml"]["unmapped"] == [gaudi]
    device_class = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "gaudi.habana.ai"},
        "spec": {"extendedResourceName": gaudi},
    }
    gaudi_node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gaudi-1"},
                  "status": {"allocatable": {gaudi: "8"}}}  # fmt: skip
    rows, _ = _rows(capsys, str(_dump(tmp_path, *pods, device_class, gaudi_node)))
    assert rows["ml"]["unmapped"] == []
    assert main(["report", "--nodes", "--output", "json", str(tmp_path / "dump.json")]) == 0
    assert orjson.loads(capsys.readouterr().out) == [
        {"node": "gaudi-1", "devicePlugin": {gaudi: {"allocatable": "8", "runningPods": 1}},
         "removable": False}
    ]  # fmt: skip


def test_a_dump_s_cluster_object_without_a_name_is_said_where_it_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dump = _dump(tmp_path, {"apiVersion": "v1", "kind": "Namespace", "metadata": {}})
    assert main(["report", str(dump)]) == 2
    assert capsys.readouterr().err == (
        f"dra-webhook: {dump}#0 (Namespace): object has no metadata.name\n"
    )


@pytest.mark.parametrize("doc", ["README.md", "docs/runbook.md"])
def test_the_docs_give_the_dump_command_report_names(doc: str) -> None:
    text = " ".join((ROOT / doc).read_text().split())
    assert DUMP_COMMAND in text
    assert "kubectl get pods,deployments" not in text  # the old dump, without namespaces
