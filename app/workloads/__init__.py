"""The workload catalogue (where each kind keeps its pod specs) and the scan that finds a GPU
request anywhere else."""

from app.workloads.catalogue import Catalogue, Template, builtin, group_kind
from app.workloads.entries import Entry
from app.workloads.scan import Finding, counted, scan, scan_values

__all__ = [
    "Catalogue",
    "Entry",
    "Finding",
    "Template",
    "builtin",
    "counted",
    "group_kind",
    "scan",
    "scan_values",
]
