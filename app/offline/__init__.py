"""Offline use: the admission pipeline over YAML manifests and cluster dumps, no cluster needed.

`check` (:mod:`app.offline.check`) runs manifests through the pipeline as the API server would;
`report` (:mod:`app.offline.report`) reads a cluster dump and says which namespaces are ready for
dra-only; :mod:`app.offline.sources` says where each pod's GPUs come from.
"""

from app.offline.check import (
    Checked,
    ManifestError,
    check,
    offline_policy,
    read_manifests,
    read_objects,
)
from app.offline.report import (
    NamespaceReport,
    ReportRules,
    classify,
    conflicts,
    merge,
    report,
    sources_for,
)
from app.offline.sources import Sources

__all__ = [
    "Checked",
    "ManifestError",
    "NamespaceReport",
    "ReportRules",
    "Sources",
    "check",
    "classify",
    "conflicts",
    "merge",
    "offline_policy",
    "read_manifests",
    "read_objects",
    "report",
    "sources_for",
]
