"""Odd shapes in claims, templates and workloads: a shape denial or an answer, never a bug."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.config import load_policy
from app.pipeline import Endpoint, Pipeline
from app.transport.review import decode_review
from tests.claim_objects import (
    POLICY_FILE,
    claim,
    cluster_objects,
    exact,
    first,
    sub,
    template,
    workload,
)
from tests.helpers import json_paths, make_pipeline, wrap

values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 50) | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3)
    ),
    max_leaves=12,
)

SEEDS = [
    claim("c", exact(count=2), first("f", sub("a", count=3), sub("b", mode="All"))),
    template("t", exact(count=2), {"name": "x"}),
    workload("Deployment", "d", 3, templates=("four-gpus",), legacy={"nvidia.com/gpu": "2"}),
    workload("CronJob", "cj", 2, templates=("one-gpu",)),
    workload("DaemonSet", "ds", templates=("one-gpu",)),
]


@pytest.fixture(scope="module")
def pipeline() -> Pipeline:
    return make_pipeline(cluster_objects(), load_policy(POLICY_FILE))


@given(st.sampled_from(range(len(SEEDS))), st.data(), values)
def test_any_value_anywhere_is_answered_without_an_internal_error(
    pipeline: Pipeline, seed: int, data: st.DataObject, value: Any
) -> None:
    obj = copy.deepcopy(SEEDS[seed])
    paths = [p for p in json_paths(obj) if p and p[0] in ("spec",)]
    where = data.draw(st.sampled_from(paths))
    node = obj
    for key in where[:-1]:
        node = node[key]
    node[where[-1]] = value
    body = orjson.dumps(wrap(obj))
    for endpoint in (Endpoint.MUTATE, Endpoint.VALIDATE):
        decision = pipeline.review(endpoint, decode_review(body))
        assert "internal-error" not in decision.denied_by
        assert decision.failed_checks == ()  # no check raised, whatever the failure policy
        assert not any("internal error" in w for w in decision.warnings)
        if not decision.allowed:
            assert decision.code in (403, 422), decision
