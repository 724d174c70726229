"""Journey migrate: manifests written for resource.k8s.io/v1beta1 and v1beta2, moved to v1 by
`dra-webhook migrate`, read back from a real API server exactly as the originals do.

The control plane serves v1beta1 and v1beta2 as well as v1 (`--runtime-config`, controlplane.py),
so each old object of the golden manifests and of the upstream ones (`dra-versions/` of
DRA_WEBHOOK_TEST_DATA) is created in the version it was written for, and its migrated form
in v1, both with strict field validation (an unknown field fails the create); both are then read
as v1 and must be the same object: the API server's own conversion is the judge of `migrate`'s.
Cluster-scoped objects are renamed (and slices given a driver and pool of their own, classes no
extended resource name) so that the fleet the other journeys schedule on is left alone.

Hypothesis then writes v1beta1 claims of every shape (fields set, zero or missing,
alternatives, both at once): the server takes the original exactly when it takes migrate's v1
form, reads the two back the same, and refuses whatever migrate refuses to convert.

Then the rewritten files pass `kubectl apply --dry-run=server`, a classic-DRA manifest gets
kubectl's `no matches for kind`, and `dra-webhook check --kubeconfig` says so before kubectl
does, from the cluster's own discovery.
"""

from __future__ import annotations

import copy
import itertools
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.cli import main
from app.cluster.probe import fields_probe, kept_fields
from app.cluster.release import Feature
from app.cluster.view import ClusterView
from app.config import load_policy
from app.migrate.files import Templates, rewrite
from app.migrate.objects import Rules
from app.migrate.run import for_migrate
from tests.assets import k8s_tool, third_party
from tests.e2e.controlplane import ControlPlane
from tests.e2e.kube import ApiError, Kube, release_devices

pytestmark = pytest.mark.journey("migrate")

TESTS = Path(__file__).resolve().parents[1]
GOLDEN = TESTS / "migrate" / "golden" / "versions"
GOLDEN_SOURCES = (
    "dra-v1beta1-claims.yaml",
    "dra-v1beta1-cluster.yaml",
    "dra-v1beta1-edges.yaml",
    "dra-v1beta2.yaml",
)
UPSTREAM_SOURCES = (
    "nvidia__k8s-dra-driver-gpu__v1beta1__gpu-test4.yaml",
    "kubernetes-sigs__dra-example-driver__v1beta1__gpu-test5.yaml",
)
PLURALS = {
    "ResourceClaim": "resourceclaims",
    "ResourceClaimTemplate": "resourceclaimtemplates",
    "DeviceClass": "deviceclasses",
    "ResourceSlice": "resourceslices",
}
ADMIN_ACCESS = {"resource.kubernetes.io/admin-access": "true", "dra-admin-access": "allowed"}
"""Labels a namespace needs for adminAccess requests: the API server's, and the webhook's guard
when a journey before this one has registered it (tests/e2e/values.yaml)."""
SERVER_FIELDS = ("uid", "resourceVersion", "creationTimestamp", "managedFields", "generation")
Obj = dict[str, Any]


def _sources() -> list[Path]:
    """The golden files and DRA drivers' own (`dra-versions/` of DRA_WEBHOOK_TEST_DATA)."""
    upstream = third_party("dra-versions")
    return [GOLDEN / n for n in GOLDEN_SOURCES] + [upstream / n for n in UPSTREAM_SOURCES]


def _objects(path: Path) -> list[Obj]:
    return [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)]


