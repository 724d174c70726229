"""How many pods of a workload run at once, and what translation will give each (quota's
foresight: replicas x per pod)."""

from __future__ import annotations

from collections.abc import Mapping

from app.cluster.usage import SliceNodes
from app.cluster.view import ClusterReader
from app.k8s.objects import PodSpecRef
from app.policies.base import Context, Mode
from app.policies.builders import plan_for
from app.translation import TranslationPlan
from app.workloads import Template

_UNITS: Mapping[str, str] = {"Job": "parallel pods", "CronJob": "parallel pods"}
"""What a kind's pods are called in the arithmetic ("8 replicas"), when not replicas."""

_SINGULAR = {"replicas": "replica", "parallel pods": "parallel pod", "pods": "pod"}


def pods_of(kind: str, template: Template, view: ClusterReader) -> tuple[int, str] | None:
    """How many pods of a template run at once (the catalogue's factors: replicas, group
    sizes, parallelism), and what to call them ("8 replicas"); None when the object does not
    say (a runtime blueprint: its pods are counted where it is used)."""
    if kind == "Pod":
        return 1, "pod"
    if template.per_node:
        nodes = max(view.index(SliceNodes).count, 1)
        return nodes, "node with devices" if nodes == 1 else "nodes with devices"
    if template.pods is None:
        return None
    unit = _UNITS.get(kind, "replicas")
    return template.pods, unit if template.pods != 1 else _SINGULAR[unit]


def translation(spec: PodSpecRef, namespace: str, ctx: Context) -> TranslationPlan | None:
    """In translate-mode namespaces, the plan of the claims translation will give the pods
    (what it cannot translate it denies itself, with its own message)."""
    if ctx.mode is not Mode.TRANSLATE:
        return None
    return plan_for(spec, namespace, ctx)
