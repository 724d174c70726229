"""Translation's memo (`translate.translations`): a Pod's spec translated once is not planned again
while what the plan read from the view stays as it was, and every answer from it is the one a
pipeline that never saw the spec gives. What the claims meet in the cluster (free devices, quota)
is judged on every review, never remembered."""

from __future__ import annotations

import copy
import re
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.cluster.view import Kind
from app.pipeline import Decision, Endpoint, Pipeline
from app.policies.translate import translations
from app.transport.review import decode_review
from tests.helpers import make_pipeline, policy_from, wrap
from tests.policies.mapped_objects import (
    GPU,
    cluster,
    container,
    held,
    mapping_class,
    pod,
)

Obj = dict[str, Any]
NS = "ml-research"
pytestmark = pytest.mark.usefixtures("roomy_cache_budget")


def _mutate(where: Pipeline, obj: Obj, name: str = "p") -> Decision:
    obj = copy.deepcopy(obj)
    obj["metadata"]["name"] = name
    body = wrap(obj)
    body["request"]["uid"] = f"uid-{name}"
    return where.review(Endpoint.MUTATE, decode_review(orjson.dumps(body)))


def _memo(where: Pipeline) -> Any:
    return where.parts[translations]


def _fresh(obj: Obj, objects: list[Obj], policy: str = "{}") -> Decision:
    return _mutate(make_pipeline(objects, policy_from(policy)), obj, "fresh")


def _named(text: str) -> str:
    """Text with the pod's own name (its reviews' one difference) made alike."""
    return re.sub(r"\bPod [a-z0-9-]+", "Pod P", text)


def _same(a: Decision, b: Decision) -> None:
    def seen(d: Decision) -> tuple[Any, ...]:
        words = tuple(_named(w) for w in d.warnings)
        return (d.allowed, d.patch, words, d.templates, d.translated, _named(d.message))

    assert seen(a) == seen(b)


def test_the_pods_of_one_spec_are_planned_once_and_answered_alike() -> None:
    where = make_pipeline(cluster(mapped=False))
    first = _mutate(where, pod(NS, container("cuda", 2)), "trainer-0")
    misses = _memo(where).misses
    second = _mutate(where, pod(NS, container("cuda", 2)), "trainer-1")
    assert first.allowed and first.templates
    assert _memo(where).misses == misses and _memo(where).hits >= 1
    _same(first, second)
    _same(second, _fresh(pod(NS, container("cuda", 2)), cluster(mapped=False)))


def test_a_dra_pod_is_answered_without_a_key_or_a_plan() -> None:
    """Nothing to translate (no legacy name in any container): allowed before the memo's key is
    built, the memo neither asked nor filled, as `plan` would have found nothing."""
    where = make_pipeline(cluster(mapped=False))
    dra = pod(NS, {"name": "cuda", "image": "c", "resources": {"requests": {"cpu": "1"}}})
    before = (_memo(where).hits, _memo(where).misses, len(_memo(where)))
    decision = _mutate(where, dra)
    assert decision.allowed and not decision.templates and not decision.translated
    assert (_memo(where).hits, _memo(where).misses, len(_memo(where))) == before
    _same(decision, _fresh(dra, cluster(mapped=False)))


def _with_token(obj: Obj, suffix: str) -> Obj:
    """`obj` as the API server hands it to admission: the service account's token volume, a
    name of its own per pod, mounted in every container."""
    obj = copy.deepcopy(obj)
    volume = f"kube-api-access-{suffix}"
    obj["spec"]["volumes"] = [{"name": volume, "projected": {"sources": []}}]
    for c in obj["spec"]["containers"]:
        c["volumeMounts"] = [{"name": volume, "mountPath": "/var/run/secrets"}]
    return obj


def test_the_pods_of_a_workload_share_a_plan_though_each_has_a_token_volume_of_its_own() -> None:
    where = make_pipeline(cluster(mapped=False))
    spec = pod(NS, container("cuda", 2))
    first = _mutate(where, _with_token(spec, "x7k2p"), "trainer-0")
    hits = _memo(where).hits
    second = _mutate(where, _with_token(spec, "q9w4z"), "trainer-1")
    assert _memo(where).hits == hits + 1
    _same(first, second)
    _same(second, _fresh(_with_token(spec, "q9w4z"), cluster(mapped=False)))


def test_an_init_container_and_a_sidecar_of_the_same_resources_are_told_apart() -> None:
    where = make_pipeline(cluster(mapped=False))
    plain = pod(NS, container("cuda", 1), init=(container("warm", 1),))
    sidecar = copy.deepcopy(plain)
    sidecar["spec"]["initContainers"][0]["restartPolicy"] = "Always"
    for obj in (plain, sidecar):
        _same(_mutate(where, obj), _fresh(obj, cluster(mapped=False)))
    assert _mutate(where, plain).patch != _mutate(where, sidecar).patch


