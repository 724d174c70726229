"""certificates.mode: managed, the default: nothing generated at render time, so two renders are
the same (Argo CD and Flux render with `helm template`); the webhook gets exactly the grants its
certificate manager uses (app/cluster/certificates.py), each narrowed to one object by name."""

from __future__ import annotations

import yaml

from tests.chart.helpers import CHART, NAMESPACE, RELEASE, Obj, of_kind, render, run_helm

FULLNAME = f"{RELEASE}-dra-webhook"
MANAGED = f"{FULLNAME}-certs"


def _env(docs: tuple[Obj, ...]) -> dict[str, str]:
    (deployment,) = of_kind(docs, "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e.get("value", "") for e in container["env"]}


def test_two_renders_of_the_default_values_are_byte_identical() -> None:
    first = run_helm("template", RELEASE, str(CHART), "-n", NAMESPACE)
    second = run_helm("template", RELEASE, str(CHART), "-n", NAMESPACE)
    assert first.returncode == 0, first.stderr
    assert first.stdout == second.stdout


def test_self_signed_mode_still_differs_between_renders() -> None:
    """What managed mode is for: selfSigned makes a new pair at every render without a
    cluster to look the Secret up in."""
    args = ("template", RELEASE, str(CHART), "-n", NAMESPACE, "--set=certificates.mode=selfSigned")
    assert run_helm(*args).stdout != run_helm(*args).stdout


def test_the_default_renders_no_ca_bundle_and_an_empty_secret_and_lease() -> None:
    docs = render()
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        (config,) = of_kind(docs, kind)
        assert config["metadata"]["name"] == FULLNAME
        assert "annotations" not in config["metadata"]
        assert all("caBundle" not in w["clientConfig"] for w in config["webhooks"])
    (secret,) = of_kind(docs, "Secret")
    assert secret["metadata"]["name"] == MANAGED
    assert secret["type"] == "Opaque"
    assert "data" not in secret and "stringData" not in secret
    (lease,) = of_kind(docs, "Lease")
    assert lease["metadata"] == {**lease["metadata"], "name": MANAGED, "namespace": NAMESPACE}
    assert "spec" not in lease


def test_the_server_is_told_its_secret_lease_configurations_and_names() -> None:
    docs = render("--set=certificates.managed.lifetimeHours=48")
    env = _env(docs)
    assert env["DRA_WEBHOOK_MANAGED_CERTS_SECRET"] == MANAGED
    assert env["DRA_WEBHOOK_MANAGED_CERTS_LEASE"] == MANAGED
    assert env["DRA_WEBHOOK_MANAGED_CERTS_WEBHOOK"] == FULLNAME
    assert env["DRA_WEBHOOK_MANAGED_CERTS_LIFETIME_SECONDS"] == str(48 * 3600)
    assert f"{FULLNAME}.{NAMESPACE}.svc" in env["DRA_WEBHOOK_MANAGED_CERTS_DNS_NAMES"].split(",")
    (deployment,) = of_kind(docs, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    (certs,) = [v for v in pod["volumes"] if v["name"] == "certs"]
    assert "emptyDir" in certs  # written by the server, never a mounted Secret
    (mount,) = [m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "certs"]
    assert mount["readOnly"] is False


def test_the_grants_are_its_own_secret_lease_and_configurations_by_name() -> None:
    docs = render()
    (role,) = [r for r in of_kind(docs, "Role") if r["metadata"]["name"] == MANAGED]
    assert role["metadata"]["namespace"] == NAMESPACE
    assert role["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["secrets"],
            "resourceNames": [MANAGED],
            "verbs": ["get", "update"],
        },
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": [MANAGED],
            "verbs": ["get", "update"],
        },
    ]
    (cluster_role,) = [r for r in of_kind(docs, "ClusterRole") if r["metadata"]["name"] == MANAGED]
    assert cluster_role["rules"] == [
        {
            "apiGroups": ["admissionregistration.k8s.io"],
            "resources": ["mutatingwebhookconfigurations", "validatingwebhookconfigurations"],
            "resourceNames": [FULLNAME],
            "verbs": ["get", "patch"],
        }
    ]
    for kind, name in (("RoleBinding", "Role"), ("ClusterRoleBinding", "ClusterRole")):
        (binding,) = [b for b in of_kind(docs, kind) if b["metadata"]["name"] == MANAGED]
        assert binding["roleRef"]["kind"] == name
        assert binding["subjects"][0]["name"] == FULLNAME


def test_other_modes_render_nothing_of_the_managed_certificates() -> None:
    for mode in ("selfSigned", "certManager"):
        docs = render(f"--set=certificates.mode={mode}")
        assert of_kind(docs, "Lease") == []
        assert not any(d["metadata"]["name"] == MANAGED for d in docs)
        assert not any(k.startswith("DRA_WEBHOOK_MANAGED") for k in _env(docs))


def test_an_external_server_without_a_ca_bundle_manages_its_own() -> None:
    """webhook.url without webhook.caBundle (the control-plane journey): the Secret, Lease and
    grants are rendered for a server outside the cluster."""
    docs = render("--set=webhook.url=https://127.0.0.1:9443")
    assert {d["kind"] for d in docs} >= {"Secret", "Lease", "Role", "RoleBinding"}
    assert of_kind(docs, "Deployment") == []
    assert yaml.safe_dump(of_kind(docs, "MutatingWebhookConfiguration")).count("caBundle") == 0
