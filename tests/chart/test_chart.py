"""The Helm chart, rendered by the real helm over a matrix of values files.

helm comes from `hack/get-k8s-tools` (a pinned helm v3.19 from PyPI, else helm on PATH). Every rendered
object is validated against the schemas of each supported release (1.34-1.37, rendered with
`--kube-version`) with kubernetes-validate --strict;
cert-manager and Prometheus Operator objects (CRDs, no schema there) are checked here for the
fields their CRDs require. The webhooks' matchConditions are compiled and evaluated with the
project's CEL engine, on both backends (cel-expr-python type-checks them as the API server does,
with `object` untyped).
"""

from __future__ import annotations

import base64
import copy
import json
import re
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path
from typing import Any

import kubernetes_validate
import orjson
import pytest
import yaml
from cryptography import x509

from app.cel.engine import ADMISSION, BACKENDS
from app.cel.factory import get_engine
from app.config.policy import load_policy, parse_policy
from app.pipeline import Endpoint
from app.policies.exceptions import Exceptions
from app.transport.review import decode_review
from app.workloads import builtin
from tests.assets import k8s_tool
from tests.chart.helpers import (
    CHART,
    NAMESPACE,
    RELEASE,
    REPO,
    compile_admission,
    inline_variables,
    of_kind,
    render,
    run_helm,
)
from tests.dra_only_cases import (
    CASES,
    EXCEPTION_CASES,
    EXCEPTIONS,
    WORKLOADS,
    ExceptionCase,
)
from tests.helpers import make_pipeline, wrap
from tests.operators import namespaced_plurals
from tests.specs import pod_spec

VALUES_FILES = sorted((CHART / "ci").glob("*-values.yaml"))
EXTERNAL_URL_VALUES = CHART / "ci" / "external-url-values.yaml"
IN_CLUSTER_VALUES_FILES = [v for v in VALUES_FILES if v != EXTERNAL_URL_VALUES]
FIXTURES = REPO / "tests" / "fixtures" / "apiserver-v1.36.2"
K8S_VERSION = "1.34.0"

Obj = dict[str, Any]


# -- rendering ------------------------------------------------------------------------------


def _helm() -> str:
    return k8s_tool("helm")


def _render(values: Path) -> tuple[Obj, ...]:
    return render("-f", str(values))


def _values(values: Path) -> Obj:
    """The values file merged over the chart's defaults (one level deep is all tests need)."""
    merged: Obj = yaml.safe_load((CHART / "values.yaml").read_text())
    for key, value in (yaml.safe_load(values.read_text()) or {}).items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = {**merged[key], **value}
        else:
            merged[key] = value
    return merged


def _one(docs: tuple[Obj, ...], kind: str) -> Obj:
    (found,) = of_kind(docs, kind)
    return found


def _webhooks(docs: tuple[Obj, ...]) -> Iterator[tuple[str, Obj]]:
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        for config in of_kind(docs, kind):
            for webhook in config["webhooks"]:
                yield kind, webhook


by_values_file = pytest.mark.parametrize("values", VALUES_FILES, ids=lambda p: p.stem)
by_in_cluster_values_file = pytest.mark.parametrize(
    "values", IN_CLUSTER_VALUES_FILES, ids=lambda p: p.stem
)


def test_the_values_matrix_covers_defaults_cert_manager_self_signed_and_hpa() -> None:
    names = {p.stem for p in VALUES_FILES}
    assert {
        "default-values",
        "cert-manager-values",
        "self-signed-values",
        "hpa-values",
        "policy-wide-values",
        "external-url-values",
        "report-values",
    } <= names


# -- lint and schemas -----------------------------------------------------------------------


@by_values_file
def test_the_chart_lints_cleanly_in_strict_mode(values: Path) -> None:
    result = run_helm("lint", "--strict", str(CHART), "-n", NAMESPACE, "-f", str(values))
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    ("override", "complaint"),
    [
        ("replicas=3", "additional properties 'replicas' not allowed"),
        ("webhook.mutating.failurePolicy=fail", "value must be one of 'Fail', 'Ignore'"),
        ("webhook.deviceClassFailurePolicy=fail", "value must be one of 'Fail', 'Ignore'"),
        ("webhook.validating.timeoutSeconds=31", "maximum"),
        ("certificates.mode=vault", "value must be one of"),
        ("service.extra=1", "additional properties 'extra' not allowed"),
        ("webhook.url=http://127.0.0.1:9443", "does not match pattern"),
        ("webhook.caBundle=not base64!", "does not match pattern"),
    ],
)
def test_the_values_schema_refuses_unknown_keys_and_bad_values(
    override: str, complaint: str
) -> None:
    result = run_helm("template", RELEASE, str(CHART), "--set", override)
    assert result.returncode != 0
    assert complaint in result.stderr


def _schema_leaves(schema: Obj, prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """Paths of the chart's own settings: properties that are not closed sections."""
    for key, sub in schema.get("properties", {}).items():
        if sub.get("additionalProperties") is False and "properties" in sub and key != "issuerRef":
            yield from _schema_leaves(sub, (*prefix, key))
        else:
            yield (*prefix, key)


def _values_lines() -> dict[tuple[str, ...], int]:
    """Line index of every mapping key in values.yaml, by key path."""
    found: dict[tuple[str, ...], int] = {}
    stack: list[tuple[int, str]] = []
    for number, line in enumerate((CHART / "values.yaml").read_text().splitlines()):
        match = re.match(r"^( *)([A-Za-z][\w.-]*):", line)
        if not match:
            continue
        indent = len(match.group(1))
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, match.group(2)))
        found.setdefault(tuple(key for _, key in stack), number)
    return found


def test_every_value_is_commented() -> None:
    """Each setting the schema declares sits in values.yaml under a comment that explains it."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    lines = (CHART / "values.yaml").read_text().splitlines()
    where = _values_lines()
    missing = []
    for path in _schema_leaves(schema):
        if path == ("global",):
            continue  # Helm's own, never set in values.yaml
        number = where.get(path)
        if number is None or not lines[number - 1].strip().startswith("#"):
            missing.append(".".join(path))
    assert missing == []


_REQUIRED_CRD_FIELDS: dict[tuple[str, str], tuple[tuple[str, ...], ...]] = {
    ("cert-manager.io/v1", "Certificate"): (
        ("metadata", "name"),
        ("spec", "secretName"),
        ("spec", "issuerRef", "name"),
    ),
    ("cert-manager.io/v1", "Issuer"): (("metadata", "name"), ("spec",)),
    ("monitoring.coreos.com/v1", "ServiceMonitor"): (
        ("metadata", "name"),
        ("spec", "selector"),
        ("spec", "endpoints"),
    ),
    # Checked against the upstream CRD by the API server in tests/e2e/test_report.py, and its
    # rules by promtool in tests/alerts.
    ("monitoring.coreos.com/v1", "PrometheusRule"): (
        ("metadata", "name"),
        ("spec", "groups"),
    ),
}
_ISSUER_TYPES = {"selfSigned", "ca", "vault", "venafi", "acme"}


def _check_crd_object(doc: Obj) -> None:
    for path in _REQUIRED_CRD_FIELDS[(doc["apiVersion"], doc["kind"])]:
        node: Any = doc
        for part in path:
            assert isinstance(node, dict) and part in node, f"{doc['kind']}: missing {path}"
            node = node[part]
        assert node not in (None, "", []), f"{doc['kind']}: empty {path}"
    if doc["kind"] == "Issuer":
        assert len(_ISSUER_TYPES & set(doc["spec"])) == 1
    if doc["kind"] == "Certificate":
        assert doc["spec"].get("dnsNames") or doc["spec"].get("isCA")
    if doc["kind"] == "ServiceMonitor":
        assert all(endpoint.get("port") for endpoint in doc["spec"]["endpoints"])


RELEASES = ("1.34.0", "1.35.0", "1.36.0", "1.37.0")
"""Every release the chart's kubeVersion admits that users run: rendered for each
(`helm template --kube-version`) and validated against that release's schemas."""


@pytest.mark.parametrize("release", RELEASES)
@by_values_file
def test_every_rendered_object_is_valid_for_each_supported_release(
    values: Path, release: str
) -> None:
    problems = []
    for doc in render("-f", str(values), "--kube-version", release):
        if (doc["apiVersion"], doc["kind"]) in _REQUIRED_CRD_FIELDS:
            _check_crd_object(doc)
            continue
        try:
            kubernetes_validate.validate(doc, release, strict=True)
        except kubernetes_validate.ValidationError as exc:
            path = ".".join(str(p) for p in exc.path)
            problems.append(f"{doc['kind']} {doc['metadata']['name']}: {path}: {exc.message}")
    assert problems == []


