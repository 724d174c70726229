"""Journey tenancy: who may turn DRA admin access on, and which DeviceClasses a namespace may use
(policy adminAccess and deviceClasses, tests/e2e/values.yaml; docs/tenancy.md).

Tenants are ServiceAccounts with bearer tokens from the TokenRequest API, never cluster admins:
a Role in their namespace lets them get, patch and update that Namespace (and its status), as a
platform that lets teams label their own namespaces would. The admin-access guard is shown
twice, each half alone: the chart's ValidatingAdmissionPolicy while the webhook process is
stopped (SIGSTOP: it answers nothing), and the webhook while the policy's binding is gone.
"""

from __future__ import annotations

import os
import signal
import ssl
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import orjson
import pytest

from app.cli import main
from tests.e2e import objects as o
from tests.e2e.controlplane import ControlPlane
from tests.e2e.kube import ApiError, Kube
from tests.e2e.webhook import Webhook

pytestmark = [pytest.mark.journey("tenancy"), pytest.mark.usefixtures("webhook")]

Obj = dict[str, Any]
LABEL = "resource.kubernetes.io/admin-access"
ADMINS = "tenancy-admins"
"""Its ServiceAccounts are in the group system:serviceaccounts:tenancy-admins, which the policy
lists (tests/e2e/values.yaml)."""
RBAC = "/apis/rbac.authorization.k8s.io/v1"


class TokenKube(Kube):
    """The raw-JSON client with a bearer token instead of a client certificate."""

    def __init__(self, plane: ControlPlane, token: str) -> None:
        context = ssl.create_default_context(cafile=str(plane.pki.ca))
        self.http = httpx.Client(
            base_url=plane.url,
            verify=context,
            timeout=30,
            headers={"authorization": f"Bearer {token}"},
        )


def _service_account(kube: Kube, namespace: str, name: str) -> str:
    """A ServiceAccount, and a bearer token for it (TokenRequest, one hour)."""
    account = {"apiVersion": "v1", "kind": "ServiceAccount"}
    kube.apply({**account, "metadata": {"name": name, "namespace": namespace}})
    answer = kube.http.post(
        f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
        json={
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 3600},
        },
    )
    assert answer.status_code == 201, answer.text
    token: str = answer.json()["status"]["token"]
    return token


def _may_edit_namespace(kube: Kube, namespace: str, account: str, account_namespace: str) -> None:
    """A Role in `namespace` letting the ServiceAccount get, patch and update that Namespace."""
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": f"edit-namespace-{account}", "namespace": namespace},
        "rules": [
            {
                "apiGroups": [""],
                "resources": ["namespaces", "namespaces/status"],
                "resourceNames": [namespace],
                "verbs": ["get", "patch", "update"],
            }
        ],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": f"edit-namespace-{account}", "namespace": namespace},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": role["metadata"]["name"],
        },
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": account_namespace}],
    }
    for obj, plural in ((role, "roles"), (binding, "rolebindings")):
        answer = kube.http.post(f"{RBAC}/namespaces/{namespace}/{plural}", json=obj)
        assert answer.status_code == 201, answer.text


@pytest.fixture
def tenant(
    kube: Kube, control_plane: ControlPlane, namespace: Callable[..., str]
) -> Iterator[tuple[str, TokenKube]]:
    """A namespace and its owner: a ServiceAccount allowed to edit that Namespace, nothing more."""
    ns = namespace()
    owner = TokenKube(control_plane, _service_account(kube, ns, "owner"))
    _may_edit_namespace(kube, ns, "owner", ns)
    kube.wait(lambda: _can_label(owner, ns), f"RBAC letting {ns}'s owner label it")
    yield ns, owner
    owner.close()


def _can_label(client: Kube, ns: str) -> bool:
    try:
        client.patch("Namespace", ns, None, {"metadata": {"labels": {"rbac-ready": "yes"}}})
    except ApiError as error:
        if error.status == 403 and "forbidden" in error.message:
            return False
        raise
    return True


def _label(client: Kube, ns: str, value: str | None, subresource: str = "") -> Obj:
    return client.patch(
        "Namespace", ns, None, {"metadata": {"labels": {LABEL: value}}}, subresource=subresource
    )


