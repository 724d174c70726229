"""Properties of translation over generated pods.

Pods of 1-5 containers, init containers and sidecars, mixes of legacy names, counts, unrelated
resources and fields, and DRA claims of their own. For every one: the patched pod passes the
Kubernetes 1.34 schema and the pod rules; each container gets the devices it asked for, per
DeviceClass and selectors (init containers, which share one claim per device type, at least as
many); the pod holds at least what the kubelet's device manager would have given it, and exactly
what the sharing rule of docs/translation.md says; every other field is unchanged; and a second
pass over the result yields an empty patch.
"""

from __future__ import annotations

import copy
import functools
from collections import Counter
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.pipeline import Endpoint, Pipeline
from app.policies.translate import TRANSLATED_ANNOTATION
from app.policies.translate_judged import JUDGED_ANNOTATION
from app.transport.review import decode_review
from tests.helpers import DEMO_NAMESPACES, make_pipeline, policy_from, wrap
from tests.policies.translate_support import (
    DeviceKey,
    apply,
    assert_valid,
    claim_users,
    containers,
    devices_after,
    template_index,
)

Obj = dict[str, Any]
NS = "ml-research"
PROFILE = 'device.attributes["gpu.nvidia.com"].profile == "{}"'
EXPECTED: dict[str, DeviceKey] = {
    "nvidia.com/gpu": ("gpu.nvidia.com", ()),
    "amd.com/gpu": ("gpu.amd.com", ()),
    "nvidia.com/mig-1g.10gb": ("mig.nvidia.com", (PROFILE.format("1g.10gb"),)),
    "nvidia.com/mig-3g.40gb": ("mig.nvidia.com", (PROFILE.format("3g.40gb"),)),
}
"""The oracle: what the embedded policy maps each legacy name to."""
USER_TEMPLATE = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaimTemplate",
    "metadata": {"name": "example-template", "namespace": NS},
    "spec": {
        "spec": {
            "devices": {
                "requests": [{"name": "r", "exactly": {"deviceClassName": "gpu.example.com"}}]
            }
        }
    },
}


@functools.cache
def pipeline(init_containers: str) -> Pipeline:
    # The per-pod caps are tested on their own (test_translate_untrusted.py); a generated pod may
    # need more than the default 8 templates, which is a denial, not a translation to check here.
    policy = policy_from(
        f"translation: {{initContainers: {init_containers}, maxTemplatesPerPod: 256, "
        "maxClaimsPerPod: 1024}"
    )
    return make_pipeline([*DEMO_NAMESPACES, USER_TEMPLATE], policy)


NAMES = ["cuda", "train", "eval", "a", "b0", "warm", "proxy", "log", "x" * 40, "y" * 63, "z"]
legacy_counts = st.dictionaries(
    st.sampled_from(sorted(EXPECTED)), st.integers(min_value=0, max_value=4), max_size=2
)
other_limits = st.dictionaries(
    st.sampled_from(["cpu", "memory", "example.com/foo"]),
    st.sampled_from(["1", "2", "500m", "1Gi"]),
    max_size=2,
)
env_values = st.sampled_from(["a", "b/c", "~x"])
images = st.sampled_from(["cuda:12", "busybox"])


@st.composite
def container(draw: st.DrawFn, name: str, sidecar: bool = False) -> Obj:
    legacy = draw(legacy_counts)
    limits: Obj = {k: str(v) for k, v in legacy.items()} | draw(other_limits)
    requests: Obj = {}
    if draw(st.booleans()):  # the API server copies extended-resource limits into requests
        requests |= {k: str(v) for k, v in legacy.items()}
    if draw(st.booleans()):
        requests["cpu"] = "100m"
    resources: Obj = {}
    if limits:
        resources["limits"] = limits
    if requests:
        resources["requests"] = requests
    body: Obj = {"name": name, "image": draw(images)}
    if draw(st.booleans()) or resources:
        body["resources"] = resources
    if draw(st.booleans()):
        body["env"] = [{"name": "MODE", "value": draw(env_values)}]
    if draw(st.booleans()):
        body["command"] = ["sleep", "3600"]
    if sidecar:
        body["restartPolicy"] = "Always"
    return body


