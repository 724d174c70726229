"""One call per pod in a translate namespace, through the real ASGI app: `/mutate` answers what
`/validate` would have said (joint satisfiability of the pod's claims, quotas, DeviceClass
allow-lists), and marks a pod it judged whole with the claims it judged, folded into the one
annotations op of the patch; a mark the pod arrived with is rewritten, or removed whenever the
call did not judge the pod whole (app/policies/translate_judged.py). The chart's side (the
matchCondition that reads the mark) is tests/chart/test_chart_one_call.py.
"""

from __future__ import annotations

import asyncio
import base64
import copy
from collections.abc import Callable, Iterator
from typing import Any

import jsonpatch
import orjson
import pytest

from app.cluster.view import Kind
from app.config import Settings, load_policy
from app.metrics import Metrics
from app.pipeline import REGISTRATIONS, Endpoint, Pipeline, Registration
from app.policies.base import Context, Request, Result
from app.policies.translate import TRANSLATED_ANNOTATION
from app.policies.translate_judged import JUDGED_ANNOTATION
from app.transport.app import create_app
from app.transport.review import decode_review
from tests.helpers import DEMO_NAMESPACES, AppHarness, build_app, make_view, policy_from, wrap
from tests.policies.selector_objects import device_class
from tests.transport.helpers import SlowSource, admit_concurrently

Obj = dict[str, Any]
NS = "ml-research"
GPU, MIG = "gpu.nvidia.com", "mig.nvidia.com"


def _slice(node: str, driver: str, devices: int) -> Obj:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{driver}", "resourceVersion": "1"},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": f"{node}-{driver}", "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": f"dev-{i}"} for i in range(devices)],
        },
    }


SPLIT = [_slice("node-a", GPU, 2), _slice("node-b", MIG, 2)]
"""GPUs on one node, MIG devices on the other: a pod cannot have both."""
CLUSTER = [*DEMO_NAMESPACES, device_class(GPU), device_class(MIG), *SPLIT]


def _template(name: str, count: int, device_class_name: str = GPU) -> Obj:
    request = {"name": "gpu", "exactly": {"deviceClassName": device_class_name, "count": count}}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"spec": {"devices": {"requests": [request]}}},
    }


def _pod(gpus: int = 1, template: str | None = None, annotations: Obj | None = None) -> Obj:
    containers: list[Obj] = []
    if gpus:
        limits = {"nvidia.com/gpu": str(gpus)}
        containers.append(
            {"name": "cuda", "image": "c", "resources": {"limits": limits, "requests": limits}}
        )
    spec: Obj = {"containers": containers}
    if template is not None:
        spec["resourceClaims"] = [{"name": "own", "resourceClaimTemplateName": template}]
        containers.append({"name": "own", "image": "o", "resources": {"claims": [{"name": "own"}]}})
    meta: Obj = {"name": "p", "namespace": NS}
    if annotations is not None:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


@pytest.fixture
def make_app() -> Iterator[Callable[..., AppHarness]]:
    made: list[AppHarness] = []

    def make(objects: list[Obj] | None = None, policy: str = "{}") -> AppHarness:
        harness = build_app(CLUSTER if objects is None else objects, policy_from(policy))
        made.append(harness)
        return harness

    yield make
    for harness in made:
        harness.client.__exit__(None, None, None)


def _patch(response: Obj) -> list[Obj]:
    if "patch" not in response:
        return []
    ops: list[Obj] = orjson.loads(base64.b64decode(response["patch"]))
    return ops


def _stored(pod: Obj, response: Obj) -> Obj:
    assert response["allowed"] is True, response.get("status")
    patched: Obj = jsonpatch.apply_patch(pod, _patch(response))
    return patched


# -- the mark ---------------------------------------------------------------------------------


def test_a_translated_pod_is_marked_with_its_claims_in_the_one_annotations_op(
    make_app: Callable[..., AppHarness],
) -> None:
    harness = make_app()
    pod = _pod()
    response = harness.answer("mutate", wrap(pod))
    stored = _stored(pod, response)
    (entry,) = stored["spec"]["resourceClaims"]
    annotations = stored["metadata"]["annotations"]
    assert annotations[JUDGED_ANNOTATION] == f"t:{entry['resourceClaimTemplateName']}"
    assert TRANSLATED_ANNOTATION in annotations
    (op,) = [op for op in _patch(response) if "annotations" in op["path"]]
    assert op == {"op": "add", "path": "/metadata/annotations", "value": annotations}

    again = harness.answer("mutate", wrap(stored))  # reinvoked: nothing left to change
    assert again["allowed"] is True
    assert _patch(again) == []


