"""Journey dra-only, the rule in the API server: the chart's ValidatingAdmissionPolicy and the
webhook agree on every case of the dra-only table (tests/dra_only_cases.py).

The policy is rendered from the same chart and values as the webhook's policy, under its own
release name and mode label (`agree-mode`), so its namespace is one the registered webhook never
sees: every case is created there with dryRun through the API server (the policy's verdict),
and sent as an AdmissionReview straight to the running webhook for a gpu-mode=dra-only namespace
(the webhook's verdict). Both must deny or both allow; a denial names each offending container
and resource.

Policy exceptions (the table's EXCEPTION_CASES): the policy skips exactly the objects an
exception selects, whatever its date (the API server's CEL has no clock); the webhook, built
from the same policy file with a fixed clock, judges the date. Through the registered webhook,
an excepted legacy pod in a dra-only namespace is admitted with the warning, a non-excepted one
is denied by the policy, and one whose exception ended by the webhook.
"""

from __future__ import annotations

import copy
import datetime as dt
import uuid
from collections.abc import Callable
from typing import Any

import orjson
import pytest

from app.config.policy import load_policy
from app.pipeline import Endpoint, Pipeline
from app.transport.review import decode_review
from tests.dra_only_cases import CASES, EXCEPTION_CASES, Case, ExceptionCase
from tests.e2e.kube import ApiError, Kube
from tests.e2e.webhook import Webhook, render
from tests.helpers import make_view
from tests.helpers import namespace as namespace_object

pytestmark = [pytest.mark.journey("dra-only"), pytest.mark.usefixtures("webhook")]

LABEL = "agree-mode"
KINDS = ("Pod", "Deployment", "Job", "CronJob")
Obj = dict[str, Any]


def _wrapped(case: Case, kind: str, namespace: str) -> Obj:
    spec = copy.deepcopy(case.spec)
    meta = {"name": "agree", "namespace": namespace}
    labels = {"app": "agree"}
    if kind == "Pod":
        return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}
    template = {"metadata": {"labels": labels}, "spec": spec}
    if kind == "Deployment":
        return {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": meta,
            "spec": {"replicas": 1, "selector": {"matchLabels": labels}, "template": template},
        }
    spec["restartPolicy"] = "Never"
    job = {"template": template}
    if kind == "Job":
        return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": job}
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": meta,
        "spec": {"schedule": "@yearly", "jobTemplate": {"spec": job}},
    }


def _review(obj: Obj) -> Obj:
    group, _, version = obj["apiVersion"].rpartition("/")
    resource = {"Pod": "pods", "Deployment": "deployments", "Job": "jobs", "CronJob": "cronjobs"}
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": {"group": group, "version": version, "kind": obj["kind"]},
            "resource": {"group": group, "version": version, "resource": resource[obj["kind"]]},
            "requestKind": {"group": group, "version": version, "kind": obj["kind"]},
            "namespace": obj["metadata"]["namespace"],
            "name": obj["metadata"]["name"],
            "operation": "CREATE",
            "userInfo": {"username": "admin"},
            "object": obj,
            "dryRun": True,
        },
    }


@pytest.fixture(scope="module")
def agree_namespace(kube: Kube, helm: str) -> str:
    """The chart's admission policy under release `agree`, bound to agree-mode=dra-only."""
    for doc in render(
        helm,
        "--show-only=templates/admissionpolicy.yaml",
        f"--set=policy.namespaceModes.label={LABEL}",
        "--set=fullnameOverride=agree-dra-webhook",
        # the dra-only policy alone: the admin-access guard's binds every namespace (the
        # tenancy journey's own, rendered with the webhook, is the one the suite runs)
        "--set=policy.adminAccess.enabled=false",
    ):
        kube.apply(doc)
    name = kube.namespace("agree-vap", **{LABEL: "dra-only"})
    probe = _wrapped(CASES[0], "Pod", name)

    def denied() -> bool:
        try:
            kube.create(probe, dry_run=True)
        except ApiError as error:
            return "ValidatingAdmissionPolicy" in error.message
        return False

    kube.wait(denied, "the agree release's ValidatingAdmissionPolicy to deny")
    return name


def test_the_table_covers_both_verdicts_and_every_container_kind() -> None:
    assert len(CASES) >= 15
    assert {c.denied for c in CASES} == {True, False}
    paths = {o.path.split("[", 1)[0] for c in CASES for o in c.offences}
    assert paths == {"spec.containers", "spec.initContainers", "spec.ephemeralContainers"}


@pytest.mark.parametrize("kind", KINDS)
def test_the_admission_policy_and_the_webhook_agree_on_every_dra_only_case(
    kind: str,
    kube: Kube,
    webhook: Webhook,
    agree_namespace: str,
    namespace: Callable[..., str],
) -> None:
    webhook_ns = namespace("dra-only")
    disagreements = []
    for case in CASES:
        obj = _wrapped(case, kind, agree_namespace)
        try:
            kube.create(obj, dry_run=True)
            api_server: tuple[bool, int, str] = (True, 200, "")
        except ApiError as error:
            api_server = (False, error.status, error.message)
        in_webhook = _wrapped(case, kind, webhook_ns)
        with webhook.server.client() as client:
            answer = client.post("/validate", json=_review(in_webhook)).json()["response"]
        verdict = answer["allowed"]
        message = answer.get("status", {}).get("message", "")
        if not case.api_server_valid:
            # refused as invalid before any admission policy runs (422); the webhook denies it
            # too, and the chart tests evaluate the policy's CEL on it
            if api_server[:2] != (False, 422) or verdict:
                disagreements.append((case.id, api_server, verdict))
            continue
        if api_server[0] is not verdict or verdict is not (not case.denied):
            disagreements.append((case.id, api_server, verdict, message))
            continue
        if case.denied:
            assert api_server[1] == 403, api_server
            assert "ValidatingAdmissionPolicy 'agree-dra-webhook-dra-only'" in api_server[2]
            for offence in case.offences:
                said = f" {offence.container} asks for {offence.resource}: "
                if said not in api_server[2] or said not in message:
                    disagreements.append((case.id, kind, said, api_server[2], message))
    assert not disagreements


