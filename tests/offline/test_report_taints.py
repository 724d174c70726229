"""`report` on a dump or a cluster file: the DeviceTaintRules in force and what each evicts or
keeps off, in text and JSON (the same words as the admission warning)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from app.cli import main
from tests.policies import taint_objects as t

Obj = dict[str, Any]
NODE_A = {"pool": "node-a", "driver": t.DRIVER}


def _dump(tmp_path: Path, *items: Obj) -> Path:
    path = tmp_path / "dump.json"
    path.write_bytes(orjson.dumps({"apiVersion": "v1", "kind": "List", "items": list(items)}))
    return path


def test_the_text_report_lists_each_rule_and_each_namespace_what_it_loses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dump = _dump(
        tmp_path,
        *t.cluster(),
        t.rule("drain-a", NODE_A, version="v1beta2"),
        t.rule("soft-b", {"pool": "node-b"}, "NoSchedule"),
        t.rule("broken", {"pool": 7}),
    )
    assert main(["report", str(dump)]) == 0
    out = capsys.readouterr().out
    assert (
        "DeviceTaintRule drain-a (example.com/maintenance:NoExecute; driver gpu.example.com, "
        "pool node-a): would evict 3 pods in 1 namespace: ml-a (3: a-0, a-1, a-2)"
    ) in out
    assert (
        "DeviceTaintRule soft-b (example.com/maintenance:NoSchedule; pool node-b): would keep"
        in (out)
    )
    assert "DeviceTaintRule broken: not read: spec.deviceSelector.pool: must be a string" in out
    assert (
        "  device taint: DeviceTaintRule drain-a (example.com/maintenance:NoExecute) evicts "
        "a-0, a-1, a-2"
    ) in out
    assert (
        "  device taint: DeviceTaintRule soft-b (example.com/maintenance:NoSchedule) keeps the "
        "devices of c-0"
    ) in out


def test_the_json_report_gives_each_namespace_its_part_and_the_rules_beside_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dump = _dump(tmp_path, *t.cluster(), t.rule("drain-a", NODE_A))
    assert main(["report", "--output", "json", str(dump)]) == 0
    captured = capsys.readouterr()
    rows = {row["namespace"]: row for row in orjson.loads(captured.out)}
    assert rows["ml-a"]["device_taints"] == [
        "DeviceTaintRule drain-a (example.com/maintenance:NoExecute) evicts a-0, a-1, a-2"
    ]
    assert "dra-webhook: note: DeviceTaintRule drain-a (" in captured.err


def test_rules_in_the_cluster_file_count_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(yaml.safe_dump_all([*t.cluster(), t.rule("from-file", {"pool": "node-b"})]))
    dump = _dump(tmp_path, *t.cluster())
    assert main(["report", "--cluster-file", str(cluster), str(dump)]) == 0
    assert "DeviceTaintRule from-file (" in capsys.readouterr().out
