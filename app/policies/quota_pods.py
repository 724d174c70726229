"""How many pods of a workload run at once, and what translation will give each (quota's
foresight: replicas x per pod)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from app.cluster.usage import SliceNodes
from app.cluster.view import ClusterReader
from app.errors import ObjectShapeError
from app.k8s.objects import PodSpecRef
from app.policies import translate
from app.policies.base import Context, Mode, Obj
from app.translation import TranslationPlan

_REPLICAS: Mapping[str, tuple[tuple[str, ...], str]] = {
    "Deployment": (("spec", "replicas"), "replicas"),
    "ReplicaSet": (("spec", "replicas"), "replicas"),
    "StatefulSet": (("spec", "replicas"), "replicas"),
    "ReplicationController": (("spec", "replicas"), "replicas"),
    "Job": (("spec", "parallelism"), "parallel pods"),
    "CronJob": (("spec", "jobTemplate", "spec", "parallelism"), "parallel pods"),
}
"""Where each workload says how many of its pods run at once, and what to call them."""

_SINGULAR = {"replicas": "replica", "parallel pods": "parallel pod"}


def pods_of(kind: str, obj: Obj, view: ClusterReader) -> tuple[int, str]:
    """How many pods of the object run at once, and what to call them ("8 replicas")."""
    if kind == "Pod":
        return 1, "pod"
    if kind == "DaemonSet":
        nodes = max(view.index(SliceNodes).count, 1)
        return nodes, "node with devices" if nodes == 1 else "nodes with devices"
    where, unit = _REPLICAS[kind]
    node: Any = obj
    for part in where[:-1]:
        node = node.get(part) if isinstance(node, dict) else None
    value = node.get(where[-1], 1) if isinstance(node, dict) else 1
    if value is None:
        value = 1
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ObjectShapeError(".".join(where), "must be a non-negative integer")
    return value, unit if value != 1 else _SINGULAR[unit]


def translation(spec: PodSpecRef, namespace: str, ctx: Context) -> TranslationPlan | None:
    """In translate-mode namespaces, the plan of the claims translation will give the pods
    (what it cannot translate it denies itself, with its own message)."""
    if ctx.mode is not Mode.TRANSLATE:
        return None
    return translate.plan_for(spec, namespace, ctx)