@contextmanager
def _stopped(webhook: Webhook) -> Iterator[None]:
    """The webhook process frozen (SIGSTOP): the API server gets no answer from it."""
    pid = webhook.server.process.pid
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def test_a_tenant_labelling_its_namespace_for_admin_access_is_denied_with_the_webhook_stopped(
    kube: Kube, webhook: Webhook, tenant: tuple[str, TokenKube]
) -> None:
    ns, owner = tenant
    with _stopped(webhook):
        with pytest.raises(ApiError) as denied:
            _label(owner, ns, "true")
        with pytest.raises(ApiError) as through_status:
            _label(owner, ns, "true", subresource="status")
        # every other write of the namespace stays in the API server: no webhook call to miss
        owner.patch("Namespace", ns, None, {"metadata": {"labels": {"team": "vision"}}})
    message = denied.value.message
    assert denied.value.status == 403, message
    assert "ValidatingAdmissionPolicy 'dra-webhook-admin-access'" in message
    assert (
        f"namespace {ns}: user system:serviceaccount:{ns}:owner may not set, change or remove "
        f"the label {LABEL} (dra-webhook admin-access guard, policy adminAccess)"
    ) in message
    assert f'metadata.labels[{LABEL}]: set to "true" (it was not set)' in message
    assert "To get access: ask the platform team to add you to the tenancy-admins group" in message
    assert "ValidatingAdmissionPolicy 'dra-webhook-admin-access'" in through_status.value.message
    labels = kube.get("Namespace", ns)["metadata"]["labels"]
    assert LABEL not in labels and labels["team"] == "vision"


@contextmanager
def _policy_unbound(kube: Kube, webhook: Webhook) -> Iterator[None]:
    """The admission policy's binding deleted, then applied again as the chart renders it."""
    (binding,) = [
        doc
        for doc in webhook.configurations
        if doc["kind"] == "ValidatingAdmissionPolicyBinding"
        and doc["metadata"]["name"] == "dra-webhook-admin-access"
    ]
    kube.delete("ValidatingAdmissionPolicyBinding", binding["metadata"]["name"])
    try:
        yield
    finally:
        kube.apply(binding)


def test_the_webhook_alone_denies_the_same_change_and_a_dry_run_too(
    kube: Kube, webhook: Webhook, tenant: tuple[str, TokenKube]
) -> None:
    ns, owner = tenant
    kube.patch("Namespace", ns, None, {"metadata": {"labels": {LABEL: "false"}}})  # e2e-admin
    before = webhook.metric("dra_webhook_denials_total", reason="admin-access")

    seen: list[str] = []

    def by_the_webhook(dry_run: bool) -> ApiError | None:
        try:
            url = f"/api/v1/namespaces/{ns}"
            answer = owner.http.patch(
                url,
                json={"metadata": {"labels": {LABEL: "true"}}},
                params={"dryRun": "All"} if dry_run else {},
                headers={"content-type": "application/merge-patch+json"},
            )
        except httpx.HTTPError as error:
            seen.append(repr(error))
            return None
        if answer.status_code < 300:
            raise AssertionError(f"the change went through: {answer.text}")
        message = answer.json().get("message", "")
        if "admission webhook" not in message:
            seen.append(message)
            return None  # the policy's binding is still in the API server's informer
        return ApiError(answer.status_code, message, answer.json())

    with _policy_unbound(kube, webhook):
        try:
            dry = kube.wait(lambda: by_the_webhook(True), "the webhook's own denial", 60)
        except AssertionError as error:
            raise AssertionError(f"{error}; the last answer: {seen[-1:]}") from None
        wet = by_the_webhook(False)
    assert wet is not None and wet.status == 403
    assert 'admission webhook "namespaces.dra-webhook.svc" denied the request' in wet.message
    assert f'metadata.labels[{LABEL}]: changed from "false" to "true"' in wet.message
    assert dry.message == wet.message  # dry-run safe: the same answer, nothing written
    assert kube.get("Namespace", ns)["metadata"]["labels"][LABEL] == "false"
    assert webhook.metric("dra_webhook_denials_total", reason="admin-access") >= before + 2