@by_values_file
def test_object_names_fit_in_63_characters_and_never_collide(values: Path) -> None:
    seen: set[tuple[str, str]] = set()
    for doc in _render(values):
        name = doc["metadata"]["name"]
        assert len(name) <= 63, name
        assert (doc["kind"], name) not in seen
        seen.add((doc["kind"], name))


# -- the workload ---------------------------------------------------------------------------


@by_in_cluster_values_file
def test_the_deployment_runs_hardened_with_probes_on_the_health_port(values: Path) -> None:
    docs = _render(values)
    pod = _one(docs, "Deployment")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    security = container["securityContext"]

    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    # probes go to the health listener (own port, thread and loop), not the busy webhook port
    assert container["livenessProbe"]["httpGet"] == {
        "path": "/healthz",
        "port": "health",
        "scheme": "HTTP",
    }
    assert container["readinessProbe"]["httpGet"] == {
        "path": "/readyz",
        "port": "health",
        "scheme": "HTTP",
    }
    env = {e["name"]: e.get("value") for e in container["env"]}
    health_port = _values(values)["healthPort"]
    assert {"name": "health", "containerPort": health_port, "protocol": "TCP"} in container["ports"]
    assert env["DRA_WEBHOOK_HEALTH_PORT"] == str(health_port)
    assert container["resources"]["requests"]
    assert {"--config=/etc/dra-webhook/policy.yaml", "--in-cluster"} <= set(container["args"])
    assert "--cert-dir=/etc/dra-webhook/certs" in container["args"]
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert "emptyDir" in volumes[mounts["/tmp"]]
    certs = volumes[mounts["/etc/dra-webhook/certs"]]
    if _values(values)["certificates"]["mode"] == "managed":  # written by the server
        assert certs["emptyDir"] == {"medium": "Memory", "sizeLimit": "1Mi"}
    else:
        assert certs["secret"]["secretName"]
    assert pod["affinity"] and pod["topologySpreadConstraints"]


LIMIT_SETTINGS = {
    "maxConnections": "DRA_WEBHOOK_MAX_CONNECTIONS",
    "maxHeaderBytes": "DRA_WEBHOOK_MAX_HEADER_BYTES",
    "headerTimeoutSeconds": "DRA_WEBHOOK_HEADER_TIMEOUT_SECONDS",
    "bodyTimeoutSeconds": "DRA_WEBHOOK_BODY_TIMEOUT_SECONDS",
    "idleTimeoutSeconds": "DRA_WEBHOOK_IDLE_TIMEOUT_SECONDS",
    "maxBufferedBytes": "DRA_WEBHOOK_MAX_BUFFERED_BYTES",
    "maxQueueSeconds": "DRA_WEBHOOK_MAX_QUEUE_SECONDS",
}


def test_every_transport_limit_value_reaches_the_server_as_its_setting() -> None:
    from app.config import Settings

    docs = _render(CHART / "ci" / "default-values.yaml")
    container = _one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    limits = yaml.safe_load((CHART / "values.yaml").read_text())["limits"]
    assert set(limits) == set(LIMIT_SETTINGS)
    for key, variable in LIMIT_SETTINGS.items():
        assert env[variable] == str(limits[key]), key
        # the chart's defaults are the server's
        field = variable.removeprefix("DRA_WEBHOOK_").lower()
        assert getattr(Settings(), field) == limits[key], key


def test_template_garbage_collection_values_reach_the_server_with_its_defaults() -> None:
    from app.config import Settings

    docs = _render(CHART / "ci" / "default-values.yaml")
    container = _one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    gc = yaml.safe_load((CHART / "values.yaml").read_text())["templateGarbageCollection"]
    assert env["DRA_WEBHOOK_TEMPLATE_GC_GRACE_SECONDS"] == str(gc["graceSeconds"])
    assert env["DRA_WEBHOOK_TEMPLATE_GC_INTERVAL_SECONDS"] == str(gc["intervalSeconds"])
    assert Settings().template_gc_grace_seconds == gc["graceSeconds"]
    assert Settings().template_gc_interval_seconds == gc["intervalSeconds"]


def test_the_network_policy_is_on_by_default_and_admits_the_webhook_port_only() -> None:
    docs = _render(CHART / "ci" / "default-values.yaml")
    policy = _one(docs, "NetworkPolicy")["spec"]
    assert policy["policyTypes"] == ["Ingress"]
    (rule,) = policy["ingress"]
    assert rule["ports"] == [{"port": "https", "protocol": "TCP"}]
    assert "from" not in rule  # any source by default: the API server's address varies
    selected = _one(docs, "Deployment")["spec"]["selector"]["matchLabels"]
    assert policy["podSelector"]["matchLabels"] == selected


def test_the_network_policy_can_be_turned_off_or_narrowed_to_given_sources() -> None:
    off = run_helm("template", RELEASE, str(CHART), "--set", "networkPolicy.enabled=false")
    assert off.returncode == 0, off.stderr
    assert "kind: NetworkPolicy" not in off.stdout
    docs = _render(CHART / "ci" / "self-signed-values.yaml")
    (rule,) = _one(docs, "NetworkPolicy")["spec"]["ingress"]
    assert rule["from"] == [{"ipBlock": {"cidr": "10.0.0.0/8"}}]


def test_two_replicas_by_default_kept_available_by_a_disruption_budget() -> None:
    docs = _render(CHART / "ci" / "default-values.yaml")
    assert _one(docs, "Deployment")["spec"]["replicas"] == 2
    budget = _one(docs, "PodDisruptionBudget")["spec"]
    assert budget["maxUnavailable"] == 1
    assert (
        budget["selector"]["matchLabels"]
        == (_one(docs, "Deployment")["spec"]["selector"]["matchLabels"])
    )


def test_with_autoscaling_the_hpa_owns_the_replica_count() -> None:
    docs = _render(CHART / "ci" / "hpa-values.yaml")
    assert "replicas" not in _one(docs, "Deployment")["spec"]
    hpa = _one(docs, "HorizontalPodAutoscaler")["spec"]
    assert (hpa["minReplicas"], hpa["maxReplicas"]) == (3, 10)
    assert hpa["scaleTargetRef"]["name"] == _one(docs, "Deployment")["metadata"]["name"]


def test_the_service_sends_port_443_to_the_container_https_port() -> None:
    docs = _render(CHART / "ci" / "default-values.yaml")
    (port,) = _one(docs, "Service")["spec"]["ports"]
    container = _one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert (port["port"], port["targetPort"]) == (443, "https")
    assert {"name": "https", "containerPort": 8443, "protocol": "TCP"} in container["ports"]


