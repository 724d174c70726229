"""Journey defaults (DeviceClasses): a second DeviceClass mapping an extended resource name
another class already maps is admitted with a warning naming the class the scheduler will use
(app/policies/extended_names.py), and `report` names the same conflict cluster-wide."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from app.cli import main
from tests.e2e.controlplane import ControlPlane
from tests.e2e.kube import Kube
from tests.e2e.webhook import Webhook

pytestmark = [pytest.mark.journey("defaults"), pytest.mark.usefixtures("webhook")]

NAME = "example.com/mapped-twice"
"""A name no other test maps: the fleet's classes and nvidia.com/gpu stay as they are."""


def _device_class(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {
            "selectors": [{"cel": {"expression": 'device.driver == "gpu.nvidia.com"'}}],
            "extendedResourceName": NAME,
        },
    }


@pytest.fixture
def first(kube: Kube) -> Iterator[str]:
    kube.create(_device_class("first.example.com"))
    time.sleep(1.1)  # creationTimestamp has seconds: the second class is then strictly newer
    yield "first.example.com"
    for name in ("first.example.com", "second.example.com"):
        kube.delete("DeviceClass", name, None)


def test_a_second_class_mapping_a_taken_name_is_warned_about_on_create(
    kube: Kube,
    first: str,
    webhook: Webhook,
    control_plane: ControlPlane,
    capsys: pytest.CaptureFixture[str],
) -> None:
    def warned() -> list[str] | None:
        answer = kube.create(_device_class("second.example.com"), dry_run=True)
        found = [w for w in answer.warnings if "already maps" in w]
        return found or None  # the webhook's view has not seen the first class yet

    (warning,) = kube.wait(warned, "the webhook to see the first class's mapping", 30)
    assert warning == (
        f"spec.extendedResourceName: DeviceClass {first} already maps {NAME}: the scheduler "
        "serves it from the class created last, second.example.com; give each name to one class"
    )
    answer = kube.create(_device_class("second.example.com"))
    assert any("already maps" in w for w in answer.warnings)
    capsys.readouterr()
    kubeconfig, policy = str(control_plane.kubeconfig()), str(webhook.policy)
    assert main(["report", "--kubeconfig", kubeconfig, "--config", policy, "--nodes"]) == 0
    out = capsys.readouterr().out
    assert (
        f"conflict: DeviceClass first.example.com: DeviceClass second.example.com already maps "
        f"{NAME}"
    ) in out