def test_legacy_names_added_back_after_the_translation_are_refused_at_validation(
    make_app: Callable[..., AppHarness],
) -> None:
    """A later mutating webhook or policy writes nvidia.com/gpu back into a translated pod: its
    validating call (any extended resource sends it) refuses it, naming the field; the pod as
    translated is allowed there, and an unmarked legacy pod is not held to it."""
    harness = make_app()
    stored = _stored(_pod(), harness.answer("mutate", wrap(_pod())))
    assert harness.answer("validate", wrap(stored))["allowed"] is True
    readded = copy.deepcopy(stored)
    readded["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/gpu": "1"}
    answer = harness.answer("validate", wrap(readded))
    assert answer["allowed"] is False
    assert answer["status"]["message"] == (
        f"namespace {NS} translates device-plugin requests into DRA claims (gpu-mode=translate), "
        "but Pod p asks for legacy extended resources again after dra-webhook translated it:\n"
        "- spec.containers[0].resources.limits[nvidia.com/gpu]: container cuda asks for "
        "nvidia.com/gpu: 1\n"
        "A mutating webhook or admission policy that runs after dra-webhook added them; it must "
        f"leave translated pods alone (their {TRANSLATED_ANNOTATION} annotation says what was "
        "translated)."
    )
    unmarked = copy.deepcopy(readded)
    del unmarked["metadata"]["annotations"][JUDGED_ANNOTATION]
    assert harness.answer("validate", wrap(unmarked))["allowed"] is True
    # the mutating call never runs it: the pod it judges is the one before any later mutation
    assert harness.answer("mutate", wrap(_pod()))["allowed"] is True


