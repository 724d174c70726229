"""`migrate` on DRA objects written for resource.k8s.io before v1: the upstream samples, the
conversion field by field, what is reported instead, and no input that makes it crash.

The control-plane suite (tests/e2e/test_migrate_versions.py) checks the same conversions against
a real API server; the golden cases (golden/manifests/dra-*.yaml) show the whole diffs.
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.cli import main
from app.cluster.view import ClusterView
from app.config import load_policy
from app.migrate import version_edits, versions
from app.migrate.edit import plain
from app.migrate.files import Templates, rewrite
from app.migrate.objects import Rules
from app.migrate.run import for_migrate
from app.workloads import builtin
from tests.assets import third_party
from tests.migrate.helpers import Run

ROOT = Path(__file__).resolve().parents[2]
NVIDIA_V1BETA1 = "nvidia__k8s-dra-driver-gpu__v1beta1__gpu-test4.yaml"
NVIDIA_V1 = "nvidia__k8s-dra-driver-gpu__v1__gpu-test4.yaml"
EXAMPLE_V1BETA1 = "kubernetes-sigs__dra-example-driver__v1beta1__gpu-test5.yaml"
EXAMPLE_V1ALPHA2 = "kubernetes-sigs__dra-example-driver__v1alpha2__gpu-test4.yaml"
EXAMPLE_CLASS = "kubernetes-sigs__dra-example-driver__v1alpha2__resourceclass.yaml"
"""DRA drivers' own samples in `dra-versions/` of DRA_WEBHOOK_TEST_DATA (origins in its README)."""
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
Obj = dict[str, Any]


def _sample(name: str) -> Path:
    return third_party("dra-versions") / name


def _claim(version: str, *requests: Obj) -> Obj:
    return {
        "apiVersion": f"resource.k8s.io/{version}",
        "kind": "ResourceClaim",
        "metadata": {"name": "c", "namespace": "ml"},
        "spec": {"devices": {"requests": list(requests)}},
    }


def _upgraded(obj: Obj) -> Obj:
    found = versions.plan(obj, builtin())
    assert found.problems == []
    return version_edits.apply(obj, found.edits)


# -- the upstream samples --------------------------------------------------------------------


def test_nvidias_v1beta1_sample_becomes_nvidias_own_v1_rewrite_byte_for_byte(
    tmp_path: Path, migrate: Callable[..., Run]
) -> None:
    shutil.copyfile(_sample(NVIDIA_V1BETA1), tmp_path / "gpu-test4.yaml")
    diff = migrate("--diff", "gpu-test4.yaml")
    assert diff.code == 1
    assert diff.stderr == ""
    assert "+        exactly:" in diff.stdout
    assert migrate("--write", "gpu-test4.yaml").code == 0
    assert (tmp_path / "gpu-test4.yaml").read_text() == _sample(NVIDIA_V1).read_text()
    assert migrate("--diff", "gpu-test4.yaml") == Run(0, "", "")


def test_the_example_drivers_v1beta1_template_moves_its_requests_and_keeps_its_config(
    tmp_path: Path, migrate: Callable[..., Run]
) -> None:
    shutil.copyfile(_sample(EXAMPLE_V1BETA1), tmp_path / "gpu-test5.yaml")
    assert migrate("--write", "gpu-test5.yaml").code == 0
    before = list(yaml.safe_load_all(_sample(EXAMPLE_V1BETA1).read_text()))
    after = list(yaml.safe_load_all((tmp_path / "gpu-test5.yaml").read_text()))
    template = after[1]
    assert template["apiVersion"] == "resource.k8s.io/v1"
    assert template["spec"]["spec"]["devices"]["requests"] == [
        {"name": "ts-gpu", "exactly": {"deviceClassName": "gpu.example.com"}},
        {"name": "sp-gpu", "exactly": {"deviceClassName": "gpu.example.com"}},
    ]
    assert (
        template["spec"]["spec"]["devices"]["config"]
        == (before[1]["spec"]["spec"]["devices"]["config"])
    )
    assert [after[0], *after[2:]] == [before[0], *before[2:]]  # the Namespace and the Pod
    text = (tmp_path / "gpu-test5.yaml").read_text()
    assert text.startswith("# One pod, 1 container\n# Run as deployment with 1 replica\n")