def test_the_cluster_role_grants_only_what_the_server_uses() -> None:
    docs = _render(CHART / "ci" / "default-values.yaml")
    granted = {
        (group, resource, verb)
        for rule in _webhook_role(docs, "ClusterRole")["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    read = {"get", "list", "watch"}
    expected = {("", r, v) for r in ("namespaces", "resourcequotas") for v in read}
    expected |= {
        ("resource.k8s.io", r, v)
        for r in ("deviceclasses", "resourceslices", "resourceclaims", "resourceclaimtemplates")
        for v in read
    }
    expected |= {("", "nodes", v) for v in ("list", "watch")}  # labels, as metadata only
    # who may preempt, and the priority of the pods holding claims (docs/rbac.md)
    expected |= {("scheduling.k8s.io", "priorityclasses", v) for v in read}
    expected |= {("", "pods", v) for v in ("list", "watch")}
    # group claims, where the release serves PodGroups
    expected |= {("scheduling.k8s.io", "podgroups", v) for v in ("list", "watch")}
    # translation's templates: created, touched and garbage-collected (docs/rbac.md)
    expected |= {
        ("resource.k8s.io", "resourceclaimtemplates", v) for v in ("create", "patch", "delete")
    }
    assert granted == expected
    values = str(CHART / "ci" / "default-values.yaml")
    without_pods = render("-f", values, "--set", "rbac.readPods=false")
    rules = _webhook_role(without_pods, "ClusterRole")["rules"]
    assert not any("pods" in rule["resources"] for rule in rules)
    binding = _webhook_role(docs, "ClusterRoleBinding")
    assert binding["subjects"] == [
        {
            "kind": "ServiceAccount",
            "name": _one(docs, "ServiceAccount")["metadata"]["name"],
            "namespace": NAMESPACE,
        }
    ]


def test_the_cluster_role_is_the_one_docs_rbac_md_checks_against_the_live_source() -> None:
    text = (REPO / "docs" / "rbac.md").read_text()
    block = text.split("```yaml\n", 1)[1].split("```", 1)[0]
    (documented,) = [d for d in yaml.safe_load_all(block) if d["kind"] == "ClusterRole"]
    rendered = _webhook_role(_render(CHART / "ci" / "default-values.yaml"), "ClusterRole")
    assert rendered["rules"] == documented["rules"]


def _webhook_role(docs: tuple[Obj, ...], kind: str) -> Obj:
    """The webhook's ClusterRole or its binding (the managed certificates' are apart:
    tests/chart/test_chart_certificates.py)."""
    (found,) = [d for d in of_kind(docs, kind) if d["metadata"]["name"] == f"{RELEASE}-dra-webhook"]
    return found


@by_values_file
def test_the_policy_configmap_is_a_policy_the_server_accepts(values: Path) -> None:
    config = _one(_render(values), "ConfigMap")
    policy = parse_policy(config["data"]["policy.yaml"], "rendered ConfigMap")
    assert policy.namespace_modes.label == _values(values)["policy"]["namespaceModes"]["label"]


def test_the_charts_default_policy_is_the_servers_default_policy() -> None:
    """values.yaml carries the whole default policy, so what operators edit is what runs.

    When the embedded default (app/config/default-policy.yaml) changes, copy the change into
    `policy:` in charts/dra-webhook/values.yaml.
    """
    config = _one(_render(CHART / "ci" / "default-values.yaml"), "ConfigMap")
    rendered = parse_policy(config["data"]["policy.yaml"], "chart")
    # the one key the chart adds: its admission policy warns in audit namespaces itself
    assert rendered.dra_only.audit_warned_by_admission_policy
    unwarned = rendered.dra_only.model_copy(update={"audit_warned_by_admission_policy": False})
    assert rendered.model_copy(update={"dra_only": unwarned}) == load_policy()
    embedded = yaml.safe_load((REPO / "app" / "config" / "default-policy.yaml").read_text())
    chart = yaml.safe_load(config["data"]["policy.yaml"])
    assert set(chart) == set(embedded), "every section of the default policy"


def test_the_chart_tells_the_webhook_not_to_warn_twice_only_with_its_admission_policy() -> None:
    without = run_helm(
        "template", RELEASE, str(CHART), "-n", NAMESPACE, "--set", "admissionPolicy.enabled=false"
    )
    assert without.returncode == 0, without.stderr
    docs = tuple(d for d in yaml.safe_load_all(without.stdout) if d)
    policy = parse_policy(_one(docs, "ConfigMap")["data"]["policy.yaml"], "chart")
    assert not policy.dra_only.audit_warned_by_admission_policy


# -- certificates ---------------------------------------------------------------------------


@pytest.mark.parametrize("values", [CHART / "ci" / "self-signed-values.yaml"])
def test_self_signed_mode_generates_a_serving_pair_whose_ca_is_the_webhooks_ca_bundle(
    values: Path,
) -> None:
    docs = _render(values)
    secret = _one(docs, "Secret")
    ca = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["ca.crt"]))
    serving = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    serving.verify_directly_issued_by(ca)
    sans = serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    service = _one(docs, "Service")["metadata"]["name"]
    assert f"{service}.{NAMESPACE}.svc" in sans.get_values_for_type(x509.DNSName)
    for _, webhook in _webhooks(docs):
        assert webhook["clientConfig"]["caBundle"] == secret["data"]["ca.crt"]
    deployment = _one(docs, "Deployment")["spec"]["template"]["spec"]
    assert {"name": "certs", "secret": {"secretName": secret["metadata"]["name"]}} in deployment[
        "volumes"
    ]


@pytest.mark.parametrize(
    "values",
    [CHART / "ci" / "cert-manager-values.yaml", CHART / "ci" / "cert-manager-issuer-values.yaml"],
)
def test_cert_manager_mode_injects_the_ca_of_the_serving_certificate(values: Path) -> None:
    docs = _render(values)
    assert of_kind(docs, "Secret") == []
    serving = next(c for c in of_kind(docs, "Certificate") if not c["spec"].get("isCA", False))
    service = _one(docs, "Service")["metadata"]["name"]
    assert f"{service}.{NAMESPACE}.svc" in serving["spec"]["dnsNames"]
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        config = _one(docs, kind)
        assert config["metadata"]["annotations"] == {
            "cert-manager.io/inject-ca-from": f"{NAMESPACE}/{serving['metadata']['name']}"
        }
        assert all("caBundle" not in w["clientConfig"] for w in config["webhooks"])
    pod = _one(docs, "Deployment")["spec"]["template"]["spec"]
    assert {"name": "certs", "secret": {"secretName": serving["spec"]["secretName"]}} in pod[
        "volumes"
    ]