@pytest.fixture(scope="module")
def migrated(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each source file, rewritten by `migrate --write` (by its name)."""
    folder = tmp_path_factory.mktemp("versions")
    for source in _sources():
        shutil.copyfile(source, folder / source.name)
    assert main(["migrate", "--write", str(folder)]) == 0
    return {p.name: p for p in folder.iterdir()}


def _pairs(migrated: dict[str, Path]) -> Iterator[tuple[str, Obj, Obj]]:
    """(label, object as written, object as migrated) for every old DRA object of the sources."""
    for source in _sources():
        after = _objects(migrated[source.name])
        before = _objects(source)
        assert len(before) == len(after), source.name
        for index, (old, new) in enumerate(zip(before, after, strict=True)):
            if old["kind"] in PLURALS and old["apiVersion"] != "resource.k8s.io/v1":
                assert new["apiVersion"] == "resource.k8s.io/v1", (source.name, index)
                yield f"{source.name}#{index} {old['kind']}", old, new


def _url(obj: Obj, version: str, named: bool = False) -> str:
    meta = obj["metadata"]
    where = f"/namespaces/{meta['namespace']}" if meta.get("namespace") else ""
    base = f"/apis/resource.k8s.io/{version}{where}/{PLURALS[obj['kind']]}"
    return f"{base}/{meta['name']}" if named else base


def _create_and_read_as_v1(kube: Kube, obj: Obj) -> Obj:
    """Create `obj` in the version it names, strictly; read it back as resource.k8s.io/v1."""
    version = obj["apiVersion"].rpartition("/")[2]
    answer = kube.http.post(_url(obj, version), json=obj, params={"fieldValidation": "Strict"})
    if answer.status_code >= 300:
        raise ApiError(answer.status_code, answer.json().get("message", ""), answer.json())
    read = kube.http.get(_url(obj, "v1", named=True))
    assert read.status_code == 200, read.text
    found: Obj = read.json()
    for key in SERVER_FIELDS:
        found["metadata"].pop(key, None)
    found["metadata"].pop("name")
    return found


def _placed(obj: Obj, namespace: str, suffix: str) -> Obj:
    """`obj` renamed (the two forms of one object live side by side) and put in the test's
    namespace, or, cluster-scoped, kept off the fleet's pools and extended resources."""
    obj = copy.deepcopy(obj)
    meta = obj["metadata"]
    if obj["kind"] in ("DeviceClass", "ResourceSlice"):
        meta["name"] = f"versions-{meta['name']}-{suffix}"
        spec = obj.get("spec") or {}
        if obj["kind"] == "ResourceSlice":
            spec["driver"] = "versions.example.com"
            spec["pool"]["name"] = f"versions-{spec['pool']['name']}-{suffix}"
        elif "extendedResourceName" in spec:
            spec["extendedResourceName"] = "example.com/versions-test"
    else:
        meta["name"] = f"{meta['name']}-{suffix}"
        meta["namespace"] = namespace
    return obj


@pytest.fixture
def cleanup(kube: Kube) -> Iterator[list[str]]:
    """URLs of cluster-scoped objects to delete afterwards."""
    urls: list[str] = []
    yield urls
    for url in urls:
        kube.http.delete(url)


def test_old_version_objects_and_their_migrate_output_read_back_identical_as_v1(
    kube: Kube,
    migrated: dict[str, Path],
    namespace: Callable[..., str],
    cleanup: list[str],
) -> None:
    ns = namespace(**ADMIN_ACCESS)
    compared: list[str] = []
    for label, old, new in _pairs(migrated):
        placed = [_placed(old, ns, "old"), _placed(new, ns, "new")]
        for obj in placed:
            if not obj["metadata"].get("namespace"):
                cleanup.append(_url(obj, "v1", named=True))
        try:
            as_written = _create_and_read_as_v1(kube, placed[0])
            as_migrated = _create_and_read_as_v1(kube, placed[1])
        except ApiError as error:
            pytest.fail(f"{label}: {error}")
        if old["kind"] == "ResourceSlice":
            for found in (as_written, as_migrated):
                found["spec"]["pool"]["name"] = "pool"
        assert as_migrated == as_written, label
        compared.append(label)
    kinds = {label.rpartition(" ")[2] for label in compared}
    assert kinds == set(PLURALS), compared
    assert len(compared) == 14, compared
    assert as_written["apiVersion"] == "resource.k8s.io/v1"


def test_the_api_server_reads_a_v1beta1_request_as_exactly_and_a_basic_device_as_flat(
    kube: Kube, namespace: Callable[..., str], cleanup: list[str]
) -> None:
    """What the comparison above rests on, seen directly: the server's own conversion."""
    ns = namespace()
    claim = _placed(_objects(GOLDEN / "dra-v1beta1-claims.yaml")[0], ns, "plain")
    request = _create_and_read_as_v1(kube, claim)["spec"]["spec"]["devices"]["requests"][0]
    assert set(request) == {"name", "exactly"}
    assert request["exactly"]["count"] == 2
    # tolerations are kept where the release keeps them (1.35 drops them: DRADeviceTaints off),
    # as the webhook's own probe sees it
    if Feature.DEVICE_TAINTS in kept_fields(kube.create(fields_probe(ns), dry_run=True).obj):
        assert request["exactly"]["tolerations"][0]["key"] == "maintenance"
    else:
        assert "tolerations" not in request["exactly"]

    slice_ = _placed(_objects(GOLDEN / "dra-v1beta1-cluster.yaml")[1], "", "plain")
    cleanup.append(_url(slice_, "v1", named=True))
    read = _create_and_read_as_v1(kube, slice_)
    assert "allNodes" not in read["spec"]
    assert read["spec"]["devices"][0]["capacity"] == {"memory": {"value": "80Gi"}}
    assert "basic" not in read["spec"]["devices"][0]


_SUBREQUEST = st.fixed_dictionaries(
    {"deviceClassName": st.just("gpu.example.com")},
    optional={"allocationMode": st.sampled_from(["ExactCount", "All"]), "count": st.integers(1, 2)},
)
_REQUEST = st.fixed_dictionaries(
    {},
    optional={
        "deviceClassName": st.sampled_from(["gpu.example.com", ""]),
        "allocationMode": st.sampled_from(["ExactCount", "All", ""]),
        "count": st.integers(0, 3),
        "selectors": st.lists(st.just({"cel": {"expression": "device.driver != ''"}}), max_size=1),
        "adminAccess": st.one_of(st.none(), st.booleans()),
        "tolerations": st.lists(st.just({"key": "maintenance", "operator": "Exists"}), max_size=1),
        "capacity": st.just({"requests": {"memory": "1Gi"}}),
        "firstAvailable": st.lists(_SUBREQUEST, max_size=2),
    },
)


@st.composite
def _v1beta1_claim(draw: st.DrawFn) -> Obj:
    requests = draw(st.lists(_REQUEST, min_size=1, max_size=2))
    for index, request in enumerate(requests):
        request["name"] = f"r{index}"
        for number, sub in enumerate(request.get("firstAvailable", [])):
            sub["name"] = f"s{number}"
    return {
        "apiVersion": "resource.k8s.io/v1beta1",
        "kind": "ResourceClaim",
        "metadata": {"name": "fuzz"},
        "spec": {"devices": {"requests": requests}},
    }


@pytest.fixture(scope="module")
def fuzz_namespace(kube: Kube) -> Iterator[str]:
    name = kube.namespace("migrate-versions-fuzz", **ADMIN_ACCESS)
    yield name
    release_devices(kube, name)


_EXAMPLES = itertools.count()


@settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))
@given(_v1beta1_claim())
def test_any_v1beta1_claim_and_its_migrate_output_are_taken_or_refused_alike_and_read_alike(
    kube: Kube, fuzz_namespace: str, claim: Obj
) -> None:
    """Hypothesis over v1beta1 requests (fields set, zero, missing; alternatives; both): the
    API server accepts the original exactly when it accepts migrate's v1 form, and reads both
    back the same; what migrate refuses, the API server refuses too."""
    number = next(_EXAMPLES)
    rules = for_migrate(Rules.build(load_policy(None), ClusterView()))
    result = rewrite(Path("c.yaml"), yaml.safe_dump(claim), rules, Templates(rules), apart=False)
    old = _placed(claim, fuzz_namespace, f"{number}-old")
    old_answer = kube.http.post(
        _url(old, "v1beta1"), json=old, params={"fieldValidation": "Strict"}
    )
    if result.problems:
        assert old_answer.status_code == 422, (result.problems, old_answer.text)
        return
    new = _placed(yaml.safe_load(result.after), fuzz_namespace, f"{number}-new")
    new_answer = kube.http.post(_url(new, "v1"), json=new, params={"fieldValidation": "Strict"})
    assert new_answer.status_code == old_answer.status_code, (old_answer.text, new_answer.text)
    if old_answer.status_code >= 300:
        return
    read = [kube.http.get(_url(o, "v1", named=True)).json() for o in (old, new)]
    for found in read:
        for key in (*SERVER_FIELDS, "name"):
            found["metadata"].pop(key, None)
    assert read[1] == read[0]


