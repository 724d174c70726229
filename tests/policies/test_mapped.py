"""Mapped names (app/policies/mapped.py): which requests of a pod the scheduler serves from a
DeviceClass itself, as the one claim it makes for them, and which of them reach it as written
in each namespace mode."""

from __future__ import annotations

from typing import Any

import pytest

from app.k8s.objects import PodSpecRef
from app.pipeline import Pipeline
from app.policies.base import Context, Mode
from app.policies.mapped import left_to_scheduler, mapped_requests, special_claim
from tests.helpers import make_view, policy_from
from tests.policies.mapped_objects import (
    CLASS,
    GPU,
    IMPLICIT,
    cluster,
    container,
    mapping_class,
    pipeline,
    pod,
)

Obj = dict[str, Any]


def _spec(obj: Obj) -> PodSpecRef:
    return PodSpecRef.of(obj["spec"], "spec", "/spec", obj["metadata"])


def _found(obj: Obj, *extra: Obj, mapped: bool = True) -> list[tuple[str, str, int, str, str]]:
    view = make_view(cluster(*extra, mapped=mapped))
    return [
        (m.path, m.resource, m.count, m.device_class, m.request_name)
        for m in mapped_requests(_spec(obj), view)
    ]


def test_a_mapped_name_is_one_request_per_container_named_as_the_scheduler_names_it() -> None:
    obj = pod(
        "default",
        container("cuda", 2, limits=False),
        container("side", 1),
        init=(container("warm", 1),),
    )
    obj["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "1"
    # index over initContainers + containers; j: the name's index in the container's sorted
    # requests (cpu sorts before nvidia.com/gpu)
    assert _found(obj) == [
        ("spec.initContainers[0].resources.limits[nvidia.com/gpu]", GPU, 1, CLASS,
         "container-0-request-0"),
        ("spec.containers[0].resources.requests[nvidia.com/gpu]", GPU, 2, CLASS,
         "container-1-request-1"),
        ("spec.containers[1].resources.limits[nvidia.com/gpu]", GPU, 1, CLASS,
         "container-2-request-0"),
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("resources", "expected"),
    [
        pytest.param({"limits": {GPU: "0"}, "requests": {GPU: "0"}}, [], id="zero asks for none"),
        pytest.param({"limits": {"cpu": "2", "memory": "1Gi"}}, [], id="native resources"),
        pytest.param({"limits": {"example.com/fpga": "1"}}, [], id="a name no class maps"),
        pytest.param(
            {"limits": {GPU: "3"}},
            [(GPU, 3, CLASS)],
            id="a template's limits (not defaulted into requests)",
        ),
        pytest.param(
            {"requests": {IMPLICIT: "2"}, "limits": {IMPLICIT: "2"}},
            [(IMPLICIT, 2, CLASS)],
            id="the implicit name of every class",
        ),
        pytest.param(
            {"limits": {"deviceclass.resource.kubernetes.io/nope.example": "1"}},
            [("deviceclass.resource.kubernetes.io/nope.example", 1, "nope.example")],
            id="the implicit name of a class that does not exist",
        ),
    ],
)
def test_what_counts_as_a_mapped_request(resources: Obj, expected: list[Any]) -> None:
    obj = pod("default", {"name": "c", "image": "x", "resources": resources})
    assert [(r, n, c) for _, r, n, c, _ in _found(obj)] == expected


def test_ephemeral_containers_and_unmapped_clusters_ask_the_scheduler_for_nothing() -> None:
    obj = pod("default", ephemeralContainers=[container("debug", 1)])
    obj["spec"]["containers"] = [{"name": "app", "image": "x"}]
    assert _found(obj) == []
    assert _found(pod("default", container("cuda", 1)), mapped=False) == []


def test_the_special_claim_holds_one_exact_count_request_per_mapped_request() -> None:
    obj = pod("default", container("a", 2), container("b", 1, IMPLICIT))
    found = mapped_requests(_spec(obj), make_view(cluster()))
    claim = special_claim(found, "spec")
    assert [
        (r.name, a.device_class, a.allocation_mode, a.count, a.selectors)
        for r in claim.spec.requests
        for a in r.alternatives
    ] == [
        ("container-0-request-0", CLASS, "ExactCount", 2, ()),
        ("container-1-request-0", CLASS, "ExactCount", 1, ()),
    ]


EXCEPTIONS = """
exceptions:
  - name: legacy-trainer
    namespaceSelector: {}
    objectSelector: {matchLabels: {app: trainer}}
    until: UNTIL
    reason: waiting for the new image
"""


def _context(where: Pipeline, ns: str) -> Context:
    labels = where.view.namespace_labels(ns)
    assert labels is not None
    modes = {"dra-only": Mode.DRA_ONLY, "translate": Mode.TRANSLATE, "audit": Mode.AUDIT}
    return Context(
        where.view, where.policy, where.parts, modes.get(labels.get("gpu-mode", "")), labels
    )


@pytest.mark.parametrize(
    ("ns", "policy", "left"),
    [
        pytest.param("ml-audit", "", [GPU, IMPLICIT], id="audit: all as written"),
        pytest.param("default", "", [GPU, IMPLICIT], id="no mode: all as written"),
        pytest.param("ml-research", "", [IMPLICIT], id="translate rewrites the legacy name"),
        pytest.param(
            "ml-research",
            "translation: {leaveMapped: true}",
            [GPU, IMPLICIT],
            id="translate leaves it to the scheduler when the policy says so",
        ),
        pytest.param("gpu-e2e", "", [IMPLICIT], id="dra-only denies the legacy name"),
        pytest.param(
            "gpu-e2e", "draOnly: {mappedNames: allow}", [GPU, IMPLICIT], id="dra-only allows it"
        ),
        pytest.param(
            "gpu-e2e",
            EXCEPTIONS.replace("UNTIL", "2999-12-31"),
            [GPU, IMPLICIT],
            id="dra-only: an active exception lets it through",
        ),
        pytest.param(
            "gpu-e2e",
            EXCEPTIONS.replace("UNTIL", "2020-01-01"),
            [IMPLICIT],
            id="dra-only: an exception that ended does not",
        ),
        pytest.param(
            "ml-research",
            EXCEPTIONS.replace("UNTIL", "2999-12-31"),
            [GPU, IMPLICIT],
            id="translate: an exception leaves the pod as written",
        ),
    ],
)
def test_what_reaches_the_scheduler_as_written_in_each_mode(
    ns: str, policy: str, left: list[str]
) -> None:
    where = pipeline(policy=policy_from(policy) if policy else None)
    obj = pod(ns, container("cuda", 2), container("side", 1, IMPLICIT))
    found = left_to_scheduler("Pod", _spec(obj), _context(where, ns))
    assert [m.resource for m in found] == left


def test_a_translate_exception_covering_some_containers_leaves_nothing_legacy() -> None:
    policy = EXCEPTIONS.replace("UNTIL", "2999-12-31").replace(
        "reason:", "containers: [cuda]\n    reason:"
    )
    where = pipeline(policy=policy_from(policy))
    obj = pod("ml-research", container("cuda", 2), container("other", 1))
    # translation rewrites the whole pod when an exception covers only part of it
    assert left_to_scheduler("Pod", _spec(obj), _context(where, "ml-research")) == ()


def test_of_two_classes_mapping_the_name_the_newest_serves_it_as_the_scheduler_picks() -> None:
    older, newer = mapping_class("gpu-a.nvidia.com"), mapping_class("gpu-b.nvidia.com")
    older["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
    newer["metadata"]["creationTimestamp"] = "2026-06-01T00:00:00Z"
    view = make_view(cluster(newer, older, mapped=False))
    found = mapped_requests(_spec(pod("default", container("cuda", 1))), view)
    assert [m.device_class for m in found] == ["gpu-b.nvidia.com"]
