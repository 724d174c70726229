"""Journey translate, one call per pod: a legacy pod in a translate namespace makes one webhook
call (the mutating one judges what the validating one would), and what another mutation does to
the pod after its translation is still caught: legacy names added back send the pod to the
validating webhook, which refuses them (the chart's ValidatingAdmissionPolicy does where that
webhook fails open), claims added send the pod to the validating webhook. The later mutation is a MutatingAdmissionPolicy (served by 1.36 by default) that the
API server runs again once the webhook has changed the pod (reinvocationPolicy IfNeeded), on pods
that carry dra-webhook's translated annotation: after the translation, as a webhook ordered after
dra-webhook's would.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from app.policies.translate_judged import JUDGED_ANNOTATION
from tests.e2e import objects as o
from tests.e2e.kube import ApiError, Kube
from tests.e2e.webhook import Webhook

pytestmark = [pytest.mark.journey("translate"), pytest.mark.usefixtures("webhook")]

Obj = dict[str, Any]
POLICIES = "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies"
BINDINGS = "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicybindings"
TRANSLATED = (
    "has(object.metadata.annotations) && 'dra-webhook/translated' in object.metadata.annotations"
)


MAP_SINCE = pytest.mark.since(
    36, "MutatingAdmissionPolicy (admissionregistration.k8s.io/v1) is served from 1.36"
)


def _legacy(name: str, ns: str, gpus: str = "1") -> Obj:
    return o.pod(name, ns, o.pod_spec(o.container("cuda", limits={"nvidia.com/gpu": gpus})))


@pytest.fixture
def after_translation(kube: Kube) -> Iterator[Callable[[str, str, list[str]], None]]:
    """Install a MutatingAdmissionPolicy that applies `patches` (CEL JSONPatch values) to the
    translated pods of namespaces labelled `e2e-after=<label>`; removed afterwards."""
    made: list[str] = []

    def install(name: str, label: str, patches: list[str]) -> None:
        policy = {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingAdmissionPolicy",
            "metadata": {"name": name},
            "spec": {
                "failurePolicy": "Fail",
                "reinvocationPolicy": "IfNeeded",
                "matchConstraints": {
                    "resourceRules": [
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE"],
                            "resources": ["pods"],
                        }
                    ]
                },
                # a policy is run again only if it ran the first time: it matches every pod,
                # and changes only those translated (on that second run)
                "mutations": [
                    {
                        "patchType": "JSONPatch",
                        "jsonPatch": {"expression": f"{TRANSLATED} ? [{', '.join(patches)}] : []"},
                    }
                ],
            },
        }
        binding = {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingAdmissionPolicyBinding",
            "metadata": {"name": name},
            "spec": {
                "policyName": name,
                "matchResources": {"namespaceSelector": {"matchLabels": {"e2e-after": label}}},
            },
        }
        kube._send("POST", POLICIES, json=policy)
        kube._send("POST", BINDINGS, json=binding)
        made.append(name)

    yield install
    for name in made:
        for where in (BINDINGS, POLICIES):
            try:
                kube._send("DELETE", f"{where}/{name}")
            except ApiError as error:
                if error.status != 404:
                    raise


def _refusal(kube: Kube, pod: Obj) -> str | None:
    try:
        kube.create(pod, dry_run=True)
    except ApiError as error:
        return error.message
    return None


def _calls(webhook: Webhook, endpoint: str) -> float:
    return webhook.metric(
        "dra_webhook_admission_duration_seconds_count", webhook=endpoint, kind="Pod"
    )


def test_a_legacy_pod_costs_one_webhook_call_and_keeps_the_mark_of_what_was_judged(
    kube: Kube, webhook: Webhook, namespace: Callable[..., str]
) -> None:
    ns = namespace("translate")
    for attempt in range(3):  # pods of other journeys' controllers may be reviewed meanwhile
        before = _calls(webhook, "mutate"), _calls(webhook, "validate")
        stored = kube.create(_legacy(f"once-{attempt}", ns)).obj
        after = _calls(webhook, "mutate"), _calls(webhook, "validate")
        if after == (before[0] + 1, before[1]):
            break
    else:
        raise AssertionError(f"a translated pod made calls {before} -> {after}")
    (entry,) = stored["spec"]["resourceClaims"]
    annotations = stored["metadata"]["annotations"]
    assert annotations[JUDGED_ANNOTATION] == f"t:{entry['resourceClaimTemplateName']}"


@MAP_SINCE
def test_a_second_mutation_that_adds_the_gpu_back_after_translation_is_refused(
    kube: Kube, namespace: Callable[..., str], after_translation: Callable[..., None]
) -> None:
    ns = namespace("translate", **{"e2e-after": "readd-gpu"})
    gpu = '{"nvidia.com/gpu": "1"}'
    after_translation(
        "e2e-readd-gpu",
        "readd-gpu",
        [
            f'JSONPatch{{op: "add", path: "/spec/containers/0/resources/limits", value: {gpu}}}',
            f'JSONPatch{{op: "add", path: "/spec/containers/0/resources/requests", value: {gpu}}}',
        ],
    )
    pod = _legacy("readded", ns)
    message = kube.wait(lambda: _refusal(kube, pod), "the mutating admission policy to apply")
    assert 'admission webhook "pods.dra-webhook.svc" denied the request' in message, message
    assert (
        f"namespace {ns} translates device-plugin requests into DRA claims (gpu-mode=translate), "
        "but Pod readded asks for legacy extended resources again after dra-webhook translated "
        "it:\n- spec.containers[0].resources.limits[nvidia.com/gpu]: container cuda asks for "
        "nvidia.com/gpu: 1"
    ) in message, message
    with pytest.raises(ApiError):
        kube.create(pod)
    assert kube.find("Pod", "readded", ns) is None
    # without that mutation the same pod is translated and admitted
    other = namespace("translate")
    assert kube.create(_legacy("readded", other)).obj["spec"]["resourceClaims"]


@MAP_SINCE
def test_a_second_mutation_that_adds_a_claim_after_translation_sends_the_pod_to_validation(
    kube: Kube, namespace: Callable[..., str], after_translation: Callable[..., None]
) -> None:
    """The mutating call judged one GPU, within the namespace's four; the claim of five added
    after it makes six: the mark no longer matches the pod's claims, so the validating call is
    made, and denies."""
    ns = namespace("translate", **{"e2e-after": "add-claim", "dra-quota": "small"})
    kube.create(o.claim_template("five", ns, o.claim_spec(o.exactly("gpu.nvidia.com", 5))))
    entry = '{"name": "extra", "resourceClaimTemplateName": "five"}'
    after_translation(
        "e2e-add-claim",
        "add-claim",
        [
            f'JSONPatch{{op: "add", path: "/spec/resourceClaims/-", value: {entry}}}',
            'JSONPatch{op: "add", path: "/spec/containers/0/resources/claims/-",'
            ' value: {"name": "extra"}}',
        ],
    )
    pod = _legacy("more", ns)
    message = kube.wait(lambda: _refusal(kube, pod), "the mutating admission policy to apply")
    assert 'admission webhook "pods.dra-webhook.svc" denied the request' in message, message
    assert f"namespace {ns} allows 4" in message


def test_a_mark_written_by_the_pods_author_does_not_skip_the_quota(
    kube: Kube, namespace: Callable[..., str]
) -> None:
    """Five GPUs in a namespace allowed four, with the mark the validating entry would skip:
    the mutating call sees the pod (it carries the mark), judges it, and denies it."""
    ns = namespace("translate", **{"dra-quota": "small"})
    kube.create(o.claim_template("five", ns, o.claim_spec(o.exactly("gpu.nvidia.com", 5))))
    pod = o.pod(
        "forged",
        ns,
        o.pod_spec(
            o.container("cuda", claims=("gpu",)),
            claims=[{"name": "gpu", "resourceClaimTemplateName": "five"}],
        ),
    )
    pod["metadata"]["annotations"] = {JUDGED_ANNOTATION: "t:five"}
    with pytest.raises(ApiError) as refused:
        kube.create(pod)
    assert 'admission webhook "pods.dra-webhook.svc" denied the request' in refused.value.message
    assert f"namespace {ns} allows 4" in refused.value.message
