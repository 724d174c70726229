"""The policy's validation errors in our words, at file:line:column: an unknown key names its
section and the key it probably meant; other errors keep pydantic's text after the key's path."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from app.config import Policy
from app.config.policy import load_policy_with_origin, parse_policy
from app.config.validation import keys_at
from app.errors import PolicyError


@pytest.mark.parametrize(
    ("text", "said"),
    [
        (
            "namespaceModes:\n  lable: gpu\n",
            "2:3: unknown key `lable` under `namespaceModes` (did you mean `label`?)",
        ),
        (
            "legacyResourcez: {}\n",
            "1:1: unknown key `legacyResourcez` at the top level (did you mean `legacyResources`?)",
        ),
        (
            "translation:\n  legacyResource: {names: [a]}\n",
            "2:3: unknown key `legacyResource` under `translation` (did you mean "
            "`legacyResources`, at the top level?)",
        ),
        (
            "translation:\n  legacyResources: {names: [a]}\n",
            "2:3: unknown key `legacyResources` under `translation` (`legacyResources` is a key "
            "at the top level)",
        ),
        (
            "failure:\n  staleView:\n    defualt: open\n",
            "3:5: unknown key `defualt` under `failure.staleView` (did you mean `default`?)",
        ),
        (
            "cel:\n  rules:\n  - name: a\n    match: {kinds: [Pod], operation: [CREATE]}\n"
            "    expression: 'true'\n",
            "4:27: unknown key `operation` under `cel.rules.0.match` (did you mean `operations`?)",
        ),
        (
            "namespaceModes:\n  label: gpu\n  zzz: 1\n",
            "3:3: unknown key `zzz` under `namespaceModes` (the keys there: label, draOnly, "
            "translate, audit)",
        ),
        ("colour: blue\n", "1:1: unknown key `colour` at the top level"),
        (
            "sharing:\n  - name: x\n    deviceClassName: c\n    resourse: a\n",
            "4:5: unknown key `resourse` under `sharing.0` (the keys there: name, "
            "deviceClassName, selectors, count, capacities, driver)",
        ),
        (
            "cel:\n  rules:\n  - name: a\n    match:\n      kinds: [Pod]\n"
            "      namespaceSelector: {matchLabel: {a: b}}\n    expression: 'true'\n",
            "6:27: unknown key `matchLabel` under `cel.rules.0.match.namespaceSelector` (did you "
            "mean `matchLabels`?)",
        ),
        ("mappings:\n  - resource: a\n", "2:5: mappings.0.deviceClassName: Field required"),
        (
            "namespaceModes:\n  label: [a]\n",
            "2:3: namespaceModes.label: Input should be a valid string",
        ),
    ],
)
def test_a_policy_error_is_said_at_its_key_in_our_words(text: str, said: str) -> None:
    with pytest.raises(PolicyError) as raised:
        parse_policy(text, "policy.yaml")
    assert str(raised.value) == f"policy.yaml:{said}"
    assert "Extra inputs" not in str(raised.value)


def test_every_error_of_a_policy_is_said_on_one_line() -> None:
    with pytest.raises(PolicyError) as raised:
        parse_policy("namespaceModes: {lable: x}\ntranslation: {maxClaimsPerPod: 0}\n", "p.yaml")
    assert str(raised.value) == (
        "p.yaml:1:18: unknown key `lable` under `namespaceModes` (did you mean `label`?); "
        "p.yaml:2:15: translation.maxClaimsPerPod: Input should be greater than or equal to 1"
    )


@pytest.mark.parametrize(
    ("path", "keys"),
    [
        ((), ["namespaceModes", "legacyResources", "mappings"]),
        (("quotas", 0), ["name", "namespaceSelector", "action"]),
        (("defaults", "deviceClasses", "gpu.nvidia.com"), ["selectors", "config"]),
        (("failure", "staleView"), ["default", "checks"]),
        (("exceptions", 0, "objectSelector"), ["matchLabels", "matchExpressions"]),
    ],
)
def test_the_keys_of_a_section_are_read_from_the_model_by_their_yaml_names(
    path: tuple[int | str, ...], keys: list[str]
) -> None:
    assert keys_at(Policy, path)[: len(keys)] == keys


def _configmap(policy: str, path: Path) -> Path:
    path.write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: pol\ndata:\n  policy.yaml: |\n"
        + "".join(f"    {line}\n" for line in policy.splitlines())
    )
    return path


@pytest.mark.parametrize(
    ("policy", "said"),
    [
        ("namespaceModes:\n  lable: x\n", "8:7: unknown key `lable` under `namespaceModes`"),
        ("namespaceModes:\n  label: [a\n", "9:5: not valid YAML: the `[` at line 8, column 14"),
    ],
)
def test_a_configmap_s_policy_error_is_placed_at_its_line_of_the_file(
    policy: str, said: str, tmp_path: Path
) -> None:
    """kubectl writes a multi-line value as a literal block: its lines are lines of the file."""
    path = _configmap(policy, tmp_path / "cm.yaml")
    with pytest.raises(PolicyError) as raised:
        load_policy_with_origin(path)
    assert str(raised.value).startswith(f"{path}:{said}")


def test_a_configmap_s_quoted_policy_is_placed_within_the_policy(tmp_path: Path) -> None:
    configmap = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "pol"}}
    configmap["data"] = {"policy.yaml": "namespaceModes: {lable: x}\n"}
    path = tmp_path / "cm.yaml"
    path.write_text(yaml.safe_dump(configmap))
    with pytest.raises(PolicyError) as raised:
        load_policy_with_origin(path)
    assert str(raised.value).startswith(
        f"{path} (ConfigMap pol, policy.yaml):1:18: unknown key `lable` under `namespaceModes`"
    )