def test_the_claims_are_judged_against_the_devices_free_now_not_when_planned() -> None:
    where = make_pipeline(cluster(mapped=False))
    spec = pod(NS, container("cuda", 8))
    assert _mutate(where, spec, "a").allowed  # (planned and kept)
    free = _mutate(where, spec, "b")
    assert not any("not now" in w for w in free.warnings)
    taken = [held("h-a", "other", "node-a", 8), held("h-b", "other", "node-b", 8)]
    for claim in taken:
        where.view.apply(Kind.RESOURCE_CLAIM, claim)
    hits = _memo(where).hits
    busy = _mutate(where, spec, "c")
    assert _memo(where).hits == hits + 1  # claims changed: the plan did not read them
    assert any("not now" in w for w in busy.warnings)
    _same(busy, _fresh(spec, cluster(*taken, mapped=False)))


def test_a_deviceclass_that_comes_to_map_the_name_is_seen_at_once() -> None:
    policy = "translation: {leaveMapped: true}"
    where = make_pipeline(cluster(mapped=False), policy_from(policy))
    spec = pod(NS, container("cuda", 2))
    before = _mutate(where, spec, "a")
    assert before.templates and before.translated == ("mapping",)
    where.view.apply(Kind.DEVICE_CLASS, mapping_class())  # the class now maps nvidia.com/gpu
    after = _mutate(where, spec, "b")
    assert not after.templates and after.translated == ("left:deviceclass",)
    _same(after, _fresh(spec, cluster(), policy))


def test_a_template_that_fills_the_namespace_is_seen_at_once() -> None:
    policy = "translation: {maxTemplatesPerNamespace: 1}"
    where = make_pipeline(cluster(mapped=False), policy_from(policy))
    spec = pod(NS, container("cuda", 3))
    assert _mutate(where, spec, "a").allowed
    other = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {
            "name": "dra-other",
            "namespace": NS,
            "labels": {"app.kubernetes.io/managed-by": "dra-webhook"},
        },
        "spec": {"spec": {"devices": {"requests": []}}},
    }
    where.view.apply(Kind.RESOURCE_CLAIM_TEMPLATE, other)
    full = _mutate(where, spec, "b")
    assert not full.allowed
    assert "translation.maxTemplatesPerNamespace" in full.message


def test_metadata_the_patch_writes_into_is_part_of_the_key() -> None:
    where = make_pipeline(cluster(mapped=False))
    bare = pod(NS, container("cuda", 1))
    annotated = copy.deepcopy(bare)
    annotated["metadata"]["annotations"] = {"team": "a"}
    for obj in (bare, annotated, bare, annotated):
        obj_copy = copy.deepcopy(obj)
        decision = _mutate(where, obj_copy, "x")
        _same(decision, _fresh(obj_copy, cluster(mapped=False)))


COUNTS = st.sampled_from(["0", "1", "2", "3", "8", "9", "1.5", "x"])
NAMES = st.sampled_from([GPU, "nvidia.com/mig-1g.10gb", "amd.com/gpu", "cpu"])


@st.composite
def _containers(draw: Any) -> Obj:
    asked = draw(st.dictionaries(NAMES, COUNTS, min_size=0, max_size=2))
    resources: Obj = {}
    if asked:
        resources["limits"] = asked
        if draw(st.booleans()):
            resources["requests"] = dict(asked)
    out: Obj = {"name": draw(st.sampled_from(["a", "b", "c"])), "image": "cuda"}
    if resources:
        out["resources"] = resources
    if draw(st.booleans()):
        out["restartPolicy"] = "Always"
    return out


SPECS = st.fixed_dictionaries(
    {"containers": st.lists(_containers(), min_size=1, max_size=3)},
    optional={
        "initContainers": st.lists(_containers(), min_size=1, max_size=2),
        "priorityClassName": st.sampled_from(["", "high"]),
    },
)
SHARED = make_pipeline(cluster(mapped=False))


@settings(max_examples=60, deadline=None)
@given(SPECS, st.booleans())
def test_an_answer_from_the_memo_is_the_answer_of_a_pipeline_that_never_saw_the_spec(
    spec: Obj, annotated: bool
) -> None:
    obj = pod(NS)
    obj["spec"] = spec
    if annotated:
        obj["metadata"]["annotations"] = {"team": "a"}
    first = _mutate(SHARED, obj, "one")
    again = _mutate(SHARED, obj, "two")
    _same(first, again)
    _same(again, _fresh(obj, cluster(mapped=False)))
    # what the key leaves out (volumes, mounts, images, env) changes nothing in the answer
    other = _with_token(obj, "a1b2c")
    for c in other["spec"]["containers"]:
        c["image"], c["env"] = "other", [{"name": "A", "value": "1"}]
    _same(_mutate(SHARED, other, "three"), _fresh(other, cluster(mapped=False)))