def test_the_classic_dra_samples_are_named_with_what_to_write_and_the_pod_is_moved(
    tmp_path: Path, migrate: Callable[..., Run]
) -> None:
    shutil.copyfile(_sample(EXAMPLE_V1ALPHA2), tmp_path / "gpu-test4.yaml")
    shutil.copyfile(_sample(EXAMPLE_CLASS), tmp_path / "resourceclass.yaml")
    run = migrate("--diff", "gpu-test4.yaml", "resourceclass.yaml")
    assert run.code == 2
    lines = run.stderr.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith(
        "migrate: not translated: gpu-test4.yaml#2 (ResourceClaimTemplate gpu-test4/multiple-gpus)"
        ": spec.spec.resourceClassName: resource.k8s.io/v1alpha2 ResourceClaimTemplate is classic "
        "DRA"
    )
    assert "GpuClaimParameters multiple-gpus" in lines[0]
    assert lines[1].startswith(
        "migrate: not translated: resourceclass.yaml#0 (ResourceClass gpu.example.com): "
        "driverName: resource.k8s.io/v1alpha2 ResourceClass"
    )
    assert "write a DeviceClass gpu.example.com instead" in lines[1]
    assert 'device.driver == "gpu.resource.example.com"' in lines[1]
    # the Pod's claim entry (core/v1 before 1.31) is moved; the rest is left as written
    assert "-    source:\n-      resourceClaimTemplateName: multiple-gpus\n" in run.stdout
    assert "+    resourceClaimTemplateName: multiple-gpus\n" in run.stdout
    assert [line for line in run.stdout.splitlines() if line.startswith(("+ ", "+  "))] == [
        "+    resourceClaimTemplateName: multiple-gpus"
    ]