@pytest.mark.parametrize("mode", ["managed", "selfSigned", "certManager"])
def test_an_external_url_gets_the_given_ca_bundle_and_no_in_cluster_workload(mode: str) -> None:
    """webhook.url (development, the control-plane tests): every entry calls the URL with the
    given caBundle; the chart makes no Secret, Deployment or Service for a server it does not
    run, and cert-manager is not asked to inject a CA over the given one."""
    values = yaml.safe_load(EXTERNAL_URL_VALUES.read_text())["webhook"]
    result = run_helm(
        "template", RELEASE, str(CHART), "-n", NAMESPACE, "-f", str(EXTERNAL_URL_VALUES),
        "--set", f"certificates.mode={mode}",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    docs = tuple(d for d in yaml.safe_load_all(result.stdout) if d)
    assert {d["kind"] for d in docs} == {
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "ConfigMap",
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    }
    entries = list(_webhooks(docs))
    assert len(entries) == 10  # with the operators' workloads, group claims and DeviceTaintRules
    for kind, webhook in entries:
        path = "/mutate" if kind.startswith("Mutating") else "/validate"
        assert webhook["clientConfig"] == {
            "url": values["url"] + path,
            "caBundle": values["caBundle"],
        }
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        assert "annotations" not in _one(docs, kind)["metadata"]


def test_a_ca_bundle_without_an_external_url_is_refused() -> None:
    result = run_helm("template", RELEASE, str(CHART), "--set", "webhook.caBundle=QUJD")
    assert result.returncode != 0
    assert "webhook.caBundle is only used with webhook.url" in result.stderr


# -- the webhook configurations -------------------------------------------------------------


@by_values_file
def test_every_webhook_speaks_v1_with_equivalent_matching_and_values_for_failure(
    values: Path,
) -> None:
    settings = _values(values)["webhook"]
    for kind, webhook in _webhooks(_render(values)):
        side = settings["mutating" if kind.startswith("Mutating") else "validating"]
        assert webhook["admissionReviewVersions"] == ["v1"]
        assert webhook["matchPolicy"] == "Equivalent"
        if webhook["name"].startswith("deviceclasses."):
            assert webhook["failurePolicy"] == settings["deviceClassFailurePolicy"]
        elif webhook["name"].startswith("devicetaintrules."):
            assert webhook["failurePolicy"] == settings["deviceTaintRuleFailurePolicy"]
        else:
            assert webhook["failurePolicy"] == side["failurePolicy"]
        assert webhook["timeoutSeconds"] == side["timeoutSeconds"]
        path = "/mutate" if kind.startswith("Mutating") else "/validate"
        if settings.get("url"):
            assert webhook["clientConfig"]["url"] == settings["url"] + path
        else:
            service = webhook["clientConfig"]["service"]
            assert (service["namespace"], service["port"], service["path"]) == (
                NAMESPACE,
                443,
                path,
            )
        if kind.startswith("Mutating"):
            assert webhook["reinvocationPolicy"] == side["reinvocationPolicy"]
            creates_templates = not webhook["name"].startswith("claims.")
            assert webhook["sideEffects"] == ("NoneOnDryRun" if creates_templates else "None")
        else:
            assert webhook["sideEffects"] == "None"


CLUSTER_SCOPED = ("deviceclasses.", "devicetaintrules.")
"""Entries of cluster-scoped kinds: no namespaceSelector can filter them."""


def _rules(docs: tuple[Obj, ...], kind: str) -> set[tuple[str, str, str]]:
    return {
        (group, resource, operation)
        for config in of_kind(docs, kind)
        for webhook in config["webhooks"]
        for rule in webhook["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for operation in rule["operations"]
    }


def test_the_webhooks_receive_the_kinds_and_operations_the_design_names() -> None:
    docs = _render(CHART / "ci" / "default-values.yaml")
    assert _rules(docs, "MutatingWebhookConfiguration") == {
        ("", "pods", "CREATE"),
        ("resource.k8s.io", "resourceclaims", "CREATE"),
        ("resource.k8s.io", "resourceclaimtemplates", "CREATE"),
    }
    both = ("CREATE", "UPDATE")
    # pods: CREATE only, a pod's resources cannot change afterwards (see webhooks.yaml)
    expected = {("", "pods", "CREATE")}
    expected |= {
        ("apps", r, op)
        for r in ("deployments", "replicasets", "statefulsets", "daemonsets")
        for op in both
    }
    expected |= {("batch", r, op) for r in ("jobs", "cronjobs") for op in both}
    expected |= {("", "replicationcontrollers", op) for op in both}
    expected |= {
        ("resource.k8s.io", r, "CREATE") for r in ("resourceclaims", "resourceclaimtemplates")
    }
    expected |= {("resource.k8s.io", "deviceclasses", op) for op in both}
    # group claims: CREATE only, a Workload's and a PodGroup's resourceClaims are immutable
    expected |= {("scheduling.k8s.io", r, "CREATE") for r in ("workloads", "podgroups")}
    expected |= {("resource.k8s.io", "devicetaintrules", op) for op in both}
    # the operators' workloads (webhook.operatorWorkloads), CREATE and UPDATE
    expected |= {
        (entry["apiGroup"], r, op)
        for entry in _values(CHART / "ci" / "default-values.yaml")["webhook"]["operatorWorkloads"]
        for r in entry["resources"]
        for op in both
    }
    assert _rules(docs, "ValidatingWebhookConfiguration") == expected


def test_group_claims_are_sent_in_the_versions_that_carry_them_only_when_they_carry_some() -> None:
    docs = _render(CHART / "ci" / "default-values.yaml")
    (entry,) = [w for _, w in _webhooks(docs) if w["name"].startswith("group-claims.")]
    assert entry["rules"][0]["apiVersions"] == ["v1beta1", "v1alpha2"]
    assert [c["name"] for c in entry["matchConditions"]] == ["carries-group-claims"]
    off = render(
        "-f", str(CHART / "ci" / "default-values.yaml"), "--set", "webhook.groupClaims=false"
    )
    assert not [w for _, w in _webhooks(off) if w["name"].startswith("group-claims.")]


def _selector(webhook: Obj) -> dict[str, Obj]:
    return {e["key"]: e for e in webhook["namespaceSelector"]["matchExpressions"]}


def _wide(values: Obj, kind: str, entry: str) -> bool:
    """Whether an entry should see every non-exempt namespace (webhook.namespaceScope)."""
    scope = values["webhook"].get("namespaceScope", "auto")
    if scope != "auto":
        return bool(scope == "all")
    policy = values["policy"]
    if kind.startswith("Validating"):
        return bool(policy.get("quotas"))
    defaults = policy.get("defaults") or {}
    wants_defaults = defaults.get("deviceClasses") or defaults.get("namespaceDeviceClasses")
    return entry == "claims" and bool(wants_defaults)


@by_values_file
def test_the_release_and_system_namespaces_are_never_sent(values: Path) -> None:
    settings = _values(values)
    must_exempt = {NAMESPACE, "kube-system"}
    must_exempt |= set(settings["policy"].get("exemptNamespaces", []))
    must_exempt |= set(settings["webhook"].get("extraExemptNamespaces", []))
    for _, webhook in _webhooks(_render(values)):
        if webhook["name"].startswith(CLUSTER_SCOPED):
            continue
        exempt = _selector(webhook)["kubernetes.io/metadata.name"]
        assert exempt["operator"] == "NotIn"
        assert set(exempt["values"]) == must_exempt


def _policy_enforced_by_the_api_server(values: Obj) -> bool:
    """Whether the chart renders the dra-only rule as a ValidatingAdmissionPolicy."""
    enabled = values.get("admissionPolicy", {}).get("enabled", True)
    draonly = values["policy"].get("draOnly") or {}
    mapped = draonly.get("mappedNames") == "allow" or draonly.get(
        "allowDeviceClassExtendedResources", False
    )
    return bool(enabled) and not mapped


def _pods_everywhere(values: Obj) -> bool:
    """Whether the validating pods entry still sees every mode (the webhook enforces dra-only,
    or admin rules on Pods, or webhook.podsWithClaims: all)."""
    rules = (values["policy"].get("cel") or {}).get("rules") or []
    return (
        not _policy_enforced_by_the_api_server(values)
        or values["webhook"].get("podsWithClaims", "quotas") == "all"
        or any("Pod" in rule["match"]["kinds"] for rule in rules)
    )


@by_values_file
def test_only_namespaces_with_the_mode_label_are_sent_unless_the_policy_needs_all(
    values: Path,
) -> None:
    """Each entry sees the modes its checks act in: pods are mutated only in translate
    namespaces; with the admission policy on, validated only there, plus where a quota needs
    them (pods-quota-N); everything else in the three modes, or everywhere when wide."""
    settings = _values(values)
    modes = settings["policy"]["namespaceModes"]
    every_mode = [modes["draOnly"], modes["translate"], modes["audit"]]
    translate_only = {"key": modes["label"], "operator": "In", "values": [modes["translate"]]}
    quotas = [q["namespaceSelector"] for q in settings["policy"].get("quotas") or []]
    for kind, webhook in _webhooks(_render(values)):
        entry = webhook["name"].split(".", 1)[0]
        if webhook["name"].startswith(CLUSTER_SCOPED):
            continue
        selector = _selector(webhook)
        if (
            entry == "pods" and (kind.startswith("Mutating") or not _pods_everywhere(settings))
        ) or (
            kind.startswith("Mutating") and entry in ("workloads", "cronjobs", "operator-workloads")
        ):
            assert selector[modes["label"]] == translate_only, (kind, entry)
        elif entry.startswith("pods-quota-"):
            quota = quotas[int(entry.removeprefix("pods-quota-"))]
            assert webhook["namespaceSelector"].get("matchLabels") == quota.get("matchLabels")
            assert selector[modes["label"]] == (
                {"key": modes["label"], "operator": "NotIn", "values": [modes["translate"]]}
                if _wide(settings, kind, "pods")
                else {
                    "key": modes["label"],
                    "operator": "In",
                    "values": [modes["draOnly"], modes["audit"]],
                }
            ), entry
        elif _wide(settings, kind, entry):
            assert set(selector) == {"kubernetes.io/metadata.name"}, (kind, entry)
        else:
            assert selector[modes["label"]] == {
                "key": modes["label"],
                "operator": "In",
                "values": every_mode,
            }, (kind, entry)


@by_values_file
def test_quota_entries_for_pods_exist_exactly_when_the_admission_policy_takes_the_rule(
    values: Path,
) -> None:
    settings = _values(values)
    entries = {w["name"].split(".", 1)[0] for _, w in _webhooks(_render(values))}
    quota_entries = {e for e in entries if e.startswith("pods-quota-")}
    quotas = settings["policy"].get("quotas") or []
    expected = 0 if _pods_everywhere(settings) else len(quotas)
    assert quota_entries == {f"pods-quota-{i}" for i in range(expected)}


def test_without_the_admission_policy_the_webhook_sees_pods_of_every_mode_again() -> None:
    result = run_helm(
        "template", RELEASE, str(CHART), "-n", NAMESPACE, "--set", "admissionPolicy.enabled=false"
    )
    assert result.returncode == 0, result.stderr
    docs = tuple(d for d in yaml.safe_load_all(result.stdout) if d)
    assert not of_kind(docs, "ValidatingAdmissionPolicy")
    assert not of_kind(docs, "ValidatingAdmissionPolicyBinding")
    pods = {
        w["name"].split(".", 1)[0]: w
        for kind, w in _webhooks(docs)
        if kind.startswith("Validating") and w["name"].startswith("pods")
    }
    assert set(pods) == {"pods", "pods-translate"}
    assert _selector(pods["pods"])["gpu-mode"]["values"] == ["dra-only", "audit"]
    # translate namespaces: one call per pod the mutating call judged (test_chart_one_call.py)
    assert _selector(pods["pods-translate"])["gpu-mode"]["values"] == ["translate"]


@pytest.mark.parametrize(
    "setting",
    [
        "policy.draOnly.mappedNames=allow",
        "policy.draOnly.allowDeviceClassExtendedResources=true",  # deprecated
    ],
)
def test_names_served_by_device_classes_leave_the_rule_to_the_webhook(setting: str) -> None:
    result = run_helm("template", RELEASE, str(CHART), "-n", NAMESPACE, "--set", setting)
    assert result.returncode == 0, result.stderr
    docs = tuple(d for d in yaml.safe_load_all(result.stdout) if d)
    assert not of_kind(docs, "ValidatingAdmissionPolicy")
    policy = parse_policy(_one(docs, "ConfigMap")["data"]["policy.yaml"], "chart")
    assert policy.dra_only.allows_mapped_names
    assert not policy.dra_only.audit_warned_by_admission_policy  # no admission policy warns
    # every pod with a device request in dra-only and audit namespaces reaches the webhook
    pods = [w for kind, w in _webhooks(docs) if kind.startswith("Validating")]
    (entry,) = [w for w in pods if w["name"].startswith("pods.")]
    assert _selector(entry)["gpu-mode"]["values"] == ["dra-only", "audit"]


def test_a_mapped_names_value_the_server_would_refuse_fails_the_render() -> None:
    result = run_helm(
        "template", RELEASE, str(CHART), "-n", NAMESPACE, "--set", "policy.draOnly.mappedNames=warn"
    )
    assert result.returncode != 0
    assert "mappedNames" in result.stderr


def test_with_quotas_and_defaults_every_namespace_reaches_the_entries_that_need_it() -> None:
    docs = _render(CHART / "ci" / "policy-wide-values.yaml")
    labelled = {
        (kind, w["name"].split(".", 1)[0])
        for kind, w in _webhooks(docs)
        if "namespaceSelector" in w and "gpu-mode" in _selector(w)
    }
    assert labelled == {
        ("MutatingWebhookConfiguration", "pods"),
        ("MutatingWebhookConfiguration", "workloads"),
        ("MutatingWebhookConfiguration", "cronjobs"),
        ("MutatingWebhookConfiguration", "operator-workloads"),
        # translate namespaces; the quota's pods everywhere else
        ("ValidatingWebhookConfiguration", "pods"),
        ("ValidatingWebhookConfiguration", "pods-quota-0"),
    }


def test_workload_translation_adds_mutating_workload_entries_with_dry_run_side_effects() -> None:
    docs = _render(CHART / "ci" / "policy-wide-values.yaml")
    mutating = {
        w["name"].split(".", 1)[0]: w
        for w in _one(docs, "MutatingWebhookConfiguration")["webhooks"]
    }
    assert set(mutating) == {"pods", "workloads", "cronjobs", "operator-workloads", "claims"}
    for name in ("workloads", "cronjobs"):
        assert mutating[name]["sideEffects"] == "NoneOnDryRun"
        assert mutating[name]["matchConditions"][0]["name"] == "template-uses-devices"
    default = _one(_render(CHART / "ci" / "default-values.yaml"), "MutatingWebhookConfiguration")
    assert [w["name"].split(".", 1)[0] for w in default["webhooks"]] == ["pods", "claims"]


def test_the_release_namespace_stays_exempt_whatever_the_values_say() -> None:
    result = run_helm(
        "template",
        RELEASE,
        str(CHART),
        "-n",
        "gpu-webhook",
        "--set-json",
        "policy.exemptNamespaces=[]",
        "--set-json",
        "webhook.extraExemptNamespaces=[]",
    )
    assert result.returncode == 0, result.stderr
    docs = tuple(d for d in yaml.safe_load_all(result.stdout) if d)
    for _, webhook in _webhooks(docs):
        if "namespaceSelector" in webhook:
            names = _selector(webhook)["kubernetes.io/metadata.name"]["values"]
            assert {"gpu-webhook", "kube-system"} <= set(names)


def test_cluster_scoped_device_classes_have_their_own_entry_without_a_namespace_selector() -> None:
    docs = _render(CHART / "ci" / "default-values.yaml")
    (entry,) = [w for _, w in _webhooks(docs) if w["name"].startswith("deviceclasses.")]
    assert "namespaceSelector" not in entry
    assert entry["rules"][0]["scope"] == "Cluster"
    # An outage never blocks DeviceClass writes (a driver installing into kube-system), while
    # the other validating entries keep failing closed.
    assert entry["failurePolicy"] == "Ignore"
    others = [w for _, w in _webhooks(docs) if not w["name"].startswith(CLUSTER_SCOPED)]
    assert {w["failurePolicy"] for w in others} == {"Fail"}
    docs = _render(CHART / "ci" / "self-signed-values.yaml")  # webhook.deviceClasses: false
    assert not [w for _, w in _webhooks(docs) if w["name"].startswith("deviceclasses.")]


def test_device_taint_rules_of_every_served_version_have_their_own_entry() -> None:
    docs = _render(CHART / "ci" / "default-values.yaml")
    (entry,) = [w for _, w in _webhooks(docs) if w["name"].startswith("devicetaintrules.")]
    assert "namespaceSelector" not in entry
    (rule,) = entry["rules"]
    assert rule["scope"] == "Cluster"
    assert rule["resources"] == ["devicetaintrules"]  # never the status the controller writes
    assert set(rule["apiVersions"]) == {"v1alpha3", "v1beta2", "v1"}
    # a drain is never blocked by an outage, unless the values say so
    assert entry["failurePolicy"] == "Ignore"
    default = str(CHART / "ci" / "default-values.yaml")
    docs = render("-f", default, "--set", "webhook.deviceTaintRuleFailurePolicy=Fail")
    (entry,) = [w for _, w in _webhooks(docs) if w["name"].startswith("devicetaintrules.")]
    assert entry["failurePolicy"] == "Fail"
    docs = render("-f", default, "--set", "webhook.deviceTaintRules=false")
    assert not [w for _, w in _webhooks(docs) if w["name"].startswith("devicetaintrules.")]


def test_the_device_class_failure_policy_is_set_apart_from_the_validating_one() -> None:
    values = CHART / "ci" / "policy-wide-values.yaml"  # validating Ignore, DeviceClasses Fail
    settings = _values(values)["webhook"]
    assert (settings["validating"]["failurePolicy"], settings["deviceClassFailurePolicy"]) == (
        "Ignore",
        "Fail",
    )
    (entry,) = [w for _, w in _webhooks(_render(values)) if w["name"].startswith("deviceclasses.")]
    assert entry["failurePolicy"] == "Fail"


# -- matchConditions as CEL -----------------------------------------------------------------


@cache
def _compile(expression: str, backend: str) -> Callable[[Obj], bool]:
    """Compile with the project's CEL engine, as an admission expression over `object`."""
    engine = get_engine(backend)
    program = engine.compile(expression, ADMISSION)

    def evaluate(obj: Obj) -> bool:
        variables = {"object": obj, "oldObject": None, "request": {}, "namespaceObject": None}
        result = program.evaluate(engine.activation(ADMISSION, {**variables, "params": None}))
        assert isinstance(result, bool), result
        return result

    return evaluate


by_backend = pytest.mark.parametrize("backend", BACKENDS)


def _fixture_object(name: str) -> Obj:
    obj: Obj = json.loads((FIXTURES / name).read_text())["request"]["object"]
    return obj


def _plain(pod_spec: Obj) -> Obj:
    """The same spec with only cpu/memory requests and no claims."""
    spec = copy.deepcopy(pod_spec)
    spec.pop("resourceClaims", None)
    for container in spec["containers"]:
        container["resources"] = {"requests": {"cpu": "500m", "memory": "1Gi"}}
    return spec


def _pod(spec: Obj) -> Obj:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec}


def _deployment(spec: Obj) -> Obj:
    return {"kind": "Deployment", "spec": {"template": {"metadata": {}, "spec": spec}}}


def _cronjob(spec: Obj) -> Obj:
    return {
        "kind": "CronJob",
        "spec": {"schedule": "@daily", "jobTemplate": {"spec": {"template": {"spec": spec}}}},
    }


def _with(spec: Obj, field: str, container: Obj) -> Obj:
    spec = copy.deepcopy(spec)
    spec[field] = [container]
    return spec


LEGACY_POD = _fixture_object("pod-create-legacy-gpu.json")
CLAIMS_POD = _fixture_object("pod-create-with-resourceclaims.json")
LEGACY_DEPLOYMENT = _fixture_object("deployment-create-legacy-gpu.json")
PLAIN_SPEC = _plain(LEGACY_POD["spec"])
GPU_LIMITS = {"name": "x", "image": "i", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
MIG_REQUESTS = {"name": "x", "image": "i", "resources": {"requests": {"nvidia.com/mig-1g.10gb": 1}}}

SELECTION: list[tuple[str, str, Obj, bool]] = [
    ("pods", "legacy pod (fixture)", LEGACY_POD, True),
    ("pods", "plain pod", _pod(PLAIN_SPEC), False),
    ("pods", "pod with DRA claims (fixture)", CLAIMS_POD, True),
    ("pods", "legacy init container", _pod(_with(PLAIN_SPEC, "initContainers", GPU_LIMITS)), True),
    (
        "pods",
        "legacy ephemeral container",
        _pod(_with(PLAIN_SPEC, "ephemeralContainers", MIG_REQUESTS)),
        True,
    ),
    ("pods", "container with no resources", _pod({"containers": [{"name": "c"}]}), False),
    ("pods", "pod without a spec", {"kind": "Pod", "metadata": {}}, False),
    ("workloads", "legacy Deployment (fixture)", LEGACY_DEPLOYMENT, True),
    ("workloads", "plain Deployment", _deployment(PLAIN_SPEC), False),
    ("workloads", "Deployment with claims", _deployment(CLAIMS_POD["spec"]), True),
    (
        "workloads",
        "workload with a legacy init container",
        _deployment(_with(PLAIN_SPEC, "initContainers", GPU_LIMITS)),
        True,
    ),
    ("workloads", "workload without a template", {"kind": "Deployment", "spec": {}}, False),
    ("cronjobs", "legacy CronJob", _cronjob(LEGACY_POD["spec"]), True),
    ("cronjobs", "plain CronJob", _cronjob(PLAIN_SPEC), False),
    ("cronjobs", "CronJob without a job template", {"kind": "CronJob", "spec": {}}, False),
]


@cache
def _conditions(values: Path) -> dict[tuple[str, str], list[Obj]]:
    return {
        (kind, webhook["name"].split(".", 1)[0]): webhook.get("matchConditions", [])
        for kind, webhook in _webhooks(_render(values))
    }


@by_backend
@by_values_file
def test_match_conditions_compile_as_cel(values: Path, backend: str) -> None:
    conditions = _conditions(values)
    assert conditions[("ValidatingWebhookConfiguration", "pods")]
    for entries in conditions.values():
        for condition in entries:
            _compile(condition["expression"], backend)


@by_backend
@pytest.mark.parametrize(
    ("entry", "case", "obj", "selected"), SELECTION, ids=[row[1] for row in SELECTION]
)
def test_match_conditions_send_objects_that_use_devices_and_keep_plain_ones_home(
    entry: str, case: str, obj: Obj, selected: bool, backend: str
) -> None:
    conditions = _conditions(CHART / "ci" / "default-values.yaml")
    kinds = ["ValidatingWebhookConfiguration"]
    if entry == "pods":
        kinds.append("MutatingWebhookConfiguration")
    for kind in kinds:
        (condition,) = [c for c in conditions[(kind, entry)] if c["name"].endswith("-devices")]
        assert _compile(condition["expression"], backend)(obj) is selected, (kind, case)


def test_claims_and_device_classes_are_always_sent() -> None:
    conditions = _conditions(CHART / "ci" / "default-values.yaml")
    assert conditions[("MutatingWebhookConfiguration", "claims")] == []
    assert conditions[("ValidatingWebhookConfiguration", "claims")] == []
    assert conditions[("ValidatingWebhookConfiguration", "deviceclasses")] == []


@pytest.mark.parametrize(
    ("overrides", "requests", "limits"),
    [
        ([], "128Mi", "768Mi"),
        (["workers=2"], "256Mi", "1536Mi"),
        (["workers=3", "memoryPerWorker.limitMi=400"], "384Mi", "1200Mi"),
        (["workers=2", "resources.limits.memory=1Gi"], "256Mi", "1Gi"),
        (["workers=2", "resources.requests.memory=200Mi"], "200Mi", "1536Mi"),
    ],
)
def test_the_memory_request_and_limit_follow_the_worker_count(
    overrides: list[str], requests: str, limits: str
) -> None:
    args = [arg for override in overrides for arg in ("--set", override)]
    result = run_helm("template", RELEASE, str(CHART), "-n", NAMESPACE, *args)
    assert result.returncode == 0, result.stderr
    docs = [d for d in yaml.safe_load_all(result.stdout) if d]
    (container,) = _one(tuple(docs), "Deployment")["spec"]["template"]["spec"]["containers"]
    assert container["resources"]["requests"] == {"cpu": "100m", "memory": requests}
    assert container["resources"]["limits"] == {"memory": limits}


def test_the_cache_budget_goes_to_the_server_and_a_limit_that_cannot_hold_it_is_refused() -> None:
    result = run_helm(
        "template",
        RELEASE,
        str(CHART),
        "-n",
        NAMESPACE,
        "--set",
        "memoryPerWorker.cacheBudgetMi=96",
    )
    assert result.returncode == 0, result.stderr
    docs = [d for d in yaml.safe_load_all(result.stdout) if d]
    (container,) = _one(tuple(docs), "Deployment")["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["DRA_WEBHOOK_CACHE_MAX_BYTES"] == str(96 * 1024 * 1024)
    # 512 (the 8,000-slice row's baseline) + 128 + 64 + 64 = 768: the default limit holds it
    assert (
        run_helm(
            "template", RELEASE, str(CHART), "--set", "memoryPerWorker.requestMi=512"
        ).returncode
        == 0
    )
    refused = run_helm(
        "template",
        RELEASE,
        str(CHART),
        "--set",
        "memoryPerWorker.requestMi=512",
        "--set",
        "memoryPerWorker.cacheBudgetMi=256",
    )
    assert refused.returncode != 0
    assert (
        "memoryPerWorker.limitMi (768) cannot hold requestMi (512) + cacheBudgetMi (256) + "
        "limits.maxBufferedBytes (64 MiB) + 64 MiB of headroom = 896 MiB" in refused.stderr
    )


@pytest.mark.parametrize(
    ("overrides", "refusal"),
    [
        (
            ["resources.limits.memory=256Mi"],
            "resources.limits.memory (256Mi = 256 MiB) cannot hold 1 worker(s) x "
            "(memoryPerWorker.requestMi (128) + cacheBudgetMi (128) + limits.maxBufferedBytes "
            "(64 MiB) + 64 MiB of headroom = 384 MiB) = 384 MiB: raise it to at least 384Mi",
        ),
        (
            ["resources.limits.memory=1Gi", "workers=3"],
            "resources.limits.memory (1Gi = 1024 MiB) cannot hold 3 worker(s) x "
            "(memoryPerWorker.requestMi (128) + cacheBudgetMi (128) + limits.maxBufferedBytes "
            "(64 MiB) + 64 MiB of headroom = 384 MiB) = 1152 MiB",
        ),
        (
            ["resources.limits.memory=1Gi", "memoryPerWorker.cacheBudgetMi=1024"],
            "resources.limits.memory (1Gi = 1024 MiB) cannot hold 1 worker(s) x "
            "(memoryPerWorker.requestMi (128) + cacheBudgetMi (1024) + limits.maxBufferedBytes "
            "(64 MiB) + 64 MiB of headroom = 1280 MiB) = 1280 MiB",
        ),
        (
            ["resources.limits.memory=400M"],  # decimal: 381 MiB
            "resources.limits.memory (400M = 381 MiB) cannot hold 1 worker(s)",
        ),
        (
            ["memoryPerWorker.limitMi=256"],
            "memoryPerWorker.limitMi (256) cannot hold requestMi (128) + cacheBudgetMi (128) + "
            "limits.maxBufferedBytes (64 MiB) + 64 MiB of headroom = 384 MiB",
        ),
        (
            ["resources.requests.memory=1Gi"],
            "resources.requests.memory (1Gi = 1024 MiB) is above the memory limit "
            "(768Mi = 768 MiB)",
        ),
        (
            ["resources.limits.memory=lots"],
            "resources.limits.memory (lots) is not a memory quantity",
        ),
    ],
)
def test_a_memory_limit_that_cannot_hold_the_cache_budget_is_refused_whichever_sets_it(
    overrides: list[str], refusal: str
) -> None:
    """The cache budget the server is given (memoryPerWorker.cacheBudgetMi) has to fit under
    the limit it runs with, be that limitMi x workers or resources.limits.memory: `helm
    template` fails with the arithmetic, not a note after install."""
    args = [arg for override in overrides for arg in ("--set", override)]
    refused = run_helm("template", RELEASE, str(CHART), "-n", NAMESPACE, *args)
    assert refused.returncode != 0
    assert refusal in refused.stderr


@pytest.mark.parametrize(
    ("overrides", "limit", "budget"),
    [
        ([], "768Mi", 128),
        (["resources.limits.memory=384Mi"], "384Mi", 128),  # exactly 128 + 128 + 64 + 64
        (["resources.limits.memory=0.5Gi", "memoryPerWorker.cacheBudgetMi=256"], "0.5Gi", 256),
        (["resources.limits.memory=2G", "workers=4"], "2G", 128),  # 1907 MiB >= 4 x 384
    ],
)
def test_a_memory_limit_that_holds_the_cache_budget_renders_with_that_budget(
    overrides: list[str], limit: str, budget: int
) -> None:
    args = [arg for override in overrides for arg in ("--set", override)]
    (container,) = _one(render(*args), "Deployment")["spec"]["template"]["spec"]["containers"]
    assert container["resources"]["limits"]["memory"] == limit
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["DRA_WEBHOOK_CACHE_MAX_BYTES"] == str(budget * 1024 * 1024)


# -- the ValidatingAdmissionPolicy: its CEL with the project's engine, against the webhook ----


def _admission_policy(values: Path = CHART / "ci" / "default-values.yaml") -> Obj:
    return _one(_render(values), "ValidatingAdmissionPolicy")


def _vap_verdict(
    policy: Obj, obj: Obj, mode: str, backend: str, labels: dict[str, str] | None = None
) -> tuple[bool, str]:
    """(allowed, message) of the policy for `obj` created in a namespace of that mode (and
    more namespace labels)."""
    group, _, version = obj["apiVersion"].rpartition("/")
    variables = {
        "object": obj,
        "oldObject": None,
        "request": {
            "kind": {"group": group, "version": version, "kind": obj["kind"]},
            "namespace": "gpu-e2e",
            "operation": "CREATE",
        },
        "namespaceObject": {
            "metadata": {"name": "gpu-e2e", "labels": {"gpu-mode": mode, **(labels or {})}}
        },
    }
    (validation,) = policy["spec"]["validations"]
    check = compile_admission(inline_variables(policy, validation["expression"]), backend, False)
    if check(variables):
        return True, ""
    message = compile_admission(
        inline_variables(policy, validation["messageExpression"]), backend, True
    )
    text = message(variables)
    assert isinstance(text, str)
    return False, text


def _wrapped(case: Any, kind: str) -> Obj:
    meta = {"name": "w", "namespace": "gpu-e2e"}
    if kind == "Pod":
        return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": case.spec}
    ((api_version, _),) = [key for key in WORKLOADS if key[1] == kind]
    return {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": meta,
        "spec": WORKLOADS[(api_version, kind)](case.spec),
    }


AGREEMENT = [
    (case, kind)
    for case in CASES
    for kind in ("Pod", "Deployment", "CronJob", "ReplicationController")
]


@by_backend
@pytest.mark.parametrize(
    ("case", "kind"), AGREEMENT, ids=[f"{kind}: {case.id}" for case, kind in AGREEMENT]
)
def test_the_admission_policy_and_the_webhook_agree_on_every_dra_only_case(
    case: Any, kind: str, backend: str
) -> None:
    """The rendered policy's CEL (the project's engine) and the webhook's pipeline, both from
    the chart's values (its ConfigMap is the webhook's policy), on the shared table: the same
    verdict, and a denial names every offending container and resource, and the fix."""
    docs = _render(CHART / "ci" / "default-values.yaml")
    policy = parse_policy(_one(docs, "ConfigMap")["data"]["policy.yaml"], "rendered ConfigMap")
    pipeline = make_pipeline(None, policy)
    obj = _wrapped(case, kind)
    webhook = pipeline.review(Endpoint.VALIDATE, decode_review(orjson.dumps(wrap(obj))))
    allowed, message = _vap_verdict(_admission_policy(), obj, "dra-only", backend)
    assert allowed is webhook.allowed is (not case.denied)
    if case.denied:
        assert "\n" not in message  # the API server drops a messageExpression with line breaks
        assert message.startswith("namespace gpu-e2e is dra-only (gpu-mode=dra-only): ")
        for offence in case.offences:
            said = f" {offence.container} asks for {offence.resource}: "
            assert said in message and said in webhook.message, offence
        for line in webhook.message.splitlines():
            if " -> " in line:  # the same fix: "-> use DeviceClass gpu.nvidia.com (count 2)"
                assert line.split(": ", 1)[1] in message, line
        assert "resourceClaims:" in message and "resourceClaimTemplateName:" in message


@by_backend
def test_in_audit_namespaces_the_admission_policy_warns_with_the_offences(backend: str) -> None:
    (case,) = [c for c in CASES if c.id == "every offending container"]
    allowed, message = _vap_verdict(_admission_policy(), _wrapped(case, "Pod"), "audit", backend)
    assert not allowed  # the binding for audit namespaces only warns (validationActions: Warn)
    assert "is in audit mode (gpu-mode=audit): would be denied in a dra-only namespace" in message
    assert "init container warmup asks for nvidia.com/gpu: 1" in message


def test_the_admission_policy_denies_in_dra_only_and_warns_in_audit_namespaces() -> None:
    docs = _render(CHART / "ci" / "default-values.yaml")
    bindings = {
        b["metadata"]["name"].removeprefix(f"{RELEASE}-dra-webhook-"): b["spec"]
        for b in of_kind(docs, "ValidatingAdmissionPolicyBinding")
        if b["spec"]["policyName"].endswith("-dra-only")
    }
    # (a third, in translate namespaces, holds judged pods where the validating entry may fail
    # open: test_chart_one_call.py)
    assert set(bindings) == {"dra-only-deny", "dra-only-warn"}
    for name, action, mode in (
        ("dra-only-deny", "Deny", "dra-only"),
        ("dra-only-warn", "Warn", "audit"),
    ):
        assert bindings[name]["validationActions"] == [action]
        selector = bindings[name]["matchResources"]["namespaceSelector"]
        expressions = {e["key"]: e for e in selector["matchExpressions"]}
        assert expressions["gpu-mode"] == {"key": "gpu-mode", "operator": "In", "values": [mode]}
        assert expressions["kubernetes.io/metadata.name"]["operator"] == "NotIn"
        assert NAMESPACE in expressions["kubernetes.io/metadata.name"]["values"]
    rules = _admission_policy()["spec"]["matchConstraints"]["resourceRules"]
    kinds = {(g, r) for rule in rules for g in rule["apiGroups"] for r in rule["resources"]}
    assert kinds == {
        ("", "pods"),
        ("", "replicationcontrollers"),
        ("apps", "deployments"),
        ("apps", "replicasets"),
        ("apps", "statefulsets"),
        ("apps", "daemonsets"),
        ("batch", "jobs"),
        ("batch", "cronjobs"),
    }
    assert all(rule["operations"] == ["CREATE"] for rule in rules)


def test_the_admission_policy_follows_the_policys_names_and_label() -> None:
    result = run_helm(
        "template", RELEASE, str(CHART), "-n", NAMESPACE,
        "--set", "policy.namespaceModes.label=example.com/gpus",
        "--set", "policy.namespaceModes.draOnly=strict",
        "--set", "policy.legacyResources.names={example.com/fpga-*}",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    docs = tuple(d for d in yaml.safe_load_all(result.stdout) if d)
    policy = _one(docs, "ValidatingAdmissionPolicy")
    fpga = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}
    fpga["spec"] = {
        "containers": [{"name": "a", "resources": {"limits": {"example.com/fpga-x": "1"}}}]
    }
    gpu = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}
    gpu["spec"] = {"containers": [{"name": "a", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}
    assert not _vap_verdict(policy, fpga, "strict", "cel-expr-python")[0]
    assert _vap_verdict(policy, gpu, "strict", "cel-expr-python")[0]
    deny = [
        b for b in of_kind(docs, "ValidatingAdmissionPolicyBinding")
        if b["metadata"]["name"].endswith("-dra-only-deny")
    ]  # fmt: skip
    (selector,) = deny[0]["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"][:1]
    assert selector == {"key": "example.com/gpus", "operator": "In", "values": ["strict"]}


def test_the_admission_policys_name_patterns_are_literals_the_api_server_compiles_once() -> None:
    """kube-apiserver's CEL compiles the pattern of `matches` once, with the policy, only when it
    is a literal at the call; a pattern read from a variable is compiled again for every resource
    name of every container of every pod (~43 µs each in Go's regexp: ~0.4 ms a pod with cpu,
    memory and ephemeral-storage in three containers). Without shell patterns in the names, no
    pattern at all."""

    def expressions(docs: tuple[Obj, ...]) -> list[str]:
        spec = _one(docs, "ValidatingAdmissionPolicy")["spec"]
        items = [*spec["variables"], *spec["validations"]]
        return [e[k] for e in items for k in ("expression", "messageExpression") if k in e]

    default = expressions(_render(CHART / "ci" / "default-values.yaml"))
    assert not [e for e in default if re.search(r"\.matches\((?!r')", e)], "a pattern not literal"
    assert any(r"r.matches(r'^(?:nvidia\.com/mig-.*|gpu\.intel\.com/.*)$')" in e for e in default)
    result = run_helm(
        "template", RELEASE, str(CHART), "-n", NAMESPACE,
        "--set", "policy.legacyResources.names={nvidia.com/gpu,amd.com/gpu}",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    exact = expressions(tuple(d for d in yaml.safe_load_all(result.stdout) if d))
    assert not [e for e in exact if "r in variables.legacyNames ||" in e]


def test_a_name_the_admission_policy_cannot_express_is_refused_with_the_way_out() -> None:
    result = run_helm(
        "template", RELEASE, str(CHART), "-n", NAMESPACE,
        "--set", "policy.legacyResources.names={example.com/fpga-[ab]}",
    )  # fmt: skip
    assert result.returncode != 0
    assert "admissionPolicy.enabled=false" in result.stderr


# -- policy exceptions: skipped by the admission policy, sent to the webhook ---------------------


@pytest.fixture(scope="module")
def exception_values(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Values with the shared table's exceptions (tests/dra_only_cases.py EXCEPTIONS)."""
    path = tmp_path_factory.mktemp("exceptions") / "values.yaml"
    path.write_text(yaml.safe_dump({"policy": {"exceptions": EXCEPTIONS}}))
    return path


def _labelled(obj: Obj, labels: dict[str, str]) -> Obj:
    obj = copy.deepcopy(obj)
    if obj["kind"] == "Pod":
        obj["metadata"]["labels"] = labels
    else:
        spec = obj["spec"]["jobTemplate"]["spec"] if obj["kind"] == "CronJob" else obj["spec"]
        spec["template"]["metadata"] = {"labels": labels}
    return obj


EXCEPTED = [(case, kind) for case in EXCEPTION_CASES for kind in case.kinds]


@by_backend
@pytest.mark.parametrize(
    ("case", "kind"), EXCEPTED, ids=[f"{kind}: {case.id}" for case, kind in EXCEPTED]
)
def test_the_admission_policy_skips_exactly_what_an_exception_selects(
    case: ExceptionCase, kind: str, backend: str, exception_values: Path
) -> None:
    """No clock in the API server's CEL: an object an exception selects is the webhook's to
    judge (by its date); every other one the policy denies as before. Which objects are
    selected is the same in the rendered CEL and in the webhook."""
    docs = _render(exception_values)
    obj = _labelled(_wrapped(case, kind), case.labels)
    allowed, message = _vap_verdict(
        _one(docs, "ValidatingAdmissionPolicy"), obj, "dra-only", backend, case.namespace_labels
    )
    assert allowed is case.selected, message
    policy = parse_policy(_one(docs, "ConfigMap")["data"]["policy.yaml"], "rendered ConfigMap")
    ns = {"gpu-mode": "dra-only", **case.namespace_labels}
    spec = pod_spec(kind, obj)
    assert spec is not None
    selecting = Exceptions(policy.exceptions).selecting(kind, spec, ns)
    assert bool(selecting) is case.selected


def test_each_exception_that_covers_pods_gets_a_webhook_entry_with_its_selectors(
    exception_values: Path,
) -> None:
    docs = _render(exception_values)
    entries = {
        w["name"].split(".", 1)[0]: w
        for kind, w in _webhooks(docs)
        if kind == "ValidatingWebhookConfiguration"
    }
    exception_entries = sorted(name for name in entries if name.startswith("pods-exception-"))
    # every exception in the table covers Pods; the admission policy is on
    assert exception_entries == [f"pods-exception-{i}" for i in range(len(EXCEPTIONS))]
    for i, exception in enumerate(EXCEPTIONS):
        entry = entries[f"pods-exception-{i}"]
        assert entry["objectSelector"] == exception["objectSelector"]
        selector = entry["namespaceSelector"]
        assert selector.get("matchLabels", {}) == exception["namespaceSelector"].get(
            "matchLabels", {}
        )
        expressions = selector["matchExpressions"]
        assert {"key": "gpu-mode", "operator": "In", "values": ["dra-only", "audit"]} in expressions
        for expression in exception["namespaceSelector"].get("matchExpressions", []):
            assert expression in expressions
        assert expressions[-1]["key"] == "kubernetes.io/metadata.name"
        assert NAMESPACE in expressions[-1]["values"]
        assert [r["resources"] for r in entry["rules"]] == [["pods"]]
        assert entry["matchConditions"][0]["name"] == "pod-uses-devices"


def test_without_the_admission_policy_no_exception_entry_is_needed(
    exception_values: Path,
) -> None:
    result = run_helm(
        "template", RELEASE, str(CHART), "-n", NAMESPACE, "-f", str(exception_values),
        "--set", "admissionPolicy.enabled=false",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "pods-exception-" not in result.stdout


def test_a_bad_exception_fails_the_render_naming_it(tmp_path: Path) -> None:
    bad = tmp_path / "values.yaml"
    broken = {**EXCEPTIONS[0], "objectSelector": {"matchLabels": {"app": "it's"}}}
    bad.write_text(yaml.safe_dump({"policy": {"exceptions": [broken]}}))
    result = run_helm("template", RELEASE, str(CHART), "-n", NAMESPACE, "-f", str(bad))
    assert result.returncode != 0
    assert "policy.exceptions[0].objectSelector" in result.stderr
    bad.write_text(yaml.safe_dump({"policy": {"exceptions": [{**EXCEPTIONS[0], "until": "soon"}]}}))
    result = run_helm("template", RELEASE, str(CHART), "-n", NAMESPACE, "-f", str(bad))
    assert result.returncode != 0 and "until" in result.stderr


def test_the_chart_sends_every_namespaced_operator_kind_of_the_workload_catalogue() -> None:
    """webhook.operatorWorkloads and app/workloads/catalogue.yaml name the same kinds (their
    plurals from the operators' CRDs in the test data), so a kind added to one is added to the other."""
    values = _values(CHART / "ci" / "default-values.yaml")
    sent = {
        (e["apiGroup"], r) for e in values["webhook"]["operatorWorkloads"] for r in e["resources"]
    }
    plurals = namespaced_plurals()
    catalogued = {
        (entry.group, plurals[(entry.group, entry.kind)])
        for entry in builtin().entries()
        if not entry.built_in and (entry.group, entry.kind) in plurals
    }
    assert sent == catalogued
    cluster_scoped = {
        (entry.group, entry.kind)
        for entry in builtin().entries()
        if not entry.built_in and (entry.group, entry.kind) not in plurals
    }
    assert cluster_scoped == {
        ("trainer.kubeflow.org", "ClusterTrainingRuntime"),
        ("argoproj.io", "ClusterWorkflowTemplate"),
    }  # no namespace, so no mode: checked by `check`, `migrate` and `report` only