def test_a_name_translation_leaves_to_the_scheduler_is_no_offence_when_marked(
    make_app: Callable[..., AppHarness],
) -> None:
    """With leaveMapped and a DeviceClass that maps nvidia.com/gpu, the pod keeps its name as
    written; marked for its own (MIG) claim, its validating call allows it."""
    mapped = device_class(GPU)
    mapped["spec"]["extendedResourceName"] = "nvidia.com/gpu"
    one_node = [_slice("node-a", GPU, 2), _slice("node-a", MIG, 2)]
    harness = make_app(
        [*DEMO_NAMESPACES, mapped, device_class(MIG), *one_node, _template("one", 1, MIG)],
        "translation: {leaveMapped: true}",
    )
    pod = _pod(1, template="one")
    stored = _stored(pod, harness.answer("mutate", wrap(pod)))
    assert stored["metadata"]["annotations"][JUDGED_ANNOTATION] == "t:one"
    assert stored["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "1"}
    assert harness.answer("validate", wrap(stored))["allowed"] is True


def test_a_pod_with_its_own_annotations_gets_one_more_key(
    make_app: Callable[..., AppHarness],
) -> None:
    pod = _pod(0, template="one", annotations={"team": "a"})
    harness = make_app([*CLUSTER, _template("one", 1, MIG)])
    response = harness.answer("mutate", wrap(pod))
    assert _patch(response) == [
        {"op": "add", "path": "/metadata/annotations/dra-webhook~1judged-claims", "value": "t:one"}
    ]


def test_a_mark_the_pod_arrived_with_is_replaced_by_what_was_judged(
    make_app: Callable[..., AppHarness],
) -> None:
    harness = make_app([*CLUSTER, _template("one", 1, MIG)])
    forged = _pod(0, template="one", annotations={JUDGED_ANNOTATION: "t:something-else"})
    stored = _stored(forged, harness.answer("mutate", wrap(forged)))
    assert stored["metadata"]["annotations"][JUDGED_ANNOTATION] == "t:one"


# -- what validation would deny, denied by the mutating call ----------------------------------


DENIALS = [
    pytest.param(
        1,
        [_template("own", 1, MIG)],
        "cel: {selectors: {unsatisfiable: deny}}",
        "no node in the cluster can satisfy the claims of Pod p",
        id="joint-satisfiability",
    ),
    pytest.param(
        2,
        [],
        "quotas: [{name: small, namespaceSelector: {matchLabels: {gpu-mode: translate}},"
        " action: deny, maxDevicesPerNamespace: {gpu.nvidia.com: 1}}]",
        "namespace ml-research allows 1",
        id="namespace-quota",
    ),
    pytest.param(
        1,
        [_template("own", 1, MIG)],
        "deviceClasses: [{name: whole, namespaceSelector: {matchLabels: {gpu-mode: translate}},"
        " allowed: [gpu.nvidia.com]}]",
        "DeviceClass mig.nvidia.com, which namespace ml-research may not use",
        id="device-class-allow-list",
    ),
]


@pytest.mark.parametrize(("gpus", "objects", "policy", "why"), DENIALS)
def test_what_the_validating_call_denies_the_mutating_call_denies_first(
    gpus: int, objects: list[Obj], policy: str, why: str, make_app: Callable[..., AppHarness]
) -> None:
    """A pod with a MIG claim of its own asks for a whole GPU the legacy way: no node has
    both; two GPUs in a namespace allowed one; its own claim is of a class the namespace may
    not use. The validating call would deny the translated pod; now the mutating call does,
    before any template is made."""
    pod = _pod(gpus, template="own" if objects else None)
    lenient = make_app([*CLUSTER, *objects])
    translated = _stored(pod, lenient.answer("mutate", wrap(pod)))
    made = lenient.source.created_templates
    harness = make_app([*CLUSTER, *objects, *made], policy)
    response = harness.answer("mutate", wrap(pod))
    assert response["allowed"] is False
    assert why in response["status"]["message"]
    assert harness.source.created_templates == []
    validated = harness.answer("validate", wrap(translated))  # as the validating call says
    assert validated["allowed"] is False
    assert why in validated["status"]["message"]


def test_what_translation_judged_together_is_not_judged_again(
    make_app: Callable[..., AppHarness],
) -> None:
    """Its own MIG claim and the GPU claim made fit one node together: allowed, and the
    joint verdict is translation's alone (pod-satisfiability does not run in the same call)."""
    both = [_slice("node-a", GPU, 2), _slice("node-a", MIG, 2)]
    objects = [
        *DEMO_NAMESPACES,
        device_class(GPU),
        device_class(MIG),
        *both,
        _template("own", 1, MIG),
    ]
    harness = make_app(objects, "cel: {selectors: {unsatisfiable: deny}}")
    pod = _pod(1, template="own")
    stored = _stored(pod, harness.answer("mutate", wrap(pod)))
    made = stored["spec"]["resourceClaims"][1]["resourceClaimTemplateName"]
    assert stored["metadata"]["annotations"][JUDGED_ANNOTATION] == f"t:own,t:{made}"


# -- a call that did not judge the pod whole leaves no mark ------------------------------------


def test_a_stale_view_leaves_the_pod_to_its_validating_call(
    make_app: Callable[..., AppHarness],
) -> None:
    harness = make_app([*CLUSTER, _template("one", 1, MIG)])
    harness.source.view.mark_stale(Kind.RESOURCE_CLAIM)
    forged = _pod(0, template="one", annotations={JUDGED_ANNOTATION: "t:one"})
    response = harness.answer("mutate", wrap(forged))
    assert any("out of date" in w for w in response["warnings"])
    assert JUDGED_ANNOTATION not in _stored(forged, response)["metadata"]["annotations"]
    plain = _pod(0, template="one")
    assert _patch(harness.answer("mutate", wrap(plain))) == []


def test_a_pod_admitted_untranslated_after_a_failed_create_leaves_no_mark() -> None:
    source = SlowSource([*DEMO_NAMESPACES], error="the API server is unreachable")
    policy = policy_from("failure: {templateCreate: open}")
    forged = _pod(annotations={JUDGED_ANNOTATION: ""})
    (response,) = asyncio.run(admit_concurrently(source, [wrap(forged)], policy))
    assert response["allowed"] is True
    assert "admitted untranslated" in response["warnings"][0]
    assert _patch(response) == [
        {"op": "remove", "path": "/metadata/annotations/dra-webhook~1judged-claims"}
    ]


def _raising(request: Request, ctx: Context) -> Result:
    raise RuntimeError("a bug")


def test_a_check_that_failed_leaves_no_mark() -> None:
    boom = Registration(
        "boom", Endpoint.VALIDATE, frozenset({("", "Pod")}), frozenset({"CREATE"}), _raising
    )
    pipeline = Pipeline(load_policy(), make_view(CLUSTER), "dra-webhook", (*REGISTRATIONS, boom))
    forged = _pod(annotations={JUDGED_ANNOTATION: "x"})
    decision = pipeline.review(Endpoint.MUTATE, decode_review(orjson.dumps(wrap(forged))))
    assert decision.allowed and decision.failed_checks == ("boom",)
    assert not decision.vouched
    stored = jsonpatch.apply_patch(forged, list(decision.patch))
    assert JUDGED_ANNOTATION not in stored["metadata"]["annotations"]
    assert stored["spec"]["resourceClaims"]  # translated all the same


def test_a_bug_answering_the_review_leaves_no_mark(monkeypatch: pytest.MonkeyPatch) -> None:
    app = create_app(Settings(), policy=load_policy(), source=None, metrics=Metrics())
    webhook = app.state.webhook

    def broken(*_: Any) -> Any:
        raise RuntimeError("a bug")

    monkeypatch.setattr(webhook.pipeline, "review", broken)
    forged = _pod(annotations={JUDGED_ANNOTATION: "x"})
    request = decode_review(orjson.dumps(wrap(forged)))
    decision = webhook.pipeline.settle(
        Endpoint.MUTATE, request, webhook.pipeline.internal_failure()
    )
    assert decision.allowed  # failure.internalError: open
    assert decision.patch == (
        {"op": "remove", "path": "/metadata/annotations/dra-webhook~1judged-claims"},
    )
