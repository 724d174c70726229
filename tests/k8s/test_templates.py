"""Whether a stored ResourceClaimTemplate is the one translation built under its name."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from app.k8s.templates import template_mismatch

Obj = dict[str, Any]
BUILT: Obj = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaimTemplate",
    "metadata": {
        "name": "dra-gpu-nvidia-com-1-337bea9cd5",
        "namespace": "ml-research",
        "labels": {"app.kubernetes.io/managed-by": "dra-webhook"},
    },
    "spec": {
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "exactly": {
                            "deviceClassName": "gpu.nvidia.com",
                            "allocationMode": "ExactCount",
                            "count": 1,
                        },
                    }
                ]
            }
        }
    },
}


def _stored(**changes: Any) -> Obj:
    stored = copy.deepcopy(BUILT)
    stored["metadata"] |= {"uid": "u", "resourceVersion": "9"}
    for key, value in changes.items():
        if key == "labels":
            stored["metadata"]["labels"] = value
        else:
            stored["spec"][key] = value
    return stored


def _exactly(**fields: Any) -> Obj:
    spec = copy.deepcopy(BUILT["spec"]["spec"])
    spec["devices"]["requests"][0]["exactly"] |= fields
    return spec


@pytest.mark.parametrize(
    ("stored", "why"),
    [
        (_stored(), None),
        (_stored(metadata={}), None),
        (_stored(metadata={"creationTimestamp": None}), None),
        (_stored(labels={"app.kubernetes.io/managed-by": "dra-webhook", "team": "a"}), None),
        (_stored(labels={}), "it is not labelled app.kubernetes.io/managed-by=dra-webhook"),
        (_stored(labels={"app.kubernetes.io/managed-by": "helm"}), "it is not labelled"),
        (_stored(labels=None), "it is not labelled"),
        (_stored(spec=_exactly(allocationMode="All")), "its spec is not the one"),
        (_stored(spec=_exactly(count=8)), "its spec is not the one"),
        (_stored(spec=_exactly(adminAccess=True)), "its spec is not the one"),
        (_stored(spec=_exactly(selectors=[{"cel": {"expression": "true"}}])), "its spec is not"),
        (_stored(metadata={"labels": {"x": "y"}}), "its spec is not the one"),
        (_stored(spec=None), "its spec is not the one"),
        ({"metadata": "x"}, "it is not labelled"),
    ],
)
def test_only_our_label_and_the_spec_we_built_make_a_stored_template_ours(
    stored: Obj, why: str | None
) -> None:
    found = template_mismatch(stored, BUILT)
    if why is None:
        assert found is None
    else:
        assert found is not None and found.startswith(why)
