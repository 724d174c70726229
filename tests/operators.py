"""The operators' CRDs vendored in tests/data/operators (see its README): their kinds, plurals
and schemas, for the tests that check the catalogue, the chart and migrate against them."""

from __future__ import annotations

import gzip
from functools import cache
from pathlib import Path
from typing import Any

import yaml

OPERATORS = Path(__file__).parent / "data" / "operators"
CRDS = OPERATORS / "crds"
MANIFESTS = OPERATORS / "manifests"

OTHER_PLURALS = {
    ("helm.toolkit.fluxcd.io", "HelmRelease"): "helmreleases",
    ("argoproj.io", "Application"): "applications",
}
"""Namespaced catalogue kinds whose CRD is not vendored (Flux, Argo CD): their plurals."""


@cache
def crds() -> dict[tuple[str, str], dict[str, Any]]:
    """(group, kind) -> CRD; of two CRDs of one kind (MPIJob v1 and v2beta1) the first file."""
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for path in sorted(CRDS.glob("*.yaml.gz")):
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
