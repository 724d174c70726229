"""The ResourceClaimTemplates translation creates: content, names, hooks, memo."""

from __future__ import annotations

import re
from typing import Any

import kubernetes_validate
import pytest

from app.translation.legacy import DeviceMapping
from app.translation.templates import TemplateBuilder, request_name, template_name

GPU = DeviceMapping("gpu.nvidia.com")
MIG_1G = DeviceMapping(
    "mig.nvidia.com", ('device.attributes["gpu.nvidia.com"].profile == "1g.10gb"',)
)
MIG_2G = DeviceMapping(
    "mig.nvidia.com", ('device.attributes["gpu.nvidia.com"].profile == "2g.20gb"',)
)
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def test_a_template_is_a_valid_labelled_resource_claim_template_for_its_namespace() -> None:
    made = TemplateBuilder("dra").get("ml-research", MIG_1G, 2)
    kubernetes_validate.validate(made.template, "1.34.0", strict=True)
    assert made.template["metadata"] == {
        "name": made.name,
        "namespace": "ml-research",
        "labels": {"app.kubernetes.io/managed-by": "dra-webhook"},
    }
    assert made.template["spec"]["spec"]["devices"]["requests"] == [
        {
            "name": "mig",
            "exactly": {
                "deviceClassName": "mig.nvidia.com",
                "allocationMode": "ExactCount",
                "count": 2,
                "selectors": [
                    {
                        "cel": {
                            "expression": 'device.attributes["gpu.nvidia.com"].profile == "1g.10gb"'
                        }
                    }
                ],
            },
        }
    ]
    assert (made.device_class, made.count) == ("mig.nvidia.com", 2)


def test_names_are_derived_from_content_alone() -> None:
    one, other = TemplateBuilder("dra"), TemplateBuilder("dra")
    assert one.get("a", GPU, 2).name == other.get("b", GPU, 2).name
    assert re.fullmatch(r"dra-gpu-nvidia-com-2-[0-9a-f]{10}", one.get("a", GPU, 2).name)
    names = {one.get("a", m, c).name for m in (GPU, MIG_1G, MIG_2G) for c in (1, 2)}
    assert len(names) == 6, "class, selectors and count each change the name"


@pytest.mark.parametrize(
    ("prefix", "device_class", "count"),
    [
        ("dra", "gpu.nvidia.com", 1),
        ("dra", "a" * 60 + ".example.com", 8),
        ("x" * 16, "very.long." * 20 + "com", 10**18),
        ("dra", "UPPER_and_under.example.com", 3),
    ],
)
def test_names_are_dns_labels_of_at_most_63_characters(
    prefix: str, device_class: str, count: int
) -> None:
    name = template_name(prefix, device_class, count, {"devices": {}})
    assert len(name) <= 63
    assert DNS_LABEL.match(name), name
    assert name.startswith(f"{prefix}-")
    assert f"-{count}-" in name


def test_the_request_name_is_the_first_label_of_the_class() -> None:
    assert request_name("gpu.nvidia.com") == "gpu"
    assert request_name("Big_GPU.example.com") == "big-gpu"
    assert request_name("...") == "devices"


@pytest.mark.usefixtures("roomy_cache_budget")
def test_each_shape_is_built_once_and_the_same_object_is_returned() -> None:
    calls: list[str] = []

    def counting(spec: dict[str, Any], namespace: str) -> dict[str, Any]:
        calls.append(namespace)
        return spec

    builder = TemplateBuilder("dra", hooks=(counting,))
    first = builder.get("ns", GPU, 1)
    assert builder.get("ns", GPU, 1) is first
    builder.get("other", GPU, 1)
    assert calls == ["ns", "other"]


def test_a_hook_can_add_defaults_and_the_name_follows_the_content() -> None:
    def tolerate(spec: dict[str, Any], namespace: str) -> dict[str, Any]:
        request = dict(spec["devices"]["requests"][0])
        request["exactly"] = {
            **request["exactly"],
            "tolerations": [{"key": "gpu", "operator": "Exists"}],
        }
        return {**spec, "devices": {"requests": [request]}}

    plain = TemplateBuilder("dra").get("ns", GPU, 1)
    hooked = TemplateBuilder("dra", hooks=(tolerate,)).get("ns", GPU, 1)
    exactly = hooked.template["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    assert exactly["tolerations"] == [{"key": "gpu", "operator": "Exists"}]
    assert hooked.name != plain.name
    assert "tolerations" not in plain.template["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    kubernetes_validate.validate(hooked.template, "1.34.0", strict=True)


def test_readable_names_say_the_class_the_compared_values_and_the_count() -> None:
    readable = TemplateBuilder("dra").readable()
    assert readable.get("ml", GPU, 2).name == "dra-gpu-nvidia-com-2"
    assert readable.get("ml", MIG_1G, 1).name == "dra-mig-nvidia-com-1g-10gb-1"
    assert readable.get("ml", MIG_2G, 1).name == "dra-mig-nvidia-com-2g-20gb-1"


def test_a_readable_template_is_valid_and_carries_no_managed_by_label() -> None:
    made = TemplateBuilder("dra").readable().get("ml", MIG_1G, 2)
    kubernetes_validate.validate(made.template, "1.34.0", strict=True)
    assert made.template["metadata"] == {"name": "dra-mig-nvidia-com-1g-10gb-2", "namespace": "ml"}
    hashed = TemplateBuilder("dra").get("ml", MIG_1G, 2).template
    assert made.template["spec"]["spec"] == hashed["spec"]["spec"]


def test_a_readable_template_without_namespace_names_none() -> None:
    made = TemplateBuilder("dra").readable().get("", GPU, 1)
    assert made.template["metadata"] == {"name": "dra-gpu-nvidia-com-1"}


def test_two_shapes_with_one_readable_name_are_told_apart_by_the_content_hash() -> None:
    readable = TemplateBuilder("dra").readable()
    readable.reserve("ml", "dra-gpu-nvidia-com-1", {"devices": {"requests": []}})
    taken = readable.get("ml", GPU, 1).name
    assert re.fullmatch(r"dra-gpu-nvidia-com-1-[0-9a-f]{10}", taken)
    assert readable.get("other", GPU, 1).name == "dra-gpu-nvidia-com-1"
    no_literal = DeviceMapping("gpu.nvidia.com", ("device.attributes['x'].y > 2",))
    assert re.fullmatch(
        r"dra-gpu-nvidia-com-1-[0-9a-f]{10}", readable.get("ml", no_literal, 1).name
    )


@pytest.mark.parametrize("count", [1, 10**18])
def test_readable_names_are_dns_labels_of_at_most_63_characters(count: int) -> None:
    long = DeviceMapping(
        "very.long." * 20 + "com", ('device.attributes["a"].b == "' + "x" * 80 + '"',)
    )
    name = TemplateBuilder("dra").readable().get("ml", long, count).name
    assert len(name) <= 63 and DNS_LABEL.match(name), name
