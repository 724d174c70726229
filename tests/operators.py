"""The operators' CRDs (`operators/crds/` of DRA_WEBHOOK_TEST_DATA, origins in its README):
their kinds, plurals and schemas, for the tests that check the catalogue, the chart and migrate
against them. Without the folder, a test that reads them skips (fails under CI), saying so."""

from __future__ import annotations

import gzip
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from tests.assets import third_party

OTHER_PLURALS = {
    ("helm.toolkit.fluxcd.io", "HelmRelease"): "helmreleases",
    ("argoproj.io", "Application"): "applications",
}
"""Namespaced catalogue kinds whose CRD is not in the test data (Flux, Argo CD): their plurals."""


def crd_folder() -> Path:
    return third_party("operators/crds")


def manifest_folder() -> Path:
    """Real manifests from the operators' own examples (`operators/manifests/`)."""
    return third_party("operators/manifests")


@cache
def crds() -> dict[tuple[str, str], dict[str, Any]]:
    """(group, kind) -> CRD; of two CRDs of one kind (MPIJob v1 and v2beta1) the first file."""
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for path in sorted(crd_folder().glob("*.yaml.gz")):
        for doc in yaml.load_all(gzip.decompress(path.read_bytes()), Loader=yaml.CSafeLoader):
            if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
                spec = doc["spec"]
                found.setdefault((spec["group"], spec["names"]["kind"]), doc)
    return found


def namespaced_plurals() -> dict[tuple[str, str], str]:
    """(group, kind) -> plural of every namespaced operator kind."""
    plurals = {
        key: crd["spec"]["names"]["plural"]
        for key, crd in crds().items()
        if crd["spec"]["scope"] == "Namespaced"
    }
    return {**plurals, **OTHER_PLURALS}
