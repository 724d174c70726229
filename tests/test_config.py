"""The policy file and process settings: defaults, and errors that name the key."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import yaml

from app.config import Settings, load_policy
from app.config.policy import load_policy_with_origin, parse_policy
from app.errors import PolicyError


def test_the_embedded_default_policy_loads_with_the_documented_defaults() -> None:
    policy = load_policy()
    assert policy.namespace_modes.label == "gpu-mode"
    assert (
        policy.namespace_modes.dra_only,
        policy.namespace_modes.translate,
        policy.namespace_modes.audit,
    ) == ("dra-only", "translate", "audit")
    assert policy.legacy_resources.names == (
        "nvidia.com/gpu",
        "nvidia.com/gpu.shared",
        "nvidia.com/mig-*",
        "amd.com/gpu",
        "gpu.intel.com/*",
        "habana.ai/gaudi",
    )
    assert [m.device_class_name for m in policy.mappings] == [
        "gpu.nvidia.com",
        "mig.nvidia.com",
        "gpu.amd.com",
    ]


def test_an_empty_policy_file_means_all_defaults() -> None:
    assert parse_policy("") == load_policy()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("namespaceModes: {lable: x}", "unknown key `lable` under `namespaceModes`"),
        ("legacyResources: {names: ' '}", "legacyResources.names"),
        ("failure: {internalError: maybe}", "failure.internalError"),
        ("mappings: [{resource: 'a(', pattern: true, deviceClassName: x}]", "mappings.0"),
        ("mappings: [{resource: a}]", "mappings.0.deviceClassName: Field required"),
        ("- a list", "the top level must be a mapping"),
        ("key: [unclosed", "not valid YAML"),
    ],
)
def test_a_bad_policy_names_the_key(text: str, message: str) -> None:
    with pytest.raises(PolicyError, match=r"test\.yaml") as err:
        parse_policy(text, "test.yaml")
    assert message in str(err.value)


def test_a_missing_policy_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(PolicyError, match="No such file"):
        load_policy(tmp_path / "absent.yaml")


def test_settings_come_from_dra_webhook_environment_variables(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DRA_WEBHOOK_PORT", "9443")
    monkeypatch.setenv("DRA_WEBHOOK_NAMESPACE", "gpu-system")
    settings = Settings()
    assert settings.port == 9443
    assert settings.namespace == "gpu-system"
    assert settings.cert_dir == Path("certs")


def test_the_charts_configmap_is_a_policy_file_and_its_origin_is_named(tmp_path: Path) -> None:
    """`--config` takes the chart's ConfigMap as written by `kubectl get configmap -o yaml`, so a
    server outside the cluster runs the policy the chart rendered."""
    text = "namespaceModes: {label: team-gpu}\n"
    configmap = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "dra-webhook-policy"},
        "data": {"policy.yaml": text},
    }
    path = tmp_path / "cm.yaml"
    path.write_text(yaml.safe_dump(configmap))
    policy, origin = load_policy_with_origin(path)
    assert policy.namespace_modes.label == "team-gpu"
    assert origin.source == f"{path} (ConfigMap dra-webhook-policy, policy.yaml)"
    assert origin.digest == hashlib.sha256(text.encode()).hexdigest()[:12]
    del configmap["data"]
    path.write_text(yaml.safe_dump(configmap))
    with pytest.raises(PolicyError, match=r"a ConfigMap without data.policy.yaml"):
        load_policy_with_origin(path)
