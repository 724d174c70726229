"""The dra-only rule's cases: one table read by the policy tests (the webhook's pipeline), the
chart tests (the ValidatingAdmissionPolicy's CEL, evaluated with the project's engine) and the
control-plane suite (that policy in the real API server), which must agree on every case."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

GPU = "nvidia.com/gpu"
Obj = dict[str, Any]


def container(
    name: str,
    limits: dict[str, Any] | None = None,
    requests: dict[str, Any] | None = None,
    **extra: Any,
) -> Obj:
    resources: Obj = {}
    if limits is not None:
        resources["limits"] = limits
    if requests is not None:
        resources["requests"] = requests
    return {"name": name, "image": "cuda:12", "resources": resources, **extra}


@dataclass(frozen=True)
class Offence:
    """One legacy request a denial must name: where, which container, which resource."""

    path: str
    container: str
    resource: str


@dataclass(frozen=True)
class Case:
    id: str
    spec: Obj
    offences: tuple[Offence, ...] = ()
    """Empty: the pod is allowed."""
    api_server_valid: bool = True
    """False: the API server refuses the pod as invalid before any admission policy runs (an
    extended resource in requests without the same limit)."""
    extra: Obj = field(default_factory=dict)

    @property
    def denied(self) -> bool:
        return bool(self.offences)


def _one(path: str, name: str, resource: str = GPU) -> tuple[Offence, ...]:
    return (Offence(path, name, resource),)


CASES: tuple[Case, ...] = (
    Case(
        "limits and requests",
        {"containers": [container("cuda", limits={GPU: "2"}, requests={GPU: "2"})]},
        _one("spec.containers[0].resources.limits[nvidia.com/gpu]", "cuda"),
    ),
    Case(
        "requests only",
        {"containers": [container("cuda", requests={GPU: 1})]},
        _one("spec.containers[0].resources.requests[nvidia.com/gpu]", "cuda"),
        api_server_valid=False,
    ),
    Case(
        "init container",
        {
            "containers": [container("app")],
            "initContainers": [container("init", limits={GPU: "1"})],
        },
        _one("spec.initContainers[0].resources.limits[nvidia.com/gpu]", "init"),
    ),
    Case(
        "sidecar",
        {
            "containers": [container("app")],
            "initContainers": [container("sidecar", limits={GPU: "1"}, restartPolicy="Always")],
        },
        _one("spec.initContainers[0].resources.limits[nvidia.com/gpu]", "sidecar"),
    ),
    Case(
        "ephemeral container",
        {
            "containers": [container("app")],
            "ephemeralContainers": [container("debug", limits={GPU: "1"})],
        },
        _one("spec.ephemeralContainers[0].resources.limits[nvidia.com/gpu]", "debug"),
        # a pod cannot be created with ephemeral containers (they are added through the
        # ephemeralcontainers subresource): the API server refuses it first
        api_server_valid=False,
    ),
    Case(
        "MIG pattern in the second container",
        {
            "containers": [
                container("app"),
                container("mig", limits={"nvidia.com/mig-1g.10gb": "1"}),
            ]
        },
        _one(
            "spec.containers[1].resources.limits[nvidia.com/mig-1g.10gb]",
            "mig",
            "nvidia.com/mig-1g.10gb",
        ),
    ),
    Case(
        "Intel pattern",
        {"containers": [container("intel", limits={"gpu.intel.com/i915": "1"})]},
        _one(
            "spec.containers[0].resources.limits[gpu.intel.com/i915]", "intel", "gpu.intel.com/i915"
        ),
    ),
    Case(
        "AMD",
        {"containers": [container("amd", limits={"amd.com/gpu": "1"})]},
        _one("spec.containers[0].resources.limits[amd.com/gpu]", "amd", "amd.com/gpu"),
    ),
    Case(
        "Gaudi, no mapping",
        {"containers": [container("gaudi", limits={"habana.ai/gaudi": "8"})]},
        _one("spec.containers[0].resources.limits[habana.ai/gaudi]", "gaudi", "habana.ai/gaudi"),
    ),
    Case(
        "time-slicing name",
        {"containers": [container("shared", limits={"nvidia.com/gpu.shared": "1"})]},
        _one(
            "spec.containers[0].resources.limits[nvidia.com/gpu.shared]",
            "shared",
            "nvidia.com/gpu.shared",
        ),
    ),
    Case(
        "HAMi: a GPU with a memory share",
        {"containers": [container("cuda", limits={GPU: "1", "nvidia.com/gpumem": "2048"})]},
        (
            Offence("spec.containers[0].resources.limits[nvidia.com/gpu]", "cuda", GPU),
            Offence(
                "spec.containers[0].resources.limits[nvidia.com/gpumem]",
                "cuda",
                "nvidia.com/gpumem",
            ),
        ),
    ),
    Case(
        "HAMi: a memory percentage and a core limit",
        {
            "containers": [
                container(
                    "cuda",
                    limits={"nvidia.com/gpumem-percentage": "50", "nvidia.com/gpucores": "30"},
                )
            ]
        },
        (
            Offence(
                "spec.containers[0].resources.limits[nvidia.com/gpumem-percentage]",
                "cuda",
                "nvidia.com/gpumem-percentage",
            ),
            Offence(
                "spec.containers[0].resources.limits[nvidia.com/gpucores]",
                "cuda",
                "nvidia.com/gpucores",
            ),
        ),
    ),
    Case(
        "Volcano vGPU in an init container",
        {
            "containers": [container("app")],
            "initContainers": [
                container(
                    "warmup",
                    limits={
                        "volcano.sh/vgpu-number": "2",
                        "volcano.sh/vgpu-memory": "3072",
                        "volcano.sh/vgpu-cores": "50",
                    },
                )
            ],
        },
        tuple(
            Offence(f"spec.initContainers[0].resources.limits[{name}]", "warmup", name)
            for name in (
                "volcano.sh/vgpu-number",
                "volcano.sh/vgpu-memory",
                "volcano.sh/vgpu-cores",
            )
        ),
    ),
    Case(
        "gpushare memory",
        {"containers": [container("infer", limits={"aliyun.com/gpu-mem": "8"})]},
        _one(
            "spec.containers[0].resources.limits[aliyun.com/gpu-mem]",
            "infer",
            "aliyun.com/gpu-mem",
        ),
    ),
    Case(
        "every offending container",
        {
            "containers": [
                container("a", limits={GPU: "1"}),
                container("b", limits={GPU: "2", "amd.com/gpu": "1"}),
            ],
            "initContainers": [container("warmup", limits={GPU: "1"})],
        },
        (
            Offence("spec.containers[0].resources.limits[nvidia.com/gpu]", "a", GPU),
            Offence("spec.containers[1].resources.limits[nvidia.com/gpu]", "b", GPU),
            Offence("spec.containers[1].resources.limits[amd.com/gpu]", "b", "amd.com/gpu"),
            Offence("spec.initContainers[0].resources.limits[nvidia.com/gpu]", "warmup", GPU),
        ),
    ),
    Case("plain", {"containers": [container("web", limits={"cpu": "1", "memory": "1Gi"})]}),
    Case("no resources", {"containers": [{"name": "c", "image": "pause"}]}),
    Case(
        "an extended resource that is not legacy",
        {"containers": [container("fpga", limits={"example.com/fpga": "1"})]},
    ),
    Case(
        "a name that only starts like a legacy one",
        {"containers": [container("x", limits={"nvidia.com/gpu-x": "1"})]},
    ),
    Case(
        "DRA claims",
        {
            "containers": [
                {"name": "c", "image": "pause", "resources": {"claims": [{"name": "gpu"}]}}
            ],
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "t"}],
        },
    ),
)

WORKLOADS: dict[tuple[str, str], Any] = {
    ("apps/v1", "Deployment"): lambda s: {"replicas": 2, "template": {"spec": s}},
    ("apps/v1", "StatefulSet"): lambda s: {"template": {"spec": s}},
    ("apps/v1", "DaemonSet"): lambda s: {"template": {"spec": s}},
    ("apps/v1", "ReplicaSet"): lambda s: {"template": {"spec": s}},
    ("batch/v1", "Job"): lambda s: {"template": {"spec": s}},
    ("batch/v1", "CronJob"): lambda s: {
        "schedule": "* * * * *",
        "jobTemplate": {"spec": {"template": {"spec": s}}},
    },
    ("v1", "ReplicationController"): lambda s: {"template": {"spec": s}},
}
"""Workload kinds by (apiVersion, kind): their spec around a pod spec."""


def template_path(kind: str) -> str:
    return "spec.jobTemplate.spec.template.spec" if kind == "CronJob" else "spec.template.spec"