def _kubectl(plane: ControlPlane, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [k8s_tool("kubectl"), "--kubeconfig", str(plane.kubeconfig()), *args],
        capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip


def test_the_migrated_upstream_sample_passes_a_server_side_dry_run(
    control_plane: ControlPlane, kube: Kube, migrated: dict[str, Path]
) -> None:
    kube.namespace("gpu-test4")  # a dry run creates its Namespace for that request only
    done = _kubectl(
        control_plane,
        "apply",
        "--dry-run=server",
        "-f",
        str(migrated["nvidia__k8s-dra-driver-gpu__v1beta1__gpu-test4.yaml"]),
    )
    kube.delete("Namespace", "gpu-test4")
    assert done.returncode == 0, done.stderr


def test_a_classic_dra_manifest_is_named_by_check_from_discovery_as_kubectl_refuses_it(
    control_plane: ControlPlane, capsys: pytest.CaptureFixture[str]
) -> None:
    sample = (
        third_party("dra-versions")
        / "kubernetes-sigs__dra-example-driver__v1alpha2__gpu-test4.yaml"
    )
    done = _kubectl(control_plane, "apply", "--dry-run=server", "-f", str(sample))
    assert done.returncode != 0
    assert (
        'no matches for kind "ResourceClaimTemplate" in version "resource.k8s.io/v1alpha2"'
        in done.stderr
    )

    kubeconfig = str(control_plane.kubeconfig())
    capsys.readouterr()
    assert main(["check", "--kubeconfig", kubeconfig, str(sample)]) == 1
    out = capsys.readouterr().out
    assert "ResourceClaimTemplate gpu-test4/multiple-gpus" in out
    assert (
        'no matches for kind "ResourceClaimTemplate" in version "resource.k8s.io/v1alpha2"' in out
    )

    beta = GOLDEN / "dra-v1beta1-claims.yaml"  # served here: --runtime-config turns v1beta1 on
    assert main(["check", "--kubeconfig", kubeconfig, str(beta)]) == 0
    assert "not served" not in capsys.readouterr().out