def test_the_command_line_from_a_clean_clone_prints_v1_and_exits_1_or_names_the_class_and_exits_2(
    tmp_path: Path,
) -> None:
    template = tmp_path / "template.yaml"
    template.write_text(
        "apiVersion: resource.k8s.io/v1beta1\nkind: ResourceClaimTemplate\n"
        "metadata: {name: gpu}\nspec:\n  spec:\n    devices:\n      requests:\n"
        "      - name: gpu\n        deviceClassName: gpu.nvidia.com\n"
    )
    command = [sys.executable, "-m", "app", "migrate", "--diff"]
    done = subprocess.run(
        [*command, str(template)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        cwd=ROOT,
    )
    assert (done.returncode, done.stderr) == (1, "")
    assert "+apiVersion: resource.k8s.io/v1\n" in done.stdout
    assert "+        exactly:\n+          deviceClassName: gpu.nvidia.com\n" in done.stdout

    resource_class = tmp_path / "resourceclass.yaml"
    resource_class.write_text(
        "apiVersion: resource.k8s.io/v1alpha2\nkind: ResourceClass\n"
        "metadata: {name: gpu.example.com}\ndriverName: gpu.resource.example.com\n"
    )
    done = subprocess.run(
        [*command, str(resource_class)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        cwd=ROOT,
    )
    assert done.returncode == 2
    assert "(ResourceClass gpu.example.com): driverName:" in done.stderr
    assert "Traceback" not in done.stderr


# -- the conversion, field by field ----------------------------------------------------------


def test_a_v1beta1_requests_own_fields_go_under_exactly_in_their_order() -> None:
    request = {
        "name": "gpus",
        "deviceClassName": "gpu.nvidia.com",
        "selectors": [{"cel": {"expression": "true"}}],
        "allocationMode": "ExactCount",
        "count": 2,
        "adminAccess": False,
        "tolerations": [{"key": "k", "operator": "Exists"}],
        "capacity": {"requests": {"memory": "10Gi"}},
    }
    upgraded = _upgraded(_claim("v1beta1", request))
    assert upgraded["apiVersion"] == "resource.k8s.io/v1"
    moved = upgraded["spec"]["devices"]["requests"][0]
    assert list(moved) == ["name", "exactly"]
    assert list(moved["exactly"]) == list(request)[1:]
    assert moved["exactly"] == {k: v for k, v in request.items() if k != "name"}


@pytest.mark.parametrize(
    ("request_", "expected"),
    [
        # hasAnyMainRequestFieldsSet: a zero value is not set
        (
            {"name": "a", "firstAvailable": [{"name": "x", "deviceClassName": "c"}], "count": 0},
            {"name": "a", "firstAvailable": [{"name": "x", "deviceClassName": "c"}]},
        ),
        (
            {
                "name": "a",
                "firstAvailable": [{"name": "x"}],
                "deviceClassName": "",
                "selectors": None,
            },
            {"name": "a", "firstAvailable": [{"name": "x"}]},
        ),
        # ...but once one is set, every present field goes with it, zero or not
        (
            {"name": "a", "deviceClassName": "c", "count": 0, "selectors": []},
            {"name": "a", "exactly": {"deviceClassName": "c", "count": 0, "selectors": []}},
        ),
        # an empty selector list is set (a non-nil slice in Go)
        ({"name": "a", "selectors": []}, {"name": "a", "exactly": {"selectors": []}}),
        ({"name": "a", "adminAccess": False}, {"name": "a", "exactly": {"adminAccess": False}}),
        # only the name: nothing to move
        ({"name": "a"}, {"name": "a"}),
        # an empty firstAvailable does not stop the exact fields
        (
            {"name": "a", "firstAvailable": [], "deviceClassName": "c"},
            {"name": "a", "exactly": {"deviceClassName": "c"}, "firstAvailable": []},
        ),
    ],
)
def test_which_v1beta1_request_fields_count_as_set_follows_the_api_servers_conversion(
    request_: Obj, expected: Obj
) -> None:
    assert _upgraded(_claim("v1beta1", request_))["spec"]["devices"]["requests"] == [expected]


def test_a_template_and_a_class_and_v1beta2_objects_move_as_their_kind_needs() -> None:
    template = {
        "apiVersion": "resource.k8s.io/v1beta1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "t"},
        "spec": {"spec": {"devices": {"requests": [{"name": "g", "deviceClassName": "c"}]}}},
    }
    assert _upgraded(template)["spec"]["spec"]["devices"]["requests"] == [
        {"name": "g", "exactly": {"deviceClassName": "c"}}
    ]
    device_class = {
        "apiVersion": "resource.k8s.io/v1beta1",
        "kind": "DeviceClass",
        "metadata": {"name": "c"},
        "spec": {"selectors": [{"cel": {"expression": "true"}}], "extendedResourceName": "x/y"},
    }
    assert _upgraded(device_class) == {**device_class, "apiVersion": "resource.k8s.io/v1"}
    v1beta2 = _claim("v1beta2", {"name": "g", "exactly": {"deviceClassName": "c"}})
    assert _upgraded(v1beta2) == {**v1beta2, "apiVersion": "resource.k8s.io/v1"}


def test_a_v1beta1_slice_loses_its_basic_wrapper_and_its_zero_node_fields() -> None:
    slice_ = {
        "apiVersion": "resource.k8s.io/v1beta1",
        "kind": "ResourceSlice",
        "metadata": {"name": "s"},
        "spec": {
            "driver": "d",
            "nodeName": "",
            "allNodes": True,
            "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {"name": "a", "basic": {"attributes": {"x": {"int": 1}}, "capacity": {}}},
                {"name": "b", "basic": None},
                {"name": "c"},
            ],
        },
    }
    upgraded = _upgraded(slice_)
    assert upgraded["spec"] == {
        "driver": "d",
        "allNodes": True,
        "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1},
        "devices": [
            {"name": "a", "attributes": {"x": {"int": 1}}, "capacity": {}},
            {"name": "b"},
            {"name": "c"},
        ],
    }
    node_local = {**slice_, "spec": {**slice_["spec"], "nodeName": "n", "allNodes": False}}
    spec = _upgraded(node_local)["spec"]
    assert spec["nodeName"] == "n"
    assert "allNodes" not in spec


@pytest.mark.parametrize(
    "obj",
    [
        _claim("v1", {"name": "g", "exactly": {"deviceClassName": "c"}}),
        {"apiVersion": "resource.k8s.io/v1beta2", "kind": "DeviceTaintRule", "spec": {}},
        {"apiVersion": "resource.k8s.io/v1alpha3", "kind": "DeviceTaintRule", "spec": {}},
        {"apiVersion": "example.com/v1beta1", "kind": "ResourceClaim", "spec": {}},
        {"apiVersion": "v1", "kind": "ConfigMap", "data": {"source": "x"}},
    ],
)
def test_what_is_v1_already_or_has_no_v1_form_is_left_alone(obj: Obj) -> None:
    assert not versions.plan(obj, builtin()).needed


@pytest.mark.parametrize(
    ("obj", "path", "words"),
    [
        (
            _claim("v1beta1", {"name": "g", "deviceClassName": "c", "firstAvailable": [{}]}),
            "spec.devices.requests[0]",
            "has both firstAvailable and deviceClassName",
        ),
        (
            _claim("v1beta1", {"name": "g", "exactly": {"deviceClassName": "c"}}),
            "spec.devices.requests[0].exactly",
            "already in the v1 shape",
        ),
        (_claim("v1beta1", "gpu"), "spec.devices.requests[0]", "must be an object"),
        (
            _claim("v1beta1", {"name": "g", "count": "2"}),
            "spec.devices.requests[0].count",
            "must be an integer",
        ),
        (
            _claim("v1beta1", {"name": "g", "adminAccess": "yes"}),
            "spec.devices.requests[0].adminAccess",
            "must be true or false",
        ),
        (
            {**_claim("v1beta1"), "spec": {"devices": {"requests": {"g": {}}}}},
            "spec.devices.requests",
            "must be a list",
        ),
        (
            {
                "apiVersion": "resource.k8s.io/v1beta1",
                "kind": "ResourceSlice",
                "spec": {"devices": [{"name": "a", "attributes": {}}]},
            },
            "spec.devices[0].attributes",
            "its fields are under `basic`",
        ),
        (
            {
                "apiVersion": "resource.k8s.io/v1beta1",
                "kind": "ResourceSlice",
                "spec": {"allNodes": "true"},
            },
            "spec.allNodes",
            "must be true or false",
        ),
        (
            {"apiVersion": "resource.k8s.io/v1alpha2", "kind": "ResourceClass", "driverName": "d"},
            "driverName",
            "write a DeviceClass",
        ),
        (
            {"apiVersion": "resource.k8s.io/v1alpha2", "kind": "ResourceClassParameters"},
            "apiVersion",
            "DeviceClass's spec.selectors",
        ),
        (
            {"apiVersion": "resource.k8s.io/v1alpha2", "kind": "PodSchedulingContext"},
            "apiVersion",
            "delete this manifest",
        ),
        (
            {"apiVersion": "resource.k8s.io/v1alpha3", "kind": "ResourceSlice", "spec": {}},
            "apiVersion",
            "published by the DRA driver",
        ),
        (
            {"apiVersion": "resource.k8s.io/v1alpha1", "kind": "ResourceClaim", "spec": {}},
            "apiVersion",
            "classic DRA",
        ),
    ],
)
def test_what_cannot_be_converted_is_a_problem_with_its_field_path_and_no_edit(
    obj: Obj, path: str, words: str
) -> None:
    found = versions.plan(obj, builtin())
    assert found.edits == []
    assert len(found.problems) == 1
    assert found.problems[0][0] == path
    assert words in found.problems[0][1]
    assert "\n" not in found.problems[0][1]


def test_a_pods_claim_source_moves_onto_its_entry_in_every_workload_kind() -> None:
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d"},
        "spec": {
            "template": {
                "spec": {
                    "containers": [{"name": "c"}],
                    "resourceClaims": [
                        {"name": "a", "source": {"resourceClaimTemplateName": "t"}},
                        {"name": "b", "source": {"resourceClaimName": "c"}},
                        {"name": "c", "resourceClaimName": "c"},
                    ],
                }
            }
        },
    }
    claims = _upgraded(deployment)["spec"]["template"]["spec"]["resourceClaims"]
    assert claims == [
        {"name": "a", "resourceClaimTemplateName": "t"},
        {"name": "b", "resourceClaimName": "c"},
        {"name": "c", "resourceClaimName": "c"},
    ]
    both = json.loads(json.dumps(deployment))
    both["spec"]["template"]["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] = "u"
    found = versions.plan(both, builtin())
    assert found.problems == [
        (
            "spec.template.spec.resourceClaims[0].source.resourceClaimTemplateName",
            "is also set on the entry itself: keep one resourceClaimTemplateName",
        )
    ]


# -- files: JSON, Lists, anchors, templates already there ----------------------------------


@functools.cache
def _rules() -> Rules:
    return for_migrate(Rules.build(load_policy(None), ClusterView()))


def _run(text: str, name: str = "m.yaml") -> Any:
    rules = _rules()
    return rewrite(Path(name), text, rules, Templates(rules), apart=False)


def test_a_json_file_and_a_list_are_moved_too() -> None:
    claim = _claim("v1beta1", {"name": "g", "deviceClassName": "c"})
    result = _run(json.dumps(claim, indent=2) + "\n", "c.json")
    assert json.loads(result.after) == _upgraded(claim)
    assert result.after.endswith("}\n")

    listed = {"apiVersion": "v1", "kind": "List", "items": [claim, json.loads(json.dumps(claim))]}
    result = _run(yaml.safe_dump(listed))
    assert yaml.safe_load(result.after)["items"] == [_upgraded(claim)] * 2


def test_request_fields_shared_through_an_anchor_are_moved_at_every_alias() -> None:
    text = """\
apiVersion: resource.k8s.io/v1beta1
kind: ResourceClaim
metadata: {name: c}
spec:
  devices:
    requests:
    - &gpu
      name: a
      deviceClassName: gpu.nvidia.com
    - *gpu
"""
    result = _run(text)
    assert result.problems == []
    requests = yaml.safe_load(result.after)["spec"]["devices"]["requests"]
    assert requests == [{"name": "a", "exactly": {"deviceClassName": "gpu.nvidia.com"}}] * 2
    assert _run(result.after).after == result.after


def test_request_fields_from_a_merge_key_are_left_as_written_and_named() -> None:
    """Deleting a merged key only hides it until the file is read again (`edit.merges_hold`)."""
    text = """\
apiVersion: resource.k8s.io/v1beta1
kind: ResourceClaim
metadata: {name: c}
x-defaults: &defaults {deviceClassName: gpu.nvidia.com, count: 2}
spec:
  devices:
    requests:
    - <<: *defaults
      name: a
"""
    result = _run(text)
    assert result.after == text
    assert [(p.path, p.what) for p in result.problems] == [("(object)", "ResourceClaim c")]
    assert "YAML anchors or merge keys" in result.problems[0].message


def test_a_gpu_limit_merged_from_an_anchor_is_not_left_behind_by_translation() -> None:
    text = """\
apiVersion: v1
kind: Pod
metadata: {name: p}
x-limits: &limits {nvidia.com/gpu: 1, cpu: 1}
spec:
  containers:
  - name: c
    image: x
    resources:
      limits:
        <<: *limits
        memory: 1Gi
"""
    result = _run(text)
    assert result.after == text
    assert "YAML anchors or merge keys" in result.problems[0].message


def test_a_v1beta1_template_already_in_the_inputs_is_reused_as_its_v1_form(
    tmp_path: Path, migrate: Callable[..., Run]
) -> None:
    (tmp_path / "a.yaml").write_text(
        "apiVersion: resource.k8s.io/v1beta1\nkind: ResourceClaimTemplate\n"
        "metadata: {name: dra-gpu-nvidia-com-1, namespace: ml}\nspec:\n  spec:\n"
        "    devices:\n      requests:\n      - name: gpu\n        deviceClassName: gpu.nvidia.com\n"
        "        allocationMode: ExactCount\n        count: 1\n"
        "---\napiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: ml}\nspec:\n"
        "  containers:\n  - name: c\n    image: x\n    resources:\n      limits:\n"
        "        nvidia.com/gpu: 1\n"
    )
    assert migrate("--write", "a.yaml").code == 0
    documents = list(yaml.safe_load_all((tmp_path / "a.yaml").read_text()))
    assert [d["kind"] for d in documents] == ["ResourceClaimTemplate", "Pod"]  # none added
    claims = documents[1]["spec"]["resourceClaims"]
    assert claims == [{"name": "gpu-c", "resourceClaimTemplateName": "dra-gpu-nvidia-com-1"}]


def test_an_old_object_in_a_rendered_overlay_is_named_not_patched(
    tmp_path: Path, migrate: Callable[..., Run]
) -> None:
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text("resources: [claim.yaml]\n")
    rendered = tmp_path / "rendered.yaml"
    rendered.write_text(yaml.safe_dump(_claim("v1beta1", {"name": "g", "deviceClassName": "c"})))
    fake = tmp_path / "kubectl"
    fake.write_text(f"#!/bin/sh\ncat {rendered}\n")
    fake.chmod(0o755)
    run = migrate("--diff", "--kubectl", str(fake), "overlay")
    assert run.code == 2
    assert run.stdout == ""
    assert "overlay (rendered)#0 (ResourceClaim ml/c): apiVersion: written for " in run.stderr
    assert "a patch cannot change an apiVersion" in run.stderr


# -- no old-version input makes it crash -----------------------------------------------------

_words = st.text(alphabet="abcdefghijklmnopqrstuvwxyz-.", min_size=1, max_size=8)
_scalars = st.one_of(
    st.integers(-3, 5), st.booleans(), st.none(), _words, st.sampled_from(["", "0", "All"])
)
_any = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(_words, inner, min_size=1, max_size=3)
    ),
    max_leaves=8,
)
_field_names = st.sampled_from(
    [*versions.MAIN_FIELDS, "name", "firstAvailable", "exactly", "basic", "attributes"]
)


