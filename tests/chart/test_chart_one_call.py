"""One webhook call per pod in translate namespaces, as the chart renders it (real helm): the
validating pods entry skips a pod its mutating call judged whole, by a matchCondition on the
`dra-webhook/judged-claims` annotation the pipeline writes; the mutating entry sends every pod
that carries it; the ValidatingAdmissionPolicy refuses a judged pod given legacy names again.

The conditions are evaluated with this project's CEL engine on both backends, against pods as
the real pipeline answers them (app/policies/translate_judged.py says why none of this lets a
pod's author skip validation), then changed as a later mutation would change them.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from functools import cache
from typing import Any

import jsonpatch
import orjson
import pytest

from app.cel.engine import BACKENDS
from app.config.policy import parse_policy
from app.pipeline import Endpoint
from app.policies.translate_judged import JUDGED_ANNOTATION
from app.transport.review import decode_review
from tests.chart.helpers import (
    CHART,
    NAMESPACE,
    RELEASE,
    compile_admission,
    dra_only_policy,
    pod_verdict,
    render,
    run_helm,
)
from tests.helpers import DEMO_NAMESPACES, make_pipeline, wrap

NS = "ml-research"
Obj = dict[str, Any]

by_backend = pytest.mark.parametrize("backend", BACKENDS)


def _entries(docs: tuple[Obj, ...], kind: str) -> dict[str, Obj]:
    return {
        webhook["name"].split(".", 1)[0]: webhook
        for doc in docs
        if doc["kind"] == kind
        for webhook in doc["webhooks"]
    }


def _condition(webhook: Obj, name: str) -> str:
    (found,) = [c["expression"] for c in webhook["matchConditions"] if c["name"] == name]
    return str(found)


def _sent(expression: str, obj: Obj, backend: str) -> bool:
    variables = {"object": obj, "oldObject": None, "request": {}, "namespaceObject": None}
    result = compile_admission(expression, backend)(variables)
    assert isinstance(result, bool)
    return result


# -- pods as the pipeline answers them --------------------------------------------------------


def _pod(spec: Obj, **meta: Any) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": NS, **meta},
        "spec": spec,
    }


def _gpu(name: str = "cuda", count: int = 1, **resources: Any) -> Obj:
    limits = {"nvidia.com/gpu": str(count), **resources}
    return {"name": name, "image": "cuda:12", "resources": {"limits": limits, "requests": limits}}


LEGACY = _pod({"containers": [_gpu()]})
CLAIMS = _pod(
    {
        "containers": [{"name": "c", "image": "i", "resources": {"claims": [{"name": "a"}]}}],
        "resourceClaims": [{"name": "a", "resourceClaimName": "mine"}],
    }
)
MIXED = _pod({**CLAIMS["spec"], "containers": [*CLAIMS["spec"]["containers"], _gpu()]})


@cache
def _policy() -> Any:
    docs = render()
    (config,) = [d for d in docs if d["kind"] == "ConfigMap"]
    return parse_policy(config["data"]["policy.yaml"], "the chart's ConfigMap")


def _mutated(pod: Obj) -> Obj:
    """The pod as the API server stores it after the pipeline's mutating answer (the
    chart's own policy, the demo namespaces)."""
    pipeline = make_pipeline(DEMO_NAMESPACES, _policy())
    decision = pipeline.review(Endpoint.MUTATE, decode_review(orjson.dumps(wrap(pod))))
    assert decision.allowed, decision.message
    assert decision.vouched
    patched: Obj = jsonpatch.apply_patch(pod, list(decision.patch))
    return patched


def _with(pod: Obj, change: Callable[[Obj], None]) -> Obj:
    pod = copy.deepcopy(pod)
    change(pod)
    return pod


def _claims(pod: Obj) -> list[Obj]:
    found: list[Obj] = pod["spec"]["resourceClaims"]
    return found


def _add_claim(pod: Obj) -> None:
    _claims(pod).append({"name": "more", "resourceClaimTemplateName": "eight-gpus"})


def _swap_template(pod: Obj) -> None:
    _claims(pod)[0]["resourceClaimTemplateName"] = "eight-gpus"


def _readd_gpu(pod: Obj) -> None:
    pod["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/gpu": "1"}


def _other_extended(pod: Obj) -> None:
    pod["spec"]["containers"][0]["resources"]["limits"] = {"rdma/hca": "1"}


def _reorder(pod: Obj) -> None:
    _claims(pod).reverse()


def _forge(pod: Obj) -> None:
    pod["metadata"].setdefault("annotations", {})[JUDGED_ANNOTATION] = "c:mine"


