"""Properties of the scan (`app/workloads/scan.py`): nothing silent, nothing invented.

A custom resource of a kind the catalogue does not know can hold a GPU request anywhere; the
scan must find a `limits`/`requests` map naming a legacy resource at any depth, under any keys
and lists, and say exactly where. It must not take a legacy name written as a value (a device
plugin's config, an operator's `gpuType`) or a zero count for a request, or it would deny and
block migrations of objects that ask for nothing. And for a kind it does know, the requests in
the pod templates the catalogue rewrites are not findings: they are translation's to rewrite.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.cluster.view import ClusterView
from app.config import load_policy
from app.migrate.objects import Rules
from app.workloads import builtin, scan

FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

LEGACY = "nvidia.com/gpu"


@functools.cache
def _is_legacy() -> Callable[[str], bool]:
    """The default policy's legacy names, as migrate and the webhook build them."""
    return Rules.build(load_policy(None), ClusterView()).translation.legacy


# Plain field names: never the keys the scan reads specially (`limits`, `requests`,
# `annotations`), so the path to the request is the one drawn.
_keys = st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=1, max_size=8).filter(
    lambda k: k not in ("limits", "requests", "annotations", "apiVersion", "kind")
)
_scalars = st.one_of(
    st.integers(-3, 100), st.booleans(), st.none(), _keys, st.sampled_from(["", "1", "x y"])
)
_noise = st.dictionaries(_keys, _scalars, max_size=3)
# one step down: into a map under a key (with sibling fields), or into a list at an index
# (with sibling items)
_steps = st.lists(
    st.one_of(
        st.tuples(st.just("key"), _keys, _noise),
        st.tuples(st.just("item"), st.integers(0, 3), _noise),
    ),
    min_size=1,
    max_size=6,
)
_counts = st.one_of(st.integers(1, 64), st.integers(1, 64).map(str), st.sampled_from(["1k", "2"]))
_zeros = st.sampled_from([0, "0", "0k"])
_kinds = st.sampled_from(["Widget", "InferenceJob", "GpuPool"])


def _place(leaf: Any, steps: list[tuple[str, Any, dict[str, Any]]]) -> tuple[Any, str]:
    """`leaf` at the end of `steps` (outermost first), and its path as the scan writes it."""
    node, path = leaf, ""
    for how, at, noise in reversed(steps):
        if how == "key":
            node = {**{k: v for k, v in noise.items() if k != at}, at: node}
            path = f".{at}{path}"
        else:
            items: list[Any] = list(noise.values())[:at]
            node = [*items, node, *list(noise.values())[at:]]
            path = f"[{len(items)}]{path}"
    return node, path


def _object(kind: str, body: Any, top: str) -> dict[str, Any]:
    return {"apiVersion": "example.com/v1", "kind": kind, "metadata": {"name": "x"}, top: body}


def _scan(obj: dict[str, Any]) -> tuple[Any, ...]:
    return scan("example.com", obj["kind"], obj, builtin(), _is_legacy())


@FAST
@given(
    kind=_kinds,
    top=_keys,
    steps=_steps,
    count=_counts,
    which=st.sampled_from(["limits", "requests"]),
)
def test_a_gpu_request_at_any_depth_of_an_unknown_kind_is_reported_with_its_path(
    kind: str, top: str, steps: list[tuple[str, Any, dict[str, Any]]], count: Any, which: str
) -> None:
    body, path = _place({which: {"cpu": "1", LEGACY: count}}, steps)
    found = _scan(_object(kind, body, top))
    assert [(f.path, f.resource, f.amount) for f in found] == [
        (f"{top}{path}.{which}[{LEGACY}]", LEGACY, str(count))
    ]
    assert found[0].path.endswith(f"{which}[nvidia.com/gpu]")
    assert kind in found[0].why


@FAST
@given(kind=_kinds, top=_keys, steps=_steps, zero=_zeros)
def test_a_zero_gpu_request_at_any_depth_is_never_reported(
    kind: str, top: str, steps: list[tuple[str, Any, dict[str, Any]]], zero: Any
) -> None:
    body, _ = _place({"limits": {LEGACY: zero}, "requests": {LEGACY: zero}}, steps)
    assert _scan(_object(kind, body, top)) == ()


# a legacy name where it is a value, not a key of a limits/requests map
_as_values = st.sampled_from(
    [
        {"resources": [{"name": LEGACY}]},
        {"resources": {"gpu": "1", "gpuType": LEGACY}},
        {"limits": {"example.com/device": LEGACY}},
        {"limits": [LEGACY]},
        {"requests": LEGACY},
        {"tolerations": [{"key": LEGACY, "operator": "Exists"}]},
        {"nodeSelector": {"gpu": LEGACY}},
    ]
)


@FAST
@given(kind=_kinds, top=_keys, steps=_steps, leaf=_as_values)
def test_a_legacy_name_written_as_a_value_is_never_reported(
    kind: str, top: str, steps: list[tuple[str, Any, dict[str, Any]]], leaf: dict[str, Any]
) -> None:
    body, _ = _place(leaf, steps)
    assert _scan(_object(kind, body, top)) == ()


def _pytorch_job(roles: dict[str, int], gpus: int) -> dict[str, Any]:
    def role(name: str, replicas: int) -> dict[str, Any]:
        resources = {"limits": {LEGACY: gpus}} if name == "Worker" else {"limits": {"cpu": "1"}}
        container = {"name": "pytorch", "image": "pytorch:2", "resources": resources}
        return {"replicas": replicas, "template": {"spec": {"containers": [container]}}}

    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "mnist", "namespace": "ml"},
        "spec": {"pytorchReplicaSpecs": {name: role(name, n) for name, n in roles.items()}},
    }


@FAST
@given(master=st.integers(0, 3), workers=st.integers(0, 16), gpus=st.integers(1, 8))
def test_a_pytorchjob_has_a_template_per_role_counted_by_replicas_and_no_findings(
    master: int, workers: int, gpus: int
) -> None:
    job = _pytorch_job({"Master": master, "Worker": workers}, gpus)
    templates = builtin().templates("kubeflow.org", "PyTorchJob", job)
    assert [(t.spec.path, t.pods) for t in templates] == [
        ("spec.pytorchReplicaSpecs.Master.template.spec", master),
        ("spec.pytorchReplicaSpecs.Worker.template.spec", workers),
    ]
    worker = templates[1].spec
    assert worker.pointer == "/spec/pytorchReplicaSpecs/Worker/template/spec"
    assert worker.spec["containers"][0]["resources"]["limits"] == {LEGACY: gpus}
    assert scan("kubeflow.org", "PyTorchJob", job, builtin(), _is_legacy()) == ()


def test_a_pytorchjob_request_outside_its_templates_is_reported() -> None:
    """The same request moved next to the template, where no claim can be written."""
    job = _pytorch_job({"Master": 1, "Worker": 2}, 1)
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["resources"] = {"limits": {LEGACY: 1}}
    found = scan("kubeflow.org", "PyTorchJob", job, builtin(), _is_legacy())
    assert [f.path for f in found] == [
        "spec.pytorchReplicaSpecs.Worker.resources.limits[nvidia.com/gpu]"
    ]
