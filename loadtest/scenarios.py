"""The reviews the load test sends, built from the captured fixtures, and how answers are judged.

Kept apart from the locustfile (which imports locust, and with it gevent's monkey-patching) so
that tests can read the scenarios without patching their own process.
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(
    os.environ.get("DRA_LOADTEST_FIXTURES", str(REPO / "tests" / "fixtures" / "apiserver-v1.36.2"))
)
CHECK_DECISIONS = os.environ.get("DRA_LOADTEST_CHECK_DECISIONS", "1") != "0"
PLACEHOLDER_UID = b"@@uid@@"

Obj = dict[str, Any]

# The namespaces of the embedded demo cluster, by mode.
DRA_ONLY, TRANSLATE, AUDIT, UNLABELLED = "gpu-e2e", "ml-research", "ml-audit", "default"


@dataclass(frozen=True)
class Scenario:
    """One kind of review: where it goes, how often, and what a right answer looks like."""

    name: str
    endpoint: str
    weight: int
    body: bytes
    allowed: bool | None = None
    """The decision to expect (None: any decision, only the envelope is checked)."""
    unchanged: bool = False
    """True when the answer must carry no patch."""


def _fixture(name: str) -> Obj:
    path = FIXTURES / f"{name}.json"
    if not path.is_file():
        raise FileNotFoundError(
            f"captured review {path} is missing: DRA_LOADTEST_FIXTURES must name the folder of "
            "captured AdmissionReviews (default tests/fixtures/apiserver-v1.36.2)"
        )
    review: Obj = orjson.loads(path.read_bytes())
    return review


def _in_namespace(review: Obj, namespace: str) -> Obj:
    review = copy.deepcopy(review)
    request = review["request"]
    request["namespace"] = namespace
    for key in ("object", "oldObject"):
        if isinstance(request.get(key), dict):
            request[key].setdefault("metadata", {})["namespace"] = namespace
    return review


def _without_devices(review: Obj) -> Obj:
    """A plain pod: the same captured pod with only cpu/memory in its resources."""
    review = copy.deepcopy(review)
    for key in ("object", "oldObject"):
        spec = (review["request"].get(key) or {}).get("spec")
        if isinstance(spec, dict):
            spec.pop("resourceClaims", None)
            for container in spec.get("containers", []):
                container["resources"] = {"requests": {"cpu": "250m", "memory": "256Mi"}}
    return review


def _body(review: Obj) -> bytes:
    review = copy.deepcopy(review)
    review["request"]["uid"] = PLACEHOLDER_UID.decode()
    return orjson.dumps(review)


def _scenarios() -> tuple[Scenario, ...]:
    pod = _fixture("pod-create-legacy-gpu")
    plain = _without_devices(pod)
    claim_pod = _fixture("pod-create-with-resourceclaims")
    deployment = _fixture("deployment-create-legacy-gpu")
    claim = _fixture("resourceclaim-create")
    template = _fixture("resourceclaimtemplate-create")
    return (
        Scenario("plain pod / validate", "validate", 14, _body(_in_namespace(plain, TRANSLATE)),
                 allowed=True, unchanged=True),
        Scenario("plain pod / mutate", "mutate", 14, _body(_in_namespace(plain, TRANSLATE)),
                 allowed=True, unchanged=True),
        Scenario("legacy pod dra-only / validate", "validate", 8,
                 _body(_in_namespace(pod, DRA_ONLY)), allowed=False),
        Scenario("legacy pod translate / mutate", "mutate", 8,
                 _body(_in_namespace(pod, TRANSLATE)), allowed=True),
        Scenario("legacy pod translate dry-run / mutate", "mutate", 2,
                 _body(_in_namespace(_fixture("pod-create-legacy-gpu-dryrun"), TRANSLATE)),
                 allowed=True),
        Scenario("legacy pod audit / validate", "validate", 6,
                 _body(_in_namespace(pod, AUDIT)), allowed=True),
        Scenario("legacy pod unlabelled / validate", "validate", 4,
                 _body(_in_namespace(pod, UNLABELLED)), allowed=True, unchanged=True),
        Scenario("legacy pod update dra-only / validate", "validate", 3,
                 _body(_in_namespace(_fixture("pod-update-legacy-gpu"), DRA_ONLY))),
        Scenario("pod with claims / validate", "validate", 8,
                 _body(_in_namespace(claim_pod, DRA_ONLY)), allowed=True),
        Scenario("pod with claims / mutate", "mutate", 4,
                 _body(_in_namespace(claim_pod, TRANSLATE)), allowed=True),
        Scenario("claim with selector / validate", "validate", 5,
                 _body(_in_namespace(claim, DRA_ONLY))),
        Scenario("claim with selector / mutate", "mutate", 5,
                 _body(_in_namespace(claim, TRANSLATE))),
        Scenario("claim via v1beta2 / validate", "validate", 2,
                 _body(_in_namespace(_fixture("resourceclaim-create-via-v1beta2"), DRA_ONLY))),
        Scenario("template with selector / validate", "validate", 4,
                 _body(_in_namespace(template, DRA_ONLY))),
        Scenario("template with selector / mutate", "mutate", 4,
                 _body(_in_namespace(template, TRANSLATE))),
        Scenario("legacy deployment dra-only / validate", "validate", 5,
                 _body(_in_namespace(deployment, DRA_ONLY)), allowed=False),
        Scenario("legacy deployment translate / validate", "validate", 3,
                 _body(_in_namespace(deployment, TRANSLATE))),
    )  # fmt: skip


SCENARIOS = _scenarios()


def problem(status: int, content: bytes | None, uid: str, scenario: Scenario) -> str | None:
    """What is wrong with an answer, or None when it is right."""
    if status != 200:
        return f"HTTP {status}: {(content or b'')[:200]!r}"
    try:
        review = orjson.loads(content or b"")
        response = review["response"]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return f"not an AdmissionReview: {(content or b'')[:200]!r}"
    if review.get("apiVersion") != "admission.k8s.io/v1" or review.get("kind") != "AdmissionReview":
        return "wrong apiVersion/kind"
    if response.get("uid") != uid:
        return f"uid {response.get('uid')!r} does not echo {uid!r}"
    if not isinstance(response.get("allowed"), bool):
        return "no boolean `allowed`"
    if CHECK_DECISIONS:
        if scenario.allowed is not None and response["allowed"] is not scenario.allowed:
            return f"allowed={response['allowed']}, expected {scenario.allowed}"
        if scenario.unchanged and "patch" in response:
            return "patched an object that needs no change"
    return None
