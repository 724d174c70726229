"""The workload catalogue against the operators' own schemas.

`catalogue.yaml` says where each operator's custom resource keeps its pod specs; every check,
translation, `migrate` and `report` reads pods through it. A pod template the catalogue does not
name is never rewritten, and its GPU requests reach the scan's generic "outside the pod
templates" finding at best. So every pod template location of every served version of every
operator CRD in the test data (`operators/crds/` of DRA_WEBHOOK_TEST_DATA, byte for byte from
upstream) must be in the catalogue:
as a `podSpecs` path, or below a `reports` / `fields` path that explains why it is not rewritten.
The other way round, a catalogue path that names no field of the CRD (a typo, a renamed field)
would silently match nothing: each must resolve in the schema.
"""

from __future__ import annotations

import pytest

from app.workloads import Entry, builtin
from app.workloads.paths import Path as CataloguePath
from tests.assets import third_party_names
from tests.operators import crd_folder
from tests.workloads.crds import (
    Crd,
    Location,
    all_crds,
    crds_of,
    load,
    locations,
    resolves,
)

CRD_FILES = third_party_names("operators/crds", "*.yaml.gz")

# Locations deliberately not in the catalogue, by (group, kind, schema path of the
# PodTemplateSpec / PodSpec), each with why. Nothing goes here only to make the test pass: a
# location where a GPU request can sit and a claim could be written belongs in catalogue.yaml.
NOT_COVERED: dict[tuple[str, str, str], str] = {
    # TrainJob runtimePatches is a restricted patch of the runtime's JobSet template: its
    # ContainerPatch has only env/name/securityContext/volumeMounts (no `resources`) and its
    # pod spec patch has no `resourceClaims`, so no GPU request can be written there and no
    # claim could be (the schema is PodTemplateSpec-shaped, hence found).
    (
        "trainer.kubeflow.org",
        "TrainJob",
        "spec.runtimePatches[].trainingRuntimeSpec.template.spec.replicatedJobs[].template"
        ".spec.template",
    ): "restricted patch: containers have no resources, the pod spec no resourceClaims",
}

# Operator groups of the catalogue whose CRDs are not in the test data (`operators/crds/`):
# their entries only name `reports` paths into Helm values (no pod specs), so there is no pod
# template location to compare; their paths cannot be checked here.
NOT_IN_TEST_DATA: dict[tuple[str, str], str] = {
    (
        "helm.toolkit.fluxcd.io",
        "HelmRelease",
    ): "no Flux CRD in the test data; reports spec.values only",
    ("argoproj.io", "Application"): "no Argo CD CRD in the test data; reports Helm values only",
}


def _operator_entries() -> list[Entry]:
    return [e for e in builtin().entries() if not e.built_in]


def _covered(entry: Entry, location: Location) -> bool:
    if any(site.path.steps == location.steps for site in entry.specs):
        return True
    prefixes = [f.path.steps for f in entry.fields] + [r.path.steps for r in entry.reports]
    return any(location.steps[: len(p)] == p for p in prefixes)


def _missing(crd: Crd) -> list[str]:
    entry = builtin().entry(crd.group, crd.kind)
    out: list[str] = []
    for version in crd.served:
        for location in locations(version.schema):
            key = (crd.group, crd.kind, location.schema_path)
            if key in NOT_COVERED:
                continue
            if entry is None or not _covered(entry, location):
                if location.template:
                    what = f"PodTemplateSpec {location.schema_path} (pod spec {location.path})"
                else:
                    what = f"PodSpec {location.path}"
                out.append(f"{version.name}: {what}")
    return sorted(set(out))


@pytest.mark.parametrize("name", CRD_FILES, ids=lambda n: n.removesuffix(".yaml.gz"))
def test_every_pod_template_location_of_a_crd_is_in_the_catalogue(name: str) -> None:
    crds = load(crd_folder() / name)
    assert crds, f"{name} holds no CustomResourceDefinition"
    missing = [f"{c.group}/{c.kind} {m}" for c in crds for m in _missing(c)]
    assert missing == [], "pod spec locations the catalogue does not name:\n" + "\n".join(missing)


@pytest.mark.parametrize("name", CRD_FILES, ids=lambda n: n.removesuffix(".yaml.gz"))
def test_every_operator_crd_has_a_catalogue_entry(name: str) -> None:
    for crd in load(crd_folder() / name):
        assert (crd.group, crd.kind) in builtin(), f"{crd.group}/{crd.kind}: no catalogue entry"


def test_the_not_covered_table_names_only_locations_that_exist() -> None:
    found = {
        (crd.group, crd.kind, location.schema_path)
        for crd in all_crds()
        for version in crd.served
        for location in locations(version.schema)
    }
    assert set(NOT_COVERED) <= found, set(NOT_COVERED) - found


@pytest.mark.parametrize(
    "entry", _operator_entries(), ids=lambda e: f"{e.group}/{e.kind}".replace(".", "_")
)
def test_every_operator_entry_of_the_catalogue_has_a_crd_in_the_test_data(entry: Entry) -> None:
    if (entry.group, entry.kind) in NOT_IN_TEST_DATA:
        pytest.skip(NOT_IN_TEST_DATA[(entry.group, entry.kind)])
    assert crds_of(entry.group, entry.kind), f"no CRD of {entry.group}/{entry.kind} in the data"


def _paths(entry: Entry) -> list[tuple[str, CataloguePath]]:
    out = [("podSpecs", site.path) for site in entry.specs]
    out += [("embedded", path) for path in entry.embedded]
    out += [("fields", field.path) for field in entry.fields]
    out += [("reports", reported.path) for reported in entry.reports]
    return out


@pytest.mark.parametrize(
    "entry",
    [e for e in _operator_entries() if (e.group, e.kind) not in NOT_IN_TEST_DATA],
    ids=lambda e: f"{e.group}/{e.kind}".replace(".", "_"),
)
def test_every_catalogue_path_of_an_operator_kind_exists_in_each_served_version(
    entry: Entry,
) -> None:
    wrong = [
        f"{crd.file} {version.name}: {role} {path.text}"
        for crd in crds_of(entry.group, entry.kind)
        for version in crd.served
        for role, path in _paths(entry)
        if not resolves(version.schema, path.steps)
    ]
    assert wrong == []


@pytest.mark.parametrize(
    "entry",
    [e for e in _operator_entries() if e.specs and (e.group, e.kind) not in NOT_IN_TEST_DATA],
    ids=lambda e: f"{e.group}/{e.kind}".replace(".", "_"),
)
def test_every_pod_count_factor_path_exists_in_some_served_version(entry: Entry) -> None:
    """A replica count only newer versions have (Ray `numOfHosts`) is fine; a typo is not."""
    versions = [v for crd in crds_of(entry.group, entry.kind) for v in crd.served]
    wrong = [
        f"{site.path.text}: {path.text}"
        for site in entry.specs
        for factor in site.pods or ()
        for path in (*factor.paths, *([factor.less_one_if] if factor.less_one_if else []))
        if not any(resolves(v.schema, path.steps) for v in versions)
    ]
    assert wrong == []
