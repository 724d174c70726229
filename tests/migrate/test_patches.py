"""Strategic-merge patches for overlays and charts say what a rewrite would have."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import yaml

from app.migrate.patches import source_kind, strategic_diff
from tests.assets import k8s_tool
from tests.migrate.helpers import Run


def test_a_patch_dropped_into_the_overlay_renders_the_workload_a_rewrite_would_give(
    migrate: Callable[..., Run], workdir: Callable[..., Path]
) -> None:
    kubectl = k8s_tool("kubectl")
    folder = workdir("sources/overlay")
    run = migrate("--kubectl", kubectl, "overlay/prod")
    patch, template = [d for d in yaml.safe_load_all(run.stdout) if d]
    prod = folder / "overlay" / "prod"
    (prod / "dra-patch.yaml").write_text(yaml.safe_dump(patch))
    (prod / "dra-templates.yaml").write_text(yaml.safe_dump(template))
    kustomization = yaml.safe_load((prod / "kustomization.yaml").read_text())
    kustomization["resources"].append("dra-templates.yaml")
    kustomization["patches"].append({"path": "dra-patch.yaml"})
    (prod / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))

    rendered = _kustomize(kubectl, prod)
    # the same overlay without the patch, rendered to a file and rewritten by migrate
    (prod / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {**kustomization, "patches": [{"path": "replicas.yaml"}], "resources": ["../base"]}
        )
    )
    plain = folder / "rendered.yaml"
    plain.write_text(_kustomize(kubectl, prod))
    assert migrate("--write", "rendered.yaml").code == 0
    assert _by_kind(plain.read_text()) == _by_kind(rendered)


def _by_kind(text: str) -> dict[str, object]:
    return {d["kind"]: d for d in yaml.safe_load_all(text) if d}


def _kustomize(kubectl: str, folder: Path) -> str:
    done = subprocess.run(
        [kubectl, "kustomize", str(folder)], capture_output=True, text=True, check=True, timeout=60
    )
    return done.stdout


def test_containers_and_claims_merge_by_name_a_removed_key_is_null_other_lists_are_replaced() -> (
    None
):
    before = {
        "containers": [
            {"name": "a", "resources": {"limits": {"x/gpu": 1, "cpu": 1}}},
            {"name": "b"},
        ],
        "resourceClaims": [{"name": "mine", "resourceClaimName": "c"}],
    }
    after = {
        "containers": [
            {"name": "a", "resources": {"limits": {"cpu": 1}, "claims": [{"name": "gpu-a"}]}},
            {"name": "b"},
        ],
        "resourceClaims": [
            {"name": "mine", "resourceClaimName": "c"},
            {"name": "gpu-a", "resourceClaimTemplateName": "t"},
        ],
    }
    assert strategic_diff(before, after) == {
        "containers": [
            {"name": "a", "resources": {"limits": {"x/gpu": None}, "claims": [{"name": "gpu-a"}]}}
        ],
        "resourceClaims": [{"name": "gpu-a", "resourceClaimTemplateName": "t"}],
    }


def test_a_folder_with_a_kustomization_is_an_overlay_and_one_with_chart_yaml_a_chart(
    tmp_path: Path,
) -> None:
    assert source_kind(tmp_path) is None
    (tmp_path / "Chart.yaml").write_text("name: x\n")
    assert source_kind(tmp_path) == "helm"
    (tmp_path / "kustomization.yaml").write_text("resources: []\n")
    assert source_kind(tmp_path) == "kustomize"


def test_an_overlay_without_kubectl_is_reported_not_skipped(
    migrate: Callable[..., Run], workdir: Callable[..., Path]
) -> None:
    workdir("sources/overlay")
    run = migrate("--kubectl", "/nonexistent/kubectl", "overlay/prod")
    assert run.code == 2
    assert "overlay/prod: a kustomize overlay: rendering it needs kubectl" in run.stderr