def test_a_user_of_a_listed_group_may_set_and_remove_the_label(
    kube: Kube, control_plane: ControlPlane, tenant: tuple[str, TokenKube]
) -> None:
    ns, _ = tenant
    kube.namespace(ADMINS)
    lead = TokenKube(control_plane, _service_account(kube, ADMINS, "lead"))
    _may_edit_namespace(kube, ns, "lead", ADMINS)
    kube.wait(lambda: _can_label(lead, ns), "RBAC letting the lead label the namespace")
    try:
        assert _label(lead, ns, "true")["metadata"]["labels"][LABEL] == "true"
        assert LABEL not in _label(lead, ns, None)["metadata"]["labels"]
    finally:
        lead.close()


def _admin_claim(name: str, ns: str) -> Obj:
    spec = o.claim_spec({**o.exactly("gpu.nvidia.com", 1), "adminAccess": True})
    return o.claim(name, ns, spec)


def test_a_claim_asking_for_admin_access_is_denied_where_the_policy_does_not_select_it(
    kube: Kube, webhook: Webhook, namespace: Callable[..., str]
) -> None:
    """Labelled for admin access (by e2e-admin, whom the policy lists) but not selected by
    adminAccess.namespaceSelector: denied anyway, with the field; where both hold, allowed."""
    labelled = namespace(**{LABEL: "true"})
    before = webhook.metric("dra_webhook_denials_total", reason="admin-access-claims")
    with pytest.raises(ApiError) as denied:
        kube.create(_admin_claim("debug", labelled))
    message = denied.value.message
    assert denied.value.status == 403, message
    assert "adminAccess.namespaceSelector (dra-admin-access=allowed) does not select it" in message
    assert f"even though it is labelled {LABEL}=true" in message
    assert "spec.devices.requests[0].exactly.adminAccess: asks for admin access" in message
    assert webhook.metric("dra_webhook_denials_total", reason="admin-access-claims") == before + 1

    allowed = namespace(**{LABEL: "true", "dra-admin-access": "allowed"})
    kube.create(_admin_claim("debug", allowed))
    assert kube.get("ResourceClaim", "debug", allowed)["spec"]["devices"]["requests"][0]


# -- DeviceClass allow-lists (values.yaml: dra-tenant=team-a may use gpu.nvidia.com only) -----

TEAM_A = {"dra-tenant": "team-a"}
GPU, MIG = "gpu.nvidia.com", "mig.nvidia.com"


def _first_available(*classes: str) -> Obj:
    alternatives = [{"name": f"alt{i}", "deviceClassName": c} for i, c in enumerate(classes)]
    return {"devices": {"requests": [{"name": "gpu", "firstAvailable": alternatives}]}}


def test_a_claim_for_a_class_outside_the_allow_list_is_denied_with_the_field_path(
    kube: Kube, namespace: Callable[..., str]
) -> None:
    ns = namespace("dra-only", **TEAM_A)
    with pytest.raises(ApiError) as denied:
        kube.create(o.claim("mig", ns, o.claim_spec(o.exactly(MIG, 1))))
    message = denied.value.message
    assert denied.value.status == 403, message
    assert (
        f"namespace {ns} may use only the DeviceClasses its dra-webhook deviceClasses entries "
        "allow (e2e-team-a); ResourceClaim mig asks for others:"
    ) in message
    assert (
        "spec.devices.requests[0].exactly.deviceClassName: asks for DeviceClass mig.nvidia.com, "
        f"which namespace {ns} may not use (allowed: gpu.nvidia.com (deviceClasses entry "
        "e2e-team-a))"
    ) in message
    assert kube.find("ResourceClaim", "mig", ns) is None


def test_a_first_available_whose_second_alternative_is_not_allowed_is_denied(
    kube: Kube, namespace: Callable[..., str]
) -> None:
    ns = namespace("dra-only", **TEAM_A)
    with pytest.raises(ApiError) as denied:
        kube.create(o.claim("either", ns, _first_available(GPU, MIG)))
    assert (
        "spec.devices.requests[0].firstAvailable[1].deviceClassName: alternative alt1 asks for "
        "DeviceClass mig.nvidia.com"
    ) in denied.value.message