@st.composite
def pods(draw: st.DrawFn) -> Obj:
    n_app = draw(st.integers(1, 5))
    n_init = draw(st.integers(0, 3))
    all_names = draw(st.permutations(NAMES))[: n_app + n_init]
    app = [draw(container(n)) for n in all_names[:n_app]]
    init = [draw(container(n, sidecar=draw(st.booleans()))) for n in all_names[n_app:]]
    spec: Obj = {"containers": app}
    if init:
        spec["initContainers"] = init
    if draw(st.booleans()):
        spec["nodeSelector"] = {"gpu": "true"}
    if draw(st.booleans()):
        spec["tolerations"] = [
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
        ]
    if draw(st.booleans()):  # DRA of another device type, under a name translation would pick
        taken = f"gpu-{app[0]['name']}"[:63]
        spec["resourceClaims"] = [{"name": taken, "resourceClaimTemplateName": "example-template"}]
        user = app[-1].setdefault("resources", {})
        user["claims"] = [{"name": taken}]
    meta: Obj = {"name": "p", "namespace": NS}
    if draw(st.booleans()):
        meta["labels"] = {"app": "x"}
        meta["annotations"] = {"note": "nvidia.com/gpu: 1"}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def _asked(c: Obj) -> Counter[DeviceKey]:
    resources = c.get("resources") or {}
    found = {**resources.get("requests", {}), **resources.get("limits", {})}
    return Counter({EXPECTED[k]: int(v) for k, v in found.items() if k in EXPECTED and int(v)})


def _kubelet_total(spec: Obj) -> Counter[DeviceKey]:
    """What the device manager holds for the pod: max(app + sidecars, each init + sidecars before)."""
    total: Counter[DeviceKey] = Counter()
    for c in spec["containers"]:
        total += _asked(c)
    sidecars_before: Counter[DeviceKey] = Counter()
    peaks: list[Counter[DeviceKey]] = []
    for c in spec.get("initContainers", []):
        if c.get("restartPolicy") == "Always":
            total += _asked(c)
            sidecars_before += _asked(c)
        else:
            peaks.append(_asked(c) + sidecars_before)
    for peak in peaks:
        for key, n in peak.items():
            total[key] = max(total[key], n)
    return total


def _share_rule_total(spec: Obj) -> Counter[DeviceKey]:
    """The sharing rule written out: app containers and sidecars hold their own devices; an init
    container shares a claim of a regular container or a later sidecar holding at least its N;
    those with none share one top-up, sized for the largest of them."""
    total: Counter[DeviceKey] = Counter()
    owned: list[tuple[float, DeviceKey, int]] = []
    """(index among init containers, or infinity for regular containers; device; count)."""
    for c in spec["containers"]:
        total += _asked(c)
        owned += [(float("inf"), key, n) for key, n in _asked(c).items()]
    inits = spec.get("initContainers", [])
    for index, c in enumerate(inits):
        if c.get("restartPolicy") == "Always":
            total += _asked(c)
            owned += [(index, key, n) for key, n in _asked(c).items()]
    top: Counter[DeviceKey] = Counter()
    for index, c in enumerate(inits):
        if c.get("restartPolicy") == "Always":
            continue
        for key, n in _asked(c).items():
            if not any(k == key and m >= n and at > index for at, k, m in owned):
                top[key] = max(top[key], n)
    return total + top


def _without_legacy(obj: Obj) -> Obj:
    result = copy.deepcopy(obj)
    for _, c in containers(result["spec"]):
        resources = c.get("resources") or {}
        for which in ("limits", "requests"):
            if which in resources:
                resources[which] = {k: v for k, v in resources[which].items() if k not in EXPECTED}
                if not resources[which]:
                    del resources[which]
    return result