def _labelled(obj: Obj, labels: dict[str, str]) -> Obj:
    if obj["kind"] == "Pod":
        obj["metadata"]["labels"] = labels
    else:
        spec = obj["spec"]["jobTemplate"]["spec"] if obj["kind"] == "CronJob" else obj["spec"]
        spec["template"]["metadata"]["labels"] = {
            **spec["template"]["metadata"]["labels"],
            **labels,
        }
    return obj


def _clock(days_before_end: int | None) -> dt.datetime:
    """As tests/policies/test_exceptions.py: days before the end of 2999-12-31, or a fixed day."""
    if days_before_end is None:
        return dt.datetime(2026, 11, 24, 9, 30, tzinfo=dt.UTC)
    end = dt.datetime(3000, 1, 1, tzinfo=dt.UTC)
    return end - dt.timedelta(days=days_before_end + 1) + dt.timedelta(hours=9)


EXCEPTED = [(case, kind) for case in EXCEPTION_CASES for kind in case.kinds]


@pytest.mark.parametrize(("case", "kind"), EXCEPTED, ids=[f"{k}: {c.id}" for c, k in EXCEPTED])
def test_the_admission_policy_leaves_to_the_webhook_exactly_what_an_exception_selects(
    case: ExceptionCase,
    kind: str,
    kube: Kube,
    webhook: Webhook,
    agree_namespace: str,
    namespace: Callable[..., str],
) -> None:
    agree_ns = namespace(**{LABEL: "dra-only"}, **case.namespace_labels)
    obj = _labelled(_wrapped(Case(case.id, case.spec), kind, agree_ns), case.labels)
    try:
        kube.create(obj, dry_run=True)
        api_server: tuple[bool, str] = (True, "")
    except ApiError as error:
        assert error.status == 403, error.message
        api_server = (False, error.message)
    assert api_server[0] is case.selected, api_server
    # the webhook: the policy file the running process reads, its clock set by the case
    view = make_view([namespace_object("team", "dra-only", **case.namespace_labels)])
    pipeline = Pipeline(
        load_policy(webhook.policy), view, "dra-webhook", clock=lambda: _clock(case.days_before_end)
    )
    in_webhook = _labelled(_wrapped(Case(case.id, case.spec), kind, "team"), case.labels)
    decision = pipeline.review(Endpoint.VALIDATE, decode_review(orjson.dumps(_review(in_webhook))))
    assert decision.allowed is not bool(case.offences), decision.message
    for text in case.warns:
        assert any(text in w for w in decision.warnings), (text, decision.warnings)
    if not case.selected:  # both deny, naming the same offences
        for offence in case.offences:
            said = f" {offence.container} asks for {offence.resource}: "
            assert said in api_server[1] and said in decision.message


def test_through_the_control_plane_an_excepted_legacy_pod_is_admitted_with_the_warning(
    kube: Kube, webhook: Webhook, namespace: Callable[..., str]
) -> None:
    ns = namespace("dra-only", exceptions="allowed")
    (matching,) = [c for c in EXCEPTION_CASES if c.id == "matching"]
    pod = _labelled(_wrapped(Case("p", matching.spec), "Pod", ns), {"exception": "vendor"})
    before = webhook.metric(
        "dra_webhook_exceptions_total", check="dra-only", exception="vendor-image"
    )
    answer = kube.create(pod)
    assert answer.obj["metadata"]["labels"] == {"exception": "vendor"}
    assert any(
        w.startswith("exception vendor-image until 2999-12-31 (end of day UTC): 1 legacy request")
        and "allowed in this dra-only namespace" in w
        for w in answer.warnings
    ), answer.warnings
    after = webhook.metric(
        "dra_webhook_exceptions_total", check="dra-only", exception="vendor-image"
    )
    assert after == before + 1

    other = _labelled(_wrapped(Case("p", matching.spec), "Pod", ns), {"exception": "other"})
    other["metadata"]["name"] = "other"
    with pytest.raises(ApiError) as denied:
        kube.create(other)
    assert denied.value.status == 403
    assert "ValidatingAdmissionPolicy 'dra-webhook-dra-only'" in denied.value.message

    ended = _labelled(_wrapped(Case("p", matching.spec), "Pod", ns), {"exception": "ended"})
    ended["metadata"]["name"] = "ended"
    with pytest.raises(ApiError) as denied:
        kube.create(ended)
    message = denied.value.message
    assert denied.value.status == 403
    assert "admission webhook" in message and "denied the request" in message
    assert "container cuda asks for nvidia.com/gpu: 2" in message
    assert "exception ended ended 2020-01-31 (end of day UTC) no longer applies" in message
