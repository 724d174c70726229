"""The chart's ValidatingAdmissionPolicy tells a bare Pod that may preempt, beside its offences,
what the webhook tells workloads: on DRA claims the scheduler will not evict lower-priority pods
for it (app/policies/preemption.py). Bare pods in dra-only and audit namespaces are judged there
alone, so without this they would hear nothing. Evaluated with this project's CEL engine on both
backends; on the real API server by the journey `preemption`."""

from __future__ import annotations

import re
from typing import Any

import orjson
import pytest

from app.cel.engine import BACKENDS
from app.cluster.release import PREEMPTS_FOR_DRA
from app.config.policy import parse_policy
from app.pipeline import Endpoint
from app.transport.review import decode_review
from tests.chart.helpers import CHART, dra_only_policy, pod_verdict, render
from tests.helpers import make_pipeline, namespace, wrap

Obj = dict[str, Any]
by_backend = pytest.mark.parametrize("backend", BACKENDS)
NS = "ml"


def _pod(**spec: Any) -> Obj:
    container = {"name": "serve", "image": "cuda", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "inference", "namespace": NS},
        "spec": {"containers": [container], **spec},
    }


HIGH = {"priorityClassName": "inference-high", "priority": 100_000}
"""As the Priority admission plugin leaves a pod of class inference-high (value 100000)."""


@by_backend
@pytest.mark.parametrize(
    ("mode", "how"), [("dra-only", "through DRA claims (the fix)"), ("audit", "under dra-only")]
)
def test_a_pod_that_may_preempt_is_told_what_dra_takes_away_beside_its_offences(
    backend: str, mode: str, how: str
) -> None:
    allowed, message = pod_verdict(
        _pod(**HIGH, preemptionPolicy="PreemptLowerPriority"), NS, mode, backend
    )
    assert not allowed
    assert "container serve asks for nvidia.com/gpu: 1" in message
    assert "\n" not in message  # the API server drops a messageExpression with line breaks
    assert message.endswith(
        ". spec: Pod inference (priority 100000, class inference-high) may evict lower-priority "
        f"pods for these GPUs today; {how} it will not: this cluster's Kubernetes does not "
        "preempt for DRA devices, it waits until one frees up"
    )


@by_backend
@pytest.mark.parametrize(
    "spec",
    [
        pytest.param({**HIGH, "preemptionPolicy": "Never"}, id="preemptionPolicy Never"),
        pytest.param({"priority": 0}, id="priority 0"),
        pytest.param({}, id="no priority"),
    ],
)
def test_a_pod_that_may_not_preempt_hears_only_its_offences(backend: str, spec: Obj) -> None:
    allowed, message = pod_verdict(_pod(**spec), NS, "dra-only", backend)
    assert not allowed and "may evict" not in message


@by_backend
def test_with_preemption_warn_false_the_sentence_is_not_rendered(backend: str) -> None:
    args = ("--set", "policy.preemption.warn=false")
    policy = dra_only_policy(*args)
    (preempts,) = [v for v in policy["spec"]["variables"] if v["name"] == "preempts"]
    assert preempts["expression"] == "false"
    _, message = pod_verdict(_pod(**HIGH), NS, "dra-only", backend, *args)
    assert "may evict" not in message


def test_the_charts_releases_that_preempt_for_dra_are_the_webhooks() -> None:
    helpers = (CHART / "templates" / "_helpers.tpl").read_text()
    found = re.search(r'define "dra-webhook\.preemptsForDRA" -}}(.*?){{- end }}', helpers, re.S)
    assert found is not None
    assert {int(m) for m in found.group(1).split()} == set(PREEMPTS_FOR_DRA)


@by_backend
def test_the_sentence_is_the_webhooks_the_names_said_just_before_it(backend: str) -> None:
    """The webhook's words for the same pod in a dra-only namespace where it judges pods itself
    (the admission policy off): the same sentence, its legacy names in place of "these GPUs"."""
    docs = render("--set", "admissionPolicy.enabled=false")
    (config,) = [d for d in docs if d["kind"] == "ConfigMap" and "policy.yaml" in d["data"]]
    policy = parse_policy(config["data"]["policy.yaml"], "rendered ConfigMap")
    pipeline = make_pipeline([namespace(NS, "dra-only")], policy)
    pod = _pod(**HIGH, preemptionPolicy="PreemptLowerPriority")
    decision = pipeline.review(Endpoint.VALIDATE, decode_review(orjson.dumps(wrap(pod))))
    (said,) = [w for w in decision.warnings if "may evict" in w]
    _, message = pod_verdict(pod, NS, "dra-only", backend)
    assert message.endswith(said.replace("for nvidia.com/gpu today", "for these GPUs today"))