def test_an_allowed_claim_is_admitted_and_allocated(
    kube: Kube, namespace: Callable[..., str]
) -> None:
    ns = namespace("dra-only", **TEAM_A)
    kube.create(o.claim("whole", ns, _first_available(GPU, GPU)))
    spec = o.pod_spec(
        o.container("cuda", claims=("gpu",)), claims=[{"name": "gpu", "resourceClaimName": "whole"}]
    )
    kube.create(o.pod("trainer", ns, spec))
    (claim,) = o.allocated_claims(kube, ns, "trainer").values()
    ((request, _, device),) = o.allocated_devices(claim)
    assert request.startswith("gpu/alt") and "mig" not in device


def test_a_pod_of_a_template_made_before_the_namespace_joined_the_tenant_is_denied(
    kube: Kube, webhook: Webhook, namespace: Callable[..., str]
) -> None:
    ns = namespace("dra-only")
    kube.create(o.claim_template("mig", ns, o.claim_spec(o.exactly(MIG, 1))))
    kube.patch("Namespace", ns, None, {"metadata": {"labels": TEAM_A}})
    spec = o.pod_spec(
        o.container("cuda", claims=("gpu",)),
        claims=[{"name": "gpu", "resourceClaimTemplateName": "mig"}],
    )

    def denied() -> ApiError | None:
        try:
            kube.create(o.deployment("trainer", ns, spec), dry_run=True)
        except ApiError as error:
            return error
        return None  # the webhook's view has not seen the new label yet

    error = kube.wait(denied, "the deployment to be judged under the tenant's allow-list")
    assert (
        "spec.template.spec.resourceClaims[0].resourceClaimTemplateName: ResourceClaimTemplate "
        "mig (spec.spec.devices.requests[0].exactly.deviceClassName) asks for DeviceClass "
        "mig.nvidia.com"
    ) in error.message
    with pytest.raises(ApiError) as pod_denied:
        kube.create(o.pod("trainer", ns, spec))
    assert "spec.resourceClaims[0].resourceClaimTemplateName" in pod_denied.value.message


def test_translation_never_writes_a_claim_the_namespace_may_not_use(
    kube: Kube, namespace: Callable[..., str]
) -> None:
    ns = namespace("translate", **TEAM_A)
    mig = o.pod_spec(o.container("cuda", limits={"nvidia.com/mig-1g.10gb": "1"}))
    with pytest.raises(ApiError) as denied:
        kube.create(o.pod("small", ns, mig))
    message = denied.value.message
    assert denied.value.status == 403, message
    assert (
        "spec.containers[0].resources.limits[nvidia.com/mig-1g.10gb]: container cuda asks for "
        "nvidia.com/mig-1g.10gb: 1, which translation turns into a claim on DeviceClass "
        "mig.nvidia.com"
    ) in message
    assert (
        "change the dra-webhook policy's mappings[1] (nvidia.com/mig-(.+) -> mig.nvidia.com)"
        in (message)
    )
    assert kube.list("ResourceClaimTemplate", ns) == []  # nothing was written
    whole = o.pod_spec(o.container("cuda", limits={"nvidia.com/gpu": "1"}))
    translated = kube.create(o.pod("whole", ns, whole)).obj
    assert translated["spec"]["resourceClaims"]
    (claim,) = o.allocated_claims(kube, ns, "whole").values()
    assert claim["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] == GPU


def test_report_lists_what_the_guards_would_refuse_of_what_the_cluster_already_holds(
    kube: Kube,
    webhook: Webhook,
    control_plane: ControlPlane,
    namespace: Callable[..., str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    ns = namespace("dra-only")
    kube.create(o.claim_template("mig", ns, o.claim_spec(o.exactly(MIG, 1))))
    kube.create(o.claim("whole", ns, o.claim_spec(o.exactly(GPU, 1))))
    kube.patch("Namespace", ns, None, {"metadata": {"labels": TEAM_A}})  # joins the tenant after
    capsys.readouterr()
    kubeconfig, policy = str(control_plane.kubeconfig()), str(webhook.policy)
    code = main(["report", "--kubeconfig", kubeconfig, "--config", policy, "--output", "json"])
    assert code == 0
    (row,) = [r for r in orjson.loads(capsys.readouterr().out) if r["namespace"] == ns]
    assert row["tenancy"] == [
        "ResourceClaimTemplate/mig: spec.spec.devices.requests[0].exactly.deviceClassName: asks "
        f"for DeviceClass mig.nvidia.com, which namespace {ns} may not use (allowed: "
        "gpu.nvidia.com (deviceClasses entry e2e-team-a))"
    ]