def _without_translation(after: Obj, before: Obj, ours: set[str]) -> Obj:
    result = copy.deepcopy(after)
    annotations = result["metadata"].get("annotations", {})
    annotations.pop(TRANSLATED_ANNOTATION, None)  # what translation says it did
    annotations.pop(JUDGED_ANNOTATION, None)  # and the claims its call judged
    if not annotations and "annotations" not in before["metadata"]:
        result["metadata"].pop("annotations", None)
    spec, old_spec = result["spec"], before["spec"]
    kept = [e for e in spec.get("resourceClaims", []) if e["name"] not in ours]
    if "resourceClaims" in old_spec:
        spec["resourceClaims"] = kept
    else:
        assert not kept
        spec.pop("resourceClaims", None)
    old = {(f, c["name"]): c for f, c in containers(old_spec)}
    for field, c in containers(spec):
        resources = c.get("resources")
        if resources is None:
            continue
        refs = [r for r in resources.get("claims", []) if r["name"] not in ours]
        if "claims" in (old[field, c["name"]].get("resources") or {}):
            resources["claims"] = refs
        else:
            assert not refs
            resources.pop("claims", None)
    return result


def _dump(obj: Obj) -> bytes:
    return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS)


@pytest.mark.parametrize("init_containers", ["share", "separate"])
@settings(max_examples=100)
@given(obj=pods())
def test_translation_keeps_devices_and_everything_else_and_is_idempotent(
    init_containers: str, obj: Obj
) -> None:
    webhook = pipeline(init_containers)
    decision = webhook.review(Endpoint.MUTATE, decode_review(orjson.dumps(wrap(obj))))
    assert decision.allowed, decision.message
    after = apply(obj, decision.patch)
    assert_valid(after)

    spec, old_spec = after["spec"], obj["spec"]
    before_names = {e["name"] for e in old_spec.get("resourceClaims", [])}
    ours = {e["name"] for e in spec.get("resourceClaims", [])} - before_names
    index = template_index(decision.templates)
    assert {
        e["resourceClaimTemplateName"] for e in spec.get("resourceClaims", []) if e["name"] in ours
    } == set(index)

    got = devices_after(spec, index)
    entries = {
        e["name"]: e.get("resourceClaimTemplateName") for e in spec.get("resourceClaims", [])
    }
    sidecars_seen: list[str] = []
    users = claim_users(spec)
    translated = {(f, x["name"]): x for f, x in containers(spec)}
    for field, c in containers(old_spec):
        asked = _asked(c)
        mine = got[field, c["name"]]
        runs_with_app = field == "containers" or c.get("restartPolicy") == "Always"
        if runs_with_app or init_containers == "separate":
            assert mine == asked, (field, c["name"])
        else:
            assert all(mine[key] >= n for key, n in asked.items()), (c["name"], mine, asked)
            assert set(mine) == set(asked)
            refs = {
                r["name"]
                for r in translated[field, c["name"]].get("resources", {}).get("claims", [])
            }
            concurrent = {("initContainers", s) for s in sidecars_seen}
            for name in refs & ours:
                assert not users[name] & concurrent, f"{name} is shared with a running sidecar"
            shared = Counter(index[entries[name]][0] for name in refs & ours)
            assert all(n == 1 for n in shared.values()), f"{c['name']} shares {shared}"
        if field == "initContainers" and c.get("restartPolicy") == "Always":
            sidecars_seen.append(c["name"])

    held: Counter[DeviceKey] = Counter()
    for entry in spec.get("resourceClaims", []):
        if entry["name"] in ours:
            key, count = index[entry["resourceClaimTemplateName"]]
            held[key] += count
    kubelet = _kubelet_total(old_spec)
    assert all(held[key] >= n for key, n in kubelet.items()), (held, kubelet)
    if init_containers == "share":
        assert held == _share_rule_total(old_spec)

    assert _dump(_without_translation(after, obj, ours)) == _dump(_without_legacy(obj))

    again = webhook.review(Endpoint.MUTATE, decode_review(orjson.dumps(wrap(after))))
    assert again.allowed
    assert again.patch == ()