def _relabel(pod: Obj) -> None:
    pod["metadata"]["labels"] = {"team": "a"}
    pod["spec"]["containers"].append({"name": "sidecar", "image": "proxy"})


def _judged_pods() -> list[tuple[str, Obj]]:
    return [
        ("translated legacy pod", _mutated(LEGACY)),
        ("pod with its own claims", _mutated(CLAIMS)),
        ("own claims and a translated request", _mutated(MIXED)),
    ]


# -- the validating pods entry ---------------------------------------------------------------


@by_backend
def test_a_pod_its_mutating_call_judged_is_not_sent_to_the_validating_entry(backend: str) -> None:
    entry = _entries(render(), "ValidatingWebhookConfiguration")["pods"]
    selector = {e["key"]: e for e in entry["namespaceSelector"]["matchExpressions"]}
    assert selector["gpu-mode"]["values"] == ["translate"]
    uses, judged = (_condition(entry, n) for n in ("pod-uses-devices", "not-judged-at-mutation"))
    for case, pod in _judged_pods():
        assert pod["metadata"]["annotations"][JUDGED_ANNOTATION], case
        assert _sent(uses, pod, backend), case  # it uses devices...
        assert not _sent(judged, pod, backend), case  # ...and was judged whole: no call
        # a mutation after it that leaves the claims alone keeps it so
        assert not _sent(judged, _with(pod, _relabel), backend), case


CHANGED_AFTER = [
    ("a claim added", _add_claim),
    ("a template swapped", _swap_template),
    ("claims reordered", _reorder),
    ("a legacy name added again", _readd_gpu),
    ("another extended resource", _other_extended),
]


@by_backend
@pytest.mark.parametrize(("case", "change"), CHANGED_AFTER, ids=[c[0] for c in CHANGED_AFTER])
def test_a_judged_pod_changed_after_its_mutating_call_is_validated(
    case: str, change: Callable[[Obj], None], backend: str
) -> None:
    entry = _entries(render(), "ValidatingWebhookConfiguration")["pods"]
    judged = _condition(entry, "not-judged-at-mutation")
    pod = _mutated(MIXED)
    assert not _sent(judged, pod, backend)
    assert _sent(judged, _with(pod, change), backend), case


@by_backend
def test_a_mark_the_pipeline_did_not_write_never_spares_the_validating_call(backend: str) -> None:
    """The author's own value, even one that matches: the mutating entry sends the pod (it
    carries the annotation), and the pipeline rewrites a wrong value and removes one it does
    not vouch for (tests/transport/test_judged_at_mutation.py)."""
    validating = _entries(render(), "ValidatingWebhookConfiguration")["pods"]
    mutating = _entries(render(), "MutatingWebhookConfiguration")["pods"]
    plain = _pod({"containers": [{"name": "c", "image": "i"}]})
    wrong = _with(
        _with(CLAIMS, _forge),
        lambda p: p["metadata"]["annotations"].update({JUDGED_ANNOTATION: "x"}),
    )
    assert _sent(_condition(validating, "not-judged-at-mutation"), wrong, backend)
    for pod in (_with(plain, _forge), _with(CLAIMS, _forge), wrong):
        assert _sent(_condition(mutating, "pod-uses-devices"), pod, backend)
    assert not _sent(_condition(mutating, "pod-uses-devices"), plain, backend)
    # the pipeline's answer to a forged mark on a pod it judges: its own value
    assert _mutated(wrong)["metadata"]["annotations"][JUDGED_ANNOTATION] == "c:mine"


@pytest.mark.parametrize(
    "args",
    [
        ("--set", "webhook.mutating.failurePolicy=Ignore"),
        ("--set", "webhook.mutating.enabled=false"),
        (
            "--set-json",
            'policy.cel.rules=[{"name": "r", "match": {"kinds": ["Pod"]},'
            ' "expression": "true", "message": "m"}]',
        ),
    ],
    ids=["mutating-fails-open", "no-mutating-entry", "admin-rules-on-pods"],
)
def test_without_a_mutating_call_that_always_runs_every_pod_is_validated(
    args: tuple[str, ...],
) -> None:
    for name, entry in _entries(render(*args), "ValidatingWebhookConfiguration").items():
        if name.startswith("pods"):
            assert [c["name"] for c in entry["matchConditions"]] == ["pod-uses-devices"], name


