"""The chart's tenancy pieces, rendered by the real helm: the admin-access guard's webhook entry
(matchConditions: only writes that change the label leave the API server) and its
ValidatingAdmissionPolicy twin, evaluated with this project's CEL engine on both backends
against the same cases as the webhook (tests/tenancy_cases.py), and validated against the
Kubernetes 1.34 schemas."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import kubernetes_validate
import orjson
import pytest
import yaml

from app.cel.engine import ADMISSION, ADMISSION_MESSAGE, BACKENDS
from app.cel.factory import get_engine
from app.config.policy import parse_policy
from app.pipeline import Endpoint
from app.transport.review import decode_review
from tests.assets import k8s_tool
from tests.chart.helpers import inline_variables
from tests.helpers import make_pipeline, namespace, wrap
from tests.tenancy_cases import ADMIN_ACCESS, LABEL, LABEL_CHANGES, LabelChange, namespace_object

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "dra-webhook"
RELEASE, NAMESPACE = "rel", "dra-system"
K8S_VERSION = "1.34.0"
Obj = dict[str, Any]

by_backend = pytest.mark.parametrize("backend", BACKENDS)


def _helm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [k8s_tool("helm"), "template", RELEASE, str(CHART), "-n", NAMESPACE, *args],
        check=False, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


@cache
def _render(values: str) -> tuple[Obj, ...]:
    """The chart over the values given as YAML text (on top of its defaults)."""
    result = _helm("--set-json", f"policy={orjson.dumps(yaml.safe_load(values)).decode()}")
    assert result.returncode == 0, result.stderr
    return tuple(doc for doc in yaml.safe_load_all(result.stdout) if doc)


def _policy_values(**extra: Any) -> str:
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())["policy"]
    return yaml.safe_dump({**defaults, "adminAccess": ADMIN_ACCESS, **extra})


GUARDED = _policy_values()


def _entry(docs: tuple[Obj, ...], prefix: str) -> Obj:
    (config,) = [d for d in docs if d["kind"] == "ValidatingWebhookConfiguration"]
    (found,) = [w for w in config["webhooks"] if w["name"].startswith(prefix)]
    return found


def _vap(docs: tuple[Obj, ...]) -> Obj:
    (found,) = [
        d
        for d in docs
        if d["kind"] == "ValidatingAdmissionPolicy"
        and d["metadata"]["name"].endswith("admin-access")
    ]
    return found


@cache
def _program(expression: str, backend: str, message: bool = False) -> Callable[[Obj], Any]:
    engine = get_engine(backend)
    environment = ADMISSION_MESSAGE if message else ADMISSION
    program = engine.compile(expression, environment)

    def evaluate(variables: Obj) -> Any:
        activation = engine.activation(environment, {"params": None, **variables})
        return program.evaluate(activation)

    return evaluate


def _variables(case: LabelChange) -> Obj:
    name = "team-a"
    return {
        "object": namespace_object(name, case.new),
        "oldObject": namespace_object(name, case.old) if case.old is not None else None,
        "request": {
            "operation": "CREATE" if case.old is None else "UPDATE",
            "userInfo": {"username": case.user, "groups": list(case.groups)},
        },
        "namespaceObject": None,
    }


def _webhook_verdict(case: LabelChange) -> tuple[bool, str]:
    policy = parse_policy(yaml.safe_dump({"adminAccess": ADMIN_ACCESS}))
    pipeline = make_pipeline([namespace("team-a", **(case.old or {}))], policy)
    old = namespace_object("team-a", case.old) if case.old is not None else None
    body = wrap(
        namespace_object("team-a", case.new), operation="UPDATE" if old else "CREATE", old=old
    )
    body["request"]["namespace"] = "team-a"
    body["request"]["userInfo"] = {"username": case.user, "groups": list(case.groups)}
    decision = pipeline.review(Endpoint.VALIDATE, decode_review(orjson.dumps(body)))
    return decision.allowed, decision.message


# -- the webhook entry -----------------------------------------------------------------------


def test_without_the_guard_no_namespace_entry_and_no_admission_policy_is_rendered() -> None:
    docs = _render(_policy_values(adminAccess={"enabled": False}))
    (config,) = [d for d in docs if d["kind"] == "ValidatingWebhookConfiguration"]
    assert not any(w["name"].startswith("namespaces.") for w in config["webhooks"])
    assert not any(d["metadata"]["name"].endswith("admin-access") for d in docs)


def test_the_namespace_entry_sees_namespace_writes_and_their_label_changing_subresources() -> None:
    entry = _entry(_render(GUARDED), "namespaces.")
    (rule,) = entry["rules"]
    assert rule["operations"] == ["CREATE", "UPDATE"]
    assert rule["resources"] == ["namespaces", "namespaces/status", "namespaces/finalize"]
    assert entry["sideEffects"] == "None"  # dry runs are judged the same
    exempt = entry["namespaceSelector"]["matchExpressions"][-1]
    assert exempt["operator"] == "NotIn" and set(exempt["values"]) == {NAMESPACE, "kube-system"}


@by_backend
@pytest.mark.parametrize("case", LABEL_CHANGES, ids=[c.id for c in LABEL_CHANGES])
def test_only_writes_that_change_the_label_reach_the_webhook(
    case: LabelChange, backend: str
) -> None:
    (condition,) = _entry(_render(GUARDED), "namespaces.")["matchConditions"]
    assert _program(condition["expression"], backend)(_variables(case)) is case.changes


@by_backend
def test_a_namespace_without_labels_matches_as_one_without_the_label(backend: str) -> None:
    (condition,) = _entry(_render(GUARDED), "namespaces.")["matchConditions"]
    bare = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x"}}
    variables = {
        "object": bare,
        "oldObject": bare,
        "request": {"operation": "UPDATE"},
        "namespaceObject": None,
    }
    assert _program(condition["expression"], backend)(variables) is False


def test_claims_asking_for_admin_access_in_unlabelled_namespaces_get_their_own_entry() -> None:
    entry = _entry(_render(GUARDED), "claims-admin-access.")
    selector = {e["key"]: e for e in entry["namespaceSelector"]["matchExpressions"]}
    assert selector[LABEL]["operator"] == "Exists"
    assert selector["gpu-mode"]["operator"] == "NotIn"  # mode-labelled ones: the claims entry


def _claim(kind: str, admin: bool | None) -> Obj:
    exactly: Obj = {"deviceClassName": "gpu.nvidia.com"}
    if admin is not None:
        exactly["adminAccess"] = admin
    spec: Obj = {"devices": {"requests": [{"name": "r", "exactly": exactly}]}}
    return {"kind": kind, "spec": {"spec": spec} if kind == "ResourceClaimTemplate" else spec}


@by_backend
@pytest.mark.parametrize("kind", ["ResourceClaim", "ResourceClaimTemplate"])
@pytest.mark.parametrize(("admin", "sent"), [(True, True), (False, False), (None, False)])
def test_only_claims_asking_for_admin_access_reach_that_entry(
    kind: str, admin: bool | None, sent: bool, backend: str
) -> None:
    (condition,) = _entry(_render(GUARDED), "claims-admin-access.")["matchConditions"]
    variables = {
        "object": _claim(kind, admin),
        "oldObject": None,
        "request": {"kind": {"kind": kind}},
        "namespaceObject": None,
    }
    assert _program(condition["expression"], backend)(variables) is sent


# -- the ValidatingAdmissionPolicy twin ------------------------------------------------------


@by_backend
@pytest.mark.parametrize("case", LABEL_CHANGES, ids=[c.id for c in LABEL_CHANGES])
def test_the_admission_policy_and_the_webhook_agree_on_every_label_change(
    case: LabelChange, backend: str
) -> None:
    policy = _vap(_render(GUARDED))
    variables = _variables(case)
    (condition,) = policy["spec"]["matchConditions"]
    matched = _program(condition["expression"], backend)(variables)
    (validation,) = policy["spec"]["validations"]
    allowed = not matched or _program(inline_variables(policy, validation["expression"]), backend)(
        variables
    )
    webhook_allowed, webhook_message = _webhook_verdict(case)
    assert allowed is webhook_allowed is case.allowed
    if not case.allowed:
        message = _program(
            inline_variables(policy, validation["messageExpression"]), backend, message=True
        )(variables)
        assert "\n" not in message  # the API server drops a messageExpression with line breaks
        # the same words as the webhook, on one line
        for line in webhook_message.splitlines():
            assert line.removeprefix("- ") in message, line
        assert message.startswith(f"namespace team-a: user {case.user} may not set")


def test_the_admission_policy_binding_denies_everywhere() -> None:
    docs = _render(GUARDED)
    (binding,) = [
        d
        for d in docs
        if d["kind"] == "ValidatingAdmissionPolicyBinding"
        and d["metadata"]["name"].endswith("admin-access")
    ]
    assert binding["spec"]["validationActions"] == ["Deny"]
    assert "matchResources" not in binding["spec"]  # kube-system and the release too
    assert binding["spec"]["policyName"] == _vap(docs)["metadata"]["name"]


def test_the_guard_renders_valid_kubernetes_1_34_objects() -> None:
    for doc in _render(GUARDED):
        if doc["kind"] in ("ValidatingAdmissionPolicy", "ValidatingWebhookConfiguration"):
            kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_a_name_the_admission_policy_cannot_quote_is_refused_by_the_schema() -> None:
    result = _helm(
        "--set", "policy.adminAccess.enabled=true", "--set", "policy.adminAccess.users={o'b}"
    )
    assert result.returncode != 0
    assert "/policy/adminAccess/users/0" in result.stderr


def test_the_rendered_policy_is_the_one_the_webhook_reads() -> None:
    (config,) = [d for d in _render(GUARDED) if d["kind"] == "ConfigMap"]
    policy = parse_policy(config["data"]["policy.yaml"], "rendered ConfigMap")
    assert policy.admin_access.enabled and policy.admin_access.groups == ("platform-admins",)


# -- DeviceClass allow-lists -----------------------------------------------------------------

ALLOW_LISTS = [
    {
        "name": "team-a",
        "namespaceSelector": {"matchLabels": {"team": "a"}},
        "allowed": ["gpu.nvidia.com"],
    }
]


def test_allow_lists_widen_the_validating_entries_like_quotas_do() -> None:
    docs = _render(_policy_values(deviceClasses=ALLOW_LISTS))
    for prefix in ("claims.", "workloads.", "cronjobs."):
        keys = {e["key"] for e in _entry(docs, prefix)["namespaceSelector"]["matchExpressions"]}
        assert keys == {"kubernetes.io/metadata.name"}, prefix  # every non-exempt namespace


def test_pods_in_dra_only_and_audit_namespaces_an_entry_selects_reach_the_webhook() -> None:
    values = _policy_values(deviceClasses=ALLOW_LISTS)
    result = _helm(
        "--set-json",
        f"policy={orjson.dumps(yaml.safe_load(values)).decode()}",
        "--set",
        "webhook.namespaceScope=labelled",
    )
    assert result.returncode == 0, result.stderr
    docs = tuple(d for d in yaml.safe_load_all(result.stdout) if d)
    entry = _entry(docs, "pods-quota-0.")
    assert entry["namespaceSelector"]["matchLabels"] == {"team": "a"}
    (mode,) = [e for e in entry["namespaceSelector"]["matchExpressions"] if e["key"] == "gpu-mode"]
    assert mode == {"key": "gpu-mode", "operator": "In", "values": ["dra-only", "audit"]}


def test_a_bad_allow_list_entry_is_refused_by_the_schema() -> None:
    result = _helm("--set-json", 'policy.deviceClasses=[{"name": "A", "allowed": []}]')
    assert result.returncode != 0
    assert "/policy/deviceClasses/0/name" in result.stderr
