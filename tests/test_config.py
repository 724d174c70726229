"""The policy file and process settings: defaults, and errors that name the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.config import Settings, load_policy
from app.config.policy import parse_policy
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
        ("namespaceModes: {lable: x}", "namespaceModes.lable: Extra inputs are not permitted"),
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