@by_backend
def test_where_the_pods_entry_sees_every_mode_translate_namespaces_get_their_own(
    backend: str,
) -> None:
    entries = _entries(
        render("--set", "admissionPolicy.enabled=false"), "ValidatingWebhookConfiguration"
    )
    modes = {
        name: next(
            e["values"]
            for e in entries[name]["namespaceSelector"]["matchExpressions"]
            if e["key"] == "gpu-mode"
        )
        for name in ("pods", "pods-translate")
    }
    assert modes == {"pods": ["dra-only", "audit"], "pods-translate": ["translate"]}
    assert [c["name"] for c in entries["pods"]["matchConditions"]] == ["pod-uses-devices"]
    judged = _condition(entries["pods-translate"], "not-judged-at-mutation")
    assert not _sent(judged, _mutated(LEGACY), backend)


def test_the_reinvocation_policy_of_every_mutating_entry_is_the_value() -> None:
    for value in ("Never", "IfNeeded"):
        args = ("--set", f"webhook.mutating.reinvocationPolicy={value}")
        args += ("--set", "policy.translation.translateWorkloads=true")
        entries = _entries(render(*args), "MutatingWebhookConfiguration")
        assert len(entries) > 2
        assert {e["reinvocationPolicy"] for e in entries.values()} == {value}
    bad = run_helm(
        "template", RELEASE, str(CHART), "--set", "webhook.mutating.reinvocationPolicy=Always"
    )
    assert bad.returncode != 0 and "reinvocationPolicy" in bad.stderr


# -- the admission policy in translate namespaces --------------------------------------------


@by_backend
def test_a_judged_pod_given_legacy_names_again_is_refused_in_the_api_server(backend: str) -> None:
    translated = _mutated(LEGACY)
    assert pod_verdict(translated, NS, "translate", backend) == (True, "")
    allowed, message = pod_verdict(_with(translated, _readd_gpu), NS, "translate", backend)
    assert not allowed
    assert message.startswith(
        f"namespace {NS} translates device-plugin requests into DRA claims (gpu-mode=translate), "
        "but the pod asks for legacy extended resources again after dra-webhook translated it: "
        "container cuda asks for nvidia.com/gpu: 1 -> use DeviceClass gpu.nvidia.com (count 1)."
    )
    assert "runs after dra-webhook" in message


@by_backend
def test_a_legacy_pod_the_webhook_did_not_judge_is_left_to_it_in_translate_namespaces(
    backend: str,
) -> None:
    """Admitted untranslated under a fail-open policy (a stale view, a failed template create):
    no mark, so the admission policy leaves it, as it did before, to the validating entry."""
    assert pod_verdict(LEGACY, NS, "translate", backend) == (True, "")
    assert not pod_verdict(LEGACY, NS, "dra-only", backend)[0]  # (the dra-only rule is unchanged)


def test_the_translate_binding_holds_pods_of_translate_namespaces_only_where_validation_may_fail_open() -> (
    None
):
    """A judged pod asking for legacy names again is refused by the validating webhook where
    that entry fails closed (no binding: ~1 ms of the API server's CPU per translated pod);
    where it may be skipped, by this binding."""
    assert not [
        d for d in render()
        if d["metadata"]["name"].endswith("-dra-only-translated")
    ]  # fmt: skip
    assert [
        d for d in render("--set", "webhook.validating.enabled=false")
        if d["metadata"]["name"].endswith("-dra-only-translated")
    ]  # fmt: skip
    (binding,) = [
        d for d in render("--set", "webhook.validating.failurePolicy=Ignore")
        if d["kind"] == "ValidatingAdmissionPolicyBinding"
        and d["metadata"]["name"].endswith("-dra-only-translated")
    ]  # fmt: skip
    spec = binding["spec"]
    assert spec["validationActions"] == ["Deny"]
    assert spec["policyName"] == dra_only_policy()["metadata"]["name"]
    (rule,) = spec["matchResources"]["resourceRules"]
    assert (rule["apiGroups"], rule["resources"], rule["operations"]) == (
        [""],
        ["pods"],
        ["CREATE"],
    )
    selector = {
        e["key"]: e for e in spec["matchResources"]["namespaceSelector"]["matchExpressions"]
    }
    assert selector["gpu-mode"] == {"key": "gpu-mode", "operator": "In", "values": ["translate"]}
    assert NAMESPACE in selector["kubernetes.io/metadata.name"]["values"]
    without = render(
        "--set", "webhook.mutating.enabled=false", "--set", "webhook.validating.failurePolicy=Ignore"
    )  # fmt: skip
    assert not [d for d in without if d["metadata"]["name"].endswith("-dra-only-translated")]
