"""What `migrate` prints, writes and returns over several files."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from tests.migrate.helpers import GOLDEN, Run

GPU_POD = """\
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: ml
spec:
  containers:
  - name: app
    image: x
    resources:
      limits:
        nvidia.com/gpu: {count}
"""


def _templates(text: str) -> list[str]:
    return [
        d["metadata"]["name"]
        for d in yaml.safe_load_all(text)
        if d and d["kind"] == "ResourceClaimTemplate"
    ]


def test_nothing_to_change_exits_0_and_prints_nothing(
    tmp_path: Path, migrate: Callable[..., Run]
) -> None:
    (tmp_path / "a.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n")
    assert migrate("a.yaml") == Run(0, "", "")


def test_a_template_two_files_use_is_written_once_next_to_the_first(
    tmp_path: Path, migrate: Callable[..., Run]
) -> None:
    (tmp_path / "apps").mkdir()
    (tmp_path / "apps" / "a.yaml").write_text(GPU_POD.format(name="a", count=1))
    (tmp_path / "apps" / "b.yaml").write_text(GPU_POD.format(name="b", count=1))
    assert migrate("--write", "apps").code == 0
    assert _templates((tmp_path / "apps" / "a.yaml").read_text()) == ["dra-gpu-nvidia-com-1"]
    assert _templates((tmp_path / "apps" / "b.yaml").read_text()) == []
    assert migrate("--diff", "apps") == Run(0, "", "")


def test_templates_out_collects_the_templates_and_a_later_run_reuses_them(
    tmp_path: Path, migrate: Callable[..., Run]
) -> None:
    (tmp_path / "a.yaml").write_text(GPU_POD.format(name="a", count=2))
    assert migrate("--write", "--templates-out", "templates.yaml", "a.yaml").code == 0
    assert _templates((tmp_path / "a.yaml").read_text()) == []
    assert _templates((tmp_path / "templates.yaml").read_text()) == ["dra-gpu-nvidia-com-2"]

    (tmp_path / "b.yaml").write_text(GPU_POD.format(name="b", count=2))
    (tmp_path / "c.yaml").write_text(GPU_POD.format(name="c", count=4))
    assert migrate("--write", "--templates-out", "templates.yaml", "b.yaml", "c.yaml").code == 0
    assert _templates((tmp_path / "templates.yaml").read_text()) == [
        "dra-gpu-nvidia-com-2",
        "dra-gpu-nvidia-com-4",
    ]


def test_a_readable_name_taken_by_other_content_gets_the_content_hash(
    tmp_path: Path, migrate: Callable[..., Run]
) -> None:
    (tmp_path / "mine.yaml").write_text(
        "apiVersion: resource.k8s.io/v1\nkind: ResourceClaimTemplate\n"
        "metadata: {name: dra-gpu-nvidia-com-1, namespace: ml}\n"
        "spec: {spec: {devices: {requests: [{name: gpu, exactly: "
        "{deviceClassName: gpu.nvidia.com, allocationMode: All}}]}}}\n"
    )
    (tmp_path / "pod.yaml").write_text(GPU_POD.format(name="a", count=1))
    assert migrate("--write", ".").code == 0
    (name,) = _templates((tmp_path / "pod.yaml").read_text())
    assert (
        name.startswith("dra-gpu-nvidia-com-1-") and len(name) == len("dra-gpu-nvidia-com-1-") + 10
    )


def test_a_change_and_a_problem_together_exit_2_and_the_change_is_still_shown(
    tmp_path: Path, migrate: Callable[..., Run]
) -> None:
    (tmp_path / "a.yaml").write_text(GPU_POD.format(name="a", count=1))
    (tmp_path / "b.yaml").write_text(GPU_POD.format(name="b", count="1.5"))
    run = migrate("a.yaml", "b.yaml")
    assert run.code == 2
    assert "+++ b/a.yaml" in run.stdout and "b.yaml" not in run.stdout
    assert run.stderr == (
        "migrate: not translated: b.yaml#0 (Pod ml/b): spec.containers[0].resources.limits"
        "[nvidia.com/gpu]: 1.5 is not a whole number: nvidia.com/gpu is counted in whole devices\n"
    )


def test_an_absolute_path_gets_git_s_diff_headers_without_a_doubled_slash(
    tmp_path: Path, migrate: Callable[..., Run]
) -> None:
    (tmp_path / "a.yaml").write_text(GPU_POD.format(name="a", count=1))
    run = migrate(str(tmp_path / "a.yaml"))
    assert run.code == 1
    inside = tmp_path.as_posix().lstrip("/")
    headers = [line for line in run.stdout.splitlines() if line.startswith(("--- ", "+++ "))]
    assert headers[:2] == [f"--- a/{inside}/a.yaml", f"+++ b/{inside}/a.yaml"]
    assert not any("//" in line for line in headers), headers


def test_a_pod_over_the_claim_cap_is_reported_and_left_alone(
    tmp_path: Path, migrate: Callable[..., Run]
) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text("translation:\n  maxClaimsPerPod: 1\n")
    containers = "".join(
        f"  - name: c{i}\n    image: x\n    resources: {{limits: {{nvidia.com/gpu: 1}}}}\n"
        for i in range(2)
    )
    text = f"apiVersion: v1\nkind: Pod\nmetadata: {{name: p}}\nspec:\n  containers:\n{containers}"
    (tmp_path / "p.yaml").write_text(text)
    run = migrate("--config", "policy.yaml", "--write", "p.yaml")
    assert run.code == 2
    assert (
        "p.yaml#0 (Pod p): spec: translating this pod needs more than 1 resource claims"
        in run.stderr
    )
    assert (tmp_path / "p.yaml").read_text() == text


def test_a_file_that_is_not_yaml_is_reported_with_its_name(
    tmp_path: Path, migrate: Callable[..., Run]
) -> None:
    (tmp_path / "bad.yaml").write_text("containers: [unclosed\n")
    run = migrate("bad.yaml")
    assert run.code == 2
    assert run.stderr.startswith(
        "migrate: not translated: bad.yaml:2:1: not valid YAML: the `[` at line 1, column 13 "
        "is never closed with `]`"
    )


def test_a_document_that_is_not_yaml_is_placed_at_its_line_of_the_file(
    tmp_path: Path, migrate: Callable[..., Run]
) -> None:
    (tmp_path / "p.yaml").write_text(
        "kind: ConfigMap\nmetadata: {name: a}\n---\nkind: Pod\nmetadata: {name: p}\nspec:\n"
        "  containers:\n  - name: c\n    resources: {limits: {nvidia.com/gpu: 1}}\n    name: d\n"
    )
    run = migrate("p.yaml")
    assert run.code == 2
    assert run.stderr.splitlines() == [
        "migrate: not translated: p.yaml:10:5: not valid YAML: key `name` appears twice in one "
        "mapping"
    ]


def test_a_file_that_cannot_be_read_is_listed_and_the_others_translated(
    tmp_path: Path, migrate: Callable[..., Run]
) -> None:
    (tmp_path / "latin.yaml").write_bytes(b"kind: Pod\nmetadata: {name: caf\xe9}\n")
    (tmp_path / "p.yaml").write_text(
        "kind: Pod\nmetadata: {name: p, namespace: ml}\nspec:\n  containers:\n  - name: c\n"
        "    resources: {limits: {nvidia.com/gpu: 1}}\n"
    )
    run = migrate(".")
    assert run.code == 2
    assert "+++ b/p.yaml" in run.stdout
    assert run.stderr.splitlines() == [
        "migrate: not translated: latin.yaml: not UTF-8 text (byte 0xe9 at offset 30)"
    ]


def test_a_malformed_object_is_reported_with_the_field_path(
    tmp_path: Path, migrate: Callable[..., Run]
) -> None:
    (tmp_path / "bad.yaml").write_text("kind: Pod\nmetadata: {name: p}\nspec:\n  containers: 3\n")
    run = migrate("bad.yaml")
    assert (run.code, run.stdout) == (2, "")
    assert "bad.yaml#0 (Pod p): spec.containers: must be a list" in run.stderr


def test_a_single_json_object_gets_its_templates_in_a_list_beside_it(
    tmp_path: Path, migrate: Callable[..., Run]
) -> None:
    pod = yaml.safe_load(GPU_POD.format(name="a", count=1))
    (tmp_path / "pod.json").write_text(json.dumps(pod))
    assert migrate("--write", "pod.json").code == 0
    beside = yaml.safe_load((tmp_path / "pod.claimtemplates.json").read_text())
    assert [t["metadata"]["name"] for t in beside["items"]] == ["dra-gpu-nvidia-com-1"]
    assert migrate("--diff", ".") == Run(0, "", "")


def test_write_and_diff_are_exclusive(migrate: Callable[..., Run]) -> None:
    with pytest.raises(SystemExit):
        migrate("--write", "--diff", "x.yaml")


POD_SPEC = {"containers": [{"name": "app", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}


def _wrapped(kind: str) -> dict[str, object]:
    from tests.specs import BUILT_IN, spec_parts

    node: dict[str, object] = POD_SPEC
    for part in reversed(spec_parts(kind)):
        node = {part: node}
    api_version = f"{BUILT_IN[kind]}/v1".lstrip("/")
    return {"apiVersion": api_version, "kind": kind, "metadata": {"name": "x"}, **node}


@pytest.mark.parametrize(
    "kind",
    [
        "Pod",
        "PodTemplate",
        "ReplicationController",
        "ReplicaSet",
        "Deployment",
        "StatefulSet",
        "DaemonSet",
        "Job",
        "CronJob",
    ],
)
def test_every_pod_bearing_kind_is_rewritten(
    kind: str, tmp_path: Path, migrate: Callable[..., Run]
) -> None:
    (tmp_path / "x.yaml").write_text(yaml.safe_dump(_wrapped(kind)))
    assert migrate("--write", "x.yaml").code == 0
    written = list(yaml.safe_load_all((tmp_path / "x.yaml").read_text()))
    assert [d["kind"] for d in written] == [kind, "ResourceClaimTemplate"]
    assert "nvidia.com/gpu" not in (tmp_path / "x.yaml").read_text()


def _pod(name: str, gpus: int = 1) -> str:
    return (
        f"apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  containers:\n"
        f"  - name: app\n    image: x\n    resources:\n      limits:\n"
        f"        nvidia.com/gpu: {gpus}\n"
    )


def test_a_file_using_a_template_written_only_into_another_folder_is_warned_about(
    tmp_path: Path, migrate: Callable[..., Run]
) -> None:
    (tmp_path / "apps" / "a").mkdir(parents=True)
    (tmp_path / "apps" / "b").mkdir()
    (tmp_path / "apps" / "a" / "one.yaml").write_text(_pod("one"))
    (tmp_path / "apps" / "a" / "two.yaml").write_text(_pod("two"))
    (tmp_path / "apps" / "b" / "three.yaml").write_text(_pod("three"))

    run = migrate("--diff", "apps")

    assert run.code == 1  # a warning does not change the exit code
    (line,) = run.stderr.splitlines()
    assert line.startswith("migrate: warning: apps/b/three.yaml: references ResourceClaimTemplate")
    assert "wrote only into apps/a/one.yaml" in line
    assert "apps/a/two.yaml" not in run.stderr  # same folder as the template: applied with it


def test_a_removed_core_limit_is_warned_about_on_stderr_and_keeps_the_exit_code(
    tmp_path: Path, migrate: Callable[..., Run]
) -> None:
    (tmp_path / "p.yaml").write_text(
        _pod("p").replace(
            "nvidia.com/gpu: 1\n", "nvidia.com/gpu: 1\n        nvidia.com/gpucores: 30\n"
        )
    )
    run = migrate("--diff", "p.yaml")
    assert run.code == 1
    (line,) = run.stderr.splitlines()
    assert line.startswith("migrate: warning: p.yaml#0 (Pod p): container app: nvidia.com/gpucores")
    assert "removed" in line


def test_a_manifest_asking_only_for_zero_gpus_loses_the_zero_and_gets_no_claim(
    tmp_path: Path, migrate: Callable[..., Run]
) -> None:
    (tmp_path / "p.yaml").write_text(_pod("p", gpus=0))
    run = migrate("--write", "p.yaml")
    assert run.code == 0, run.stderr
    text = (tmp_path / "p.yaml").read_text()
    assert "nvidia.com/gpu" not in text
    assert "ResourceClaimTemplate" not in text and "claims" not in text


CLUSTER = GOLDEN / "leave-mapped.cluster.yaml"
"""A class that maps nvidia.com/gpu (spec.extendedResourceName)."""
LEFT = (
    "migrate: left to the scheduler: a.yaml#0 (Pod ml/a): spec.containers[0].resources.limits"
    "[nvidia.com/gpu]: 2: DeviceClass gpu.nvidia.com maps it (extendedResourceName)\n"
)


@pytest.mark.parametrize(
    ("policy", "args"),
    [
        pytest.param("", ("--leave-mapped",), id="--leave-mapped"),
        pytest.param("translation: {leaveMapped: true}\n", (), id="the policy's leaveMapped"),
        pytest.param(
            "mappings: [{resource: nvidia.com/gpu, deviceClassName: gpu.nvidia.com, "
            "leaveToScheduler: true}]\n",
            (),
            id="a mapping's leaveToScheduler",
        ),
    ],
)
def test_a_name_a_class_maps_is_left_as_admission_leaves_it_and_said_so(
    tmp_path: Path, migrate: Callable[..., Run], policy: str, args: tuple[str, ...]
) -> None:
    (tmp_path / "a.yaml").write_text(GPU_POD.format(name="a", count=2))
    (tmp_path / "policy.yaml").write_text(policy or "{}\n")
    config = ("--config", "policy.yaml", "--cluster-file", str(CLUSTER))
    assert migrate(*config, *args, "a.yaml") == Run(0, "", LEFT)
    assert migrate(*config, *args, "--write", "a.yaml") == Run(0, "", LEFT)
    assert (tmp_path / "a.yaml").read_text() == GPU_POD.format(name="a", count=2)


def test_leave_mapped_changes_nothing_without_a_class_that_maps_the_name_or_against_a_rule(
    tmp_path: Path, migrate: Callable[..., Run]
) -> None:
    (tmp_path / "a.yaml").write_text(GPU_POD.format(name="a", count=2))
    no_class = migrate("--leave-mapped", "a.yaml")
    assert (no_class.code, no_class.stderr) == (1, "")
    assert "resourceClaimTemplateName: dra-gpu-nvidia-com-2" in no_class.stdout
    (tmp_path / "policy.yaml").write_text(
        "mappings: [{resource: nvidia.com/gpu, deviceClassName: gpu.nvidia.com, "
        "leaveToScheduler: false}]\n"
    )
    config = ("--config", "policy.yaml", "--cluster-file", str(CLUSTER))
    against = migrate(*config, "--leave-mapped", "a.yaml")
    assert (against.code, against.stderr) == (1, "")