def _maybe(value: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(value, _any)


_request = _maybe(
    st.dictionaries(
        _field_names,
        st.one_of(
            _any,
            st.just("gpu.nvidia.com"),
            st.lists(st.fixed_dictionaries({"name": _words}), max_size=2),
        ),
        max_size=5,
    )
)
_device = _maybe(
    st.fixed_dictionaries(
        {"name": _words},
        optional={"basic": _maybe(st.dictionaries(_field_names, _any, max_size=3))},
    )
)


@st.composite
def _old_object(draw: st.DrawFn) -> Obj:
    version = draw(st.sampled_from(["v1alpha1", "v1alpha2", "v1alpha3", "v1beta1", "v1beta2"]))
    kind = draw(
        st.sampled_from(
            [
                *sorted(versions.CONVERTED),
                "ResourceClass",
                "ResourceClaimParameters",
                "PodSchedulingContext",
                "DeviceTaintRule",
            ]
        )
    )
    claim_spec = _maybe(
        st.fixed_dictionaries(
            {
                "devices": _maybe(
                    st.fixed_dictionaries({"requests": _maybe(st.lists(_request, max_size=3))})
                )
            }
        )
    )
    spec = {
        "ResourceClaim": claim_spec,
        "ResourceClaimTemplate": _maybe(st.fixed_dictionaries({"spec": claim_spec})),
        "ResourceSlice": _maybe(
            st.fixed_dictionaries(
                {"devices": _maybe(st.lists(_device, max_size=3))},
                optional={"nodeName": _maybe(st.just("")), "allNodes": _maybe(st.just(False))},
            )
        ),
    }.get(kind, _any)
    obj: Obj = {
        "apiVersion": f"resource.k8s.io/{version}",
        "kind": kind,
        "metadata": draw(_maybe(st.fixed_dictionaries({"name": _words}))),
        "spec": draw(spec),
    }
    if draw(st.booleans()):
        obj["driverName"] = draw(_any)
    return obj


@FAST
@given(_old_object())
def test_an_old_version_object_is_moved_or_reported_with_a_path_never_a_crash(obj: Obj) -> None:
    found = versions.plan(obj, builtin())
    for path, message in found.problems:
        assert path
        assert "\n" not in message
    if found.problems:
        assert found.edits == []
        return
    upgraded = version_edits.apply(obj, found.edits)
    assert not versions.plan(upgraded, builtin()).edits  # a second run changes nothing
    if found.edits:
        assert upgraded["apiVersion"] == "resource.k8s.io/v1"


@FAST
@given(_old_object(), st.sampled_from(["m.yaml", "m.json"]))
def test_an_old_version_file_is_rewritten_or_reported_never_a_crash(obj: Obj, name: str) -> None:
    text = json.dumps(obj, indent=2) if name.endswith(".json") else yaml.safe_dump(obj)
    result = _run(text, name)
    if result.problems:
        assert all(p.path and "\n" not in str(p) for p in result.problems)
        return
    assert _run(result.after, name).after == result.after
    expected = version_edits.apply(obj, versions.plan(obj, builtin()).edits)
    loaded = json.loads(result.after) if name.endswith(".json") else yaml.safe_load(result.after)
    assert plain(loaded) == expected


@FAST
@given(_old_object())
def test_the_command_line_answers_a_malformed_old_object_in_one_line_per_problem(
    obj: Obj,
) -> None:
    out, err = io.StringIO(), io.StringIO()
    with tempfile.TemporaryDirectory() as folder:
        target = Path(folder) / "old.yaml"
        target.write_text(yaml.safe_dump(obj))
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(["migrate", "--diff", str(target)])
    assert "Traceback" not in err.getvalue()
    problems = [line for line in err.getvalue().splitlines() if "not translated:" in line]
    assert (code == 2) == bool(problems)
    assert code == 2 or code == (1 if out.getvalue() else 0)
