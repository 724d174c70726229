"""`check` and `report` flag DRA objects of a resource.k8s.io version the target cluster does not
serve: a release's defaults offline (`--kubernetes-version`, 1.34+ when not given), the
cluster's discovery with `--kubeconfig` (tests/e2e/test_migrate_versions.py)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from app.cli import main
from app.errors import ConfigError
from app.migrate import served
from tests.assets import third_party

NVIDIA_V1BETA1 = "nvidia__k8s-dra-driver-gpu__v1beta1__gpu-test4.yaml"
NVIDIA_V1 = "nvidia__k8s-dra-driver-gpu__v1__gpu-test4.yaml"
CLASSIC = "kubernetes-sigs__dra-example-driver__v1alpha2__gpu-test4.yaml"
"""DRA drivers' own samples in `dra-versions/` of DRA_WEBHOOK_TEST_DATA (origins in its README)."""


def _samples() -> Path:
    return third_party("dra-versions")


def _obj(api_version: str, kind: str) -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": kind, "metadata": {"name": "x"}}


@pytest.mark.parametrize(
    ("release", "api_version", "kind", "words"),
    [
        ("1.36", "resource.k8s.io/v1", "ResourceClaimTemplate", None),
        ("v1.36.2", "resource.k8s.io/v1beta1", "ResourceClaimTemplate", "--runtime-config"),
        ("1.36", "resource.k8s.io/v1beta2", "DeviceClass", "migrate --write"),
        ("1.36", "resource.k8s.io/v1beta2", "DeviceTaintRule", "no resource.k8s.io/v1 form yet"),
        ("1.37", "resource.k8s.io/v1", "DeviceTaintRule", None),  # GA, served by default
        ("1.36", "resource.k8s.io/v1", "DeviceTaintRule", "has no DeviceTaintRule"),
        ("1.37", "resource.k8s.io/v1beta2", "DeviceTaintRule", "--runtime-config"),
        ("1.37", "resource.k8s.io/v1beta2", "DeviceTaintRule", "write it for resource.k8s.io/v1"),
        ("1.36", "resource.k8s.io/v1alpha3", "ResourceClaim", "has no ResourceClaim"),
        ("1.33", "resource.k8s.io/v1beta1", "ResourceClaim", "--runtime-config"),
        ("1.33", "resource.k8s.io/v1", "ResourceClaim", "has no ResourceClaim"),
        ("1.30", "resource.k8s.io/v1alpha2", "ResourceClass", "--runtime-config"),
        ("1.30", "resource.k8s.io/v1alpha2", "ResourceClass", "says what to write"),
        ("1.25", "resource.k8s.io/v1alpha2", "ResourceClass", "has no ResourceClass"),
        (None, "resource.k8s.io/v1", "DeviceClass", None),
        (None, "resource.k8s.io/v1beta1", "DeviceClass", "1.34 or later"),
        (None, "resource.k8s.io/v1beta1", "ResourceClaimList", None),  # a list, not an object
        (None, "v1", "Pod", None),
        (None, "example.com/v1beta1", "ResourceClaim", None),
    ],
)
def test_what_a_release_serves_by_default(
    release: str | None, api_version: str, kind: str, words: str | None
) -> None:
    verdict = served.for_release(release).verdict(_obj(api_version, kind))
    if words is None:
        assert verdict is None
        return
    assert verdict is not None
    assert f'no matches for kind "{kind}" in version "{api_version}"' in verdict
    assert words in verdict
    assert "\n" not in verdict


@pytest.mark.parametrize("text", ["foo", "2.1", "1.", "1.x", ""])
def test_a_kubernetes_version_that_is_not_one_is_a_setting_error(text: str) -> None:
    with pytest.raises(ConfigError, match="not a Kubernetes version"):
        served.for_release(text)


def _cli(capsys: pytest.CaptureFixture[str]) -> Callable[..., tuple[int, str, str]]:
    def run(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        code = main(list(args))
        out = capsys.readouterr()
        return code, out.out, out.err

    return run


def test_check_denies_a_v1beta1_template_on_a_default_cluster_and_allows_its_v1_form(
    capsys: pytest.CaptureFixture[str],
) -> None:
    beta, v1 = _samples() / NVIDIA_V1BETA1, _samples() / NVIDIA_V1
    run = _cli(capsys)
    code, out, _ = run("check", str(beta))
    assert code == 1
    assert f"ResourceClaimTemplate gpu-test4/mig-devices ({beta}#1): DENIED" in out
    assert "not served by Kubernetes 1.34 or later with its default API versions" in out
    assert "`dra-webhook migrate --write` on its file rewrites it as resource.k8s.io/v1" in out
    assert run("check", str(v1))[0] == 0
    assert run("check", "--kubernetes-version", "1.33", str(v1))[0] == 1


def test_check_answers_in_json_with_the_reason(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _cli(capsys)("check", "--output", "json", str(_samples() / CLASSIC))
    assert code == 1
    denied = [r for r in json.loads(out) if not r["allowed"]]
    assert [(r["kind"], r["name"]) for r in denied] == [("ResourceClaimTemplate", "multiple-gpus")]
    assert "resource.k8s.io/v1alpha2 ResourceClaimTemplate is not served" in denied[0]["message"]


def test_check_takes_one_target_only(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["check", "--kubernetes-version", "1.36", "--kubeconfig", "k.yaml", "t.yaml"])
    assert exited.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_report_lists_what_a_dump_holds_that_the_release_does_not_serve(
    capsys: pytest.CaptureFixture[str],
) -> None:
    samples = _samples()
    run = _cli(capsys)
    code, out, _ = run("report", str(samples), "--kubernetes-version", "1.36")
    assert code == 0
    lines = [line for line in out.splitlines() if "not served:" in line]
    assert len(lines) == 3  # two v1beta1 templates and the v1alpha2 one
    assert any(
        line.startswith("  not served: ResourceClaimTemplate/mig-devices: ") for line in lines
    )
    assert run("report", str(samples), "--fail-on", "legacy")[0] == 1
    assert run("report", str(samples / NVIDIA_V1), "--fail-on", "legacy")[0] == 0
    code, out, _ = run("report", "--output", "json", str(samples / NVIDIA_V1BETA1))
    (row,) = json.loads(out)
    assert row["unserved"][0].startswith(
        "ResourceClaimTemplate/mig-devices: resource.k8s.io/v1beta1 ResourceClaimTemplate"
    )


def test_the_live_report_reads_what_the_cluster_serves_and_takes_no_release(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, _, err = _cli(capsys)("report", "--kubeconfig", "k.yaml", "--kubernetes-version", "1.36")
    assert code == 2
    assert "drop the dump files, --cluster-file and --kubernetes-version" in err


def test_check_with_a_kubeconfig_that_is_not_there_says_so_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _cli(capsys)("check", "--kubeconfig", str(tmp_path / "k.yaml"), "t.yaml")
    assert code == 2
    assert (
        err
        == f"dra-webhook: --kubeconfig {tmp_path / 'k.yaml'}: kubeconfig {tmp_path / 'k.yaml'}: no such file\n"
    )
