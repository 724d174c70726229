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


# -- policy exceptions: one table for the pipeline, the chart's admission policy and the real
# control plane. The admission policy skips every object an exception selects (it has no clock);
# the webhook then judges the date.

EXCEPTIONS: list[Obj] = [
    {
        "name": "vendor-image",
        "namespaceSelector": {"matchLabels": {"exceptions": "allowed"}},
        "objectSelector": {"matchLabels": {"exception": "vendor"}},
        "until": "2999-12-31",
        "reason": "vendor image reads NVIDIA_VISIBLE_DEVICES",
    },
    {
        "name": "warmup-only",
        "namespaceSelector": {"matchExpressions": [{"key": "exceptions", "operator": "Exists"}]},
        "objectSelector": {
            "matchExpressions": [{"key": "exception", "operator": "In", "values": ["warmup"]}]
        },
        "kinds": ["Pod"],
        "containers": ["warmup"],
        "until": "2999-12-31",
        "reason": "warm-up image pinned to the device plugin",
    },
    {
        "name": "ended",
        "namespaceSelector": {"matchLabels": {"exceptions": "allowed"}},
        "objectSelector": {"matchLabels": {"exception": "ended"}},
        "until": "2020-01-31",
        "reason": "moved to DRA in January 2020",
    },
]
"""The policy's `exceptions` in every layer that runs EXCEPTION_CASES."""

UNTIL = "2999-12-31"
EXCEPTED_NAMESPACE = {"exceptions": "allowed"}


@dataclass(frozen=True)
class ExceptionCase:
    id: str
    spec: Obj
    labels: dict[str, str]
    """The labels of the pods the object makes."""
    namespace_labels: dict[str, str]
    selected: bool
    """An exception selects the object (its namespace, labels, kind): the admission policy
    leaves it to the webhook."""
    days_before_end: int | None
    """The clock: this many days before the end of 2999-12-31 (-1: the day after it); None:
    the real date (tests that cannot set the clock)."""
    offences: tuple[Offence, ...] = ()
    """What the webhook still denies; empty: allowed."""
    warns: tuple[str, ...] = ()
    """Text the webhook's warnings carry."""
    kinds: tuple[str, ...] = ("Pod", "Deployment", "CronJob")
    excepted: str = ""
    """The exception that lets requests through (the metric's label), if any."""


_LEGACY_SPEC = {"containers": [container("cuda", limits={GPU: "2"})]}
_WARMUP_SPEC = {
    "containers": [container("app")],
    "initContainers": [container("warmup", limits={GPU: "1"})],
}
_CUDA = _one("spec.containers[0].resources.limits[nvidia.com/gpu]", "cuda")

EXCEPTION_CASES: tuple[ExceptionCase, ...] = (
    ExceptionCase(
        "matching",
        _LEGACY_SPEC,
        {"exception": "vendor"},
        EXCEPTED_NAMESPACE,
        selected=True,
        days_before_end=None,
        warns=(
            f"exception vendor-image until {UNTIL} (end of day UTC): 1 legacy request "
            "(container cuda) allowed in this dra-only namespace; reason: vendor image reads",
        ),
        excepted="vendor-image",
    ),
    ExceptionCase(
        "not matching: another object label",
        _LEGACY_SPEC,
        {"exception": "other"},
        EXCEPTED_NAMESPACE,
        selected=False,
        days_before_end=None,
        offences=_CUDA,
    ),
    ExceptionCase(
        "not matching: a namespace the exception does not select",
        _LEGACY_SPEC,
        {"exception": "vendor"},
        {"exceptions": "elsewhere"},
        selected=False,
        days_before_end=None,
        offences=_CUDA,
    ),
    ExceptionCase(
        "expired",
        _LEGACY_SPEC,
        {"exception": "ended"},
        EXCEPTED_NAMESPACE,
        selected=True,
        days_before_end=None,
        offences=_CUDA,
        warns=("exception ended ended 2020-01-31 (end of day UTC) no longer applies",),
    ),
    ExceptionCase(
        "the day after until",
        _LEGACY_SPEC,
        {"exception": "vendor"},
        EXCEPTED_NAMESPACE,
        selected=True,
        days_before_end=-1,
        offences=_CUDA,
        warns=(f"exception vendor-image ended {UNTIL} (end of day UTC) no longer applies",),
    ),
    ExceptionCase(
        "its last day",
        _LEGACY_SPEC,
        {"exception": "vendor"},
        EXCEPTED_NAMESPACE,
        selected=True,
        days_before_end=0,
        warns=(f"exception vendor-image until {UNTIL} (end of day UTC, its last day)",),
        excepted="vendor-image",
    ),
    ExceptionCase(
        "14 days before",
        _LEGACY_SPEC,
        {"exception": "vendor"},
        EXCEPTED_NAMESPACE,
        selected=True,
        days_before_end=14,
        warns=(f"exception vendor-image until {UNTIL} (end of day UTC, 14 days left)",),
        excepted="vendor-image",
    ),
    ExceptionCase(
        "15 days before: no count yet",
        _LEGACY_SPEC,
        {"exception": "vendor"},
        EXCEPTED_NAMESPACE,
        selected=True,
        days_before_end=15,
        warns=(f"exception vendor-image until {UNTIL} (end of day UTC): 1 legacy request",),
        excepted="vendor-image",
    ),
    ExceptionCase(
        "containers: the one it names",
        _WARMUP_SPEC,
        {"exception": "warmup"},
        EXCEPTED_NAMESPACE,
        selected=True,
        days_before_end=None,
        warns=("exception warmup-only until 2999-12-31 (end of day UTC): 1 legacy request",),
        kinds=("Pod",),
        excepted="warmup-only",
    ),
    ExceptionCase(
        "containers: another one is still denied",
        {
            "containers": [container("cuda", limits={GPU: "2"})],
            "initContainers": [container("warmup", limits={GPU: "1"})],
        },
        {"exception": "warmup"},
        {"exceptions": "any-value"},
        selected=True,
        days_before_end=None,
        offences=_CUDA,
        warns=("exception warmup-only until 2999-12-31",),
        kinds=("Pod",),
        excepted="warmup-only",
    ),
    ExceptionCase(
        "kinds: a Deployment when the exception names Pod only",
        _WARMUP_SPEC,
        {"exception": "warmup"},
        EXCEPTED_NAMESPACE,
        selected=False,
        days_before_end=None,
        offences=_one("spec.initContainers[0].resources.limits[nvidia.com/gpu]", "warmup"),
        kinds=("Deployment", "CronJob"),
    ),
)
