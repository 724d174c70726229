"""`report` counts the group claims of Workloads and PodGroups: one claim shared by every pod of
the group, with the devices of the template it names."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from app.cli import main
from tests.claim_objects import exact, template
from tests.helpers import namespace

Obj = dict[str, Any]
NS = "ml-team"


def _group(kind: str, entry: Obj) -> Obj:
    if kind == "PodGroup":
        spec: Obj = {"resourceClaims": [entry]}
    else:
        spec = {"podGroupTemplates": [{"name": "workers", "resourceClaims": [entry]}]}
    return {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": kind,
            "metadata": {"name": "trainer", "namespace": NS}, "spec": spec}  # fmt: skip


def _report(tmp_path: Path, capsys: pytest.CaptureFixture[str], *items: Obj, output: str) -> str:
    dump = tmp_path / "dump.json"
    dump.write_bytes(orjson.dumps({"apiVersion": "v1", "kind": "List", "items": list(items)}))
    assert main(["report", "--output", output, str(dump)]) == 0
    return capsys.readouterr().out


def test_a_pod_group_and_a_workload_are_counted_with_their_group_claims_devices(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    entry = {"name": "gpus", "resourceClaimTemplateName": "four-gpus"}
    items = (
        namespace(NS, "audit"),
        template("four-gpus", exact(count=4), namespace=NS),
        _group("PodGroup", entry),
        _group("Workload", entry),
    )
    (row,) = orjson.loads(_report(tmp_path, capsys, *items, output="json"))
    assert row["group_claims"] == [
        "PodGroup/trainer: spec.resourceClaims[0].resourceClaimTemplateName: group claim gpus "
        "(template four-gpus): 4 devices of gpu.nvidia.com, one claim shared by the group's pods",
        "Workload/trainer: spec.podGroupTemplates[0].resourceClaims[0].resourceClaimTemplateName: "
        "group claim gpus (template four-gpus): 4 devices of gpu.nvidia.com, one claim shared by "
        "the group's pods for each PodGroup made from it",
    ]
    text = _report(tmp_path, capsys, *items, output="text")
    assert "  group claim: PodGroup/trainer: spec.resourceClaims[0]" in text


def test_a_malformed_group_claim_is_reported_invalid_with_its_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    odd = _group("PodGroup", {"name": "gpus", "resourceClaimName": 7})
    (row,) = orjson.loads(_report(tmp_path, capsys, namespace(NS), odd, output="json"))
    assert row["invalid"] == [
        "PodGroup/trainer: spec.resourceClaims[0].resourceClaimName: must be a string"
    ]
