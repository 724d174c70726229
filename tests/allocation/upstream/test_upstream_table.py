"""Upstream's allocator test table, run against the allocation model on both CEL backends.

Each case is one of upstream's (k8s.io/dynamic-resource-allocation/structured,
internal/allocatortesting), as data in ``cases.yaml``. The model must give the outcome its
``expect`` says, except where a ``divergence`` records what it answers instead: that answer is
asserted too, so a fix that makes the model agree fails here and says which entry to remove.
"""

from __future__ import annotations

from collections import Counter

import pytest

from app.allocation import NEVER, NOT_NOW, OK
from app.cel.engine import Engine
from tests.allocation.upstream.table import (
    ALLOCATED,
    ITEM,
    OUTCOMES,
    UNALLOCATED,
    Case,
    load,
    verdict,
)

TABLE = load()


@pytest.mark.parametrize("case", TABLE.cases, ids=[c.name for c in TABLE.cases])
def test_the_model_gives_upstreams_answer(engine: Engine, case: Case) -> None:
    outcome = verdict(engine, case).outcome
    divergence = case.divergence
    if divergence is None:
        assert outcome == case.expect, (
            f"{case.name}: upstream's answer maps to {case.expect!r}, the model says {outcome!r}"
        )
        return
    assert outcome != case.expect, (
        f"{case.name}: the model now agrees with upstream ({outcome!r}); remove the case's "
        f"divergence ({divergence.item or divergence.reason}) from cases.yaml"
    )
    assert outcome == divergence.model, (
        f"{case.name}: recorded divergence says the model answers {divergence.model!r}, it now "
        f"says {outcome!r} (upstream: {case.expect!r}); update the entry"
    )


def test_every_upstream_case_is_ported_or_said_out_of_scope() -> None:
    names = [c.name for c in TABLE.cases] + [c["name"] for c in TABLE.out_of_scope]
    repeated = [n for n, k in Counter(names).items() if k > 1]
    assert not repeated
    assert len(names) == TABLE.source["cases"]
    assert all(c.get("why") for c in TABLE.out_of_scope)


@pytest.mark.parametrize("case", TABLE.cases, ids=[c.name for c in TABLE.cases])
def test_the_expected_outcome_follows_from_upstreams_answer(case: Case) -> None:
    """Upstream answers for one node; the expectation is that answer read for the cluster
    (README.md): allocated is ok, an abort is never, not allocated is never or, when other
    claims hold devices, not now. A case whose other nodes change that says why."""
    if case.upstream == ALLOCATED:
        mapped: tuple[str, ...] = (OK,)
    elif case.fatal:
        mapped = (NEVER,)
    else:
        assert case.upstream == UNALLOCATED or case.upstream
        mapped = (NEVER, NOT_NOW) if case.held else (NEVER,)
    assert case.expect in OUTCOMES
    assert case.expect in mapped or case.cluster, f"{case.name}: say why under `cluster`"
    divergence = case.divergence
    if divergence is not None:
        assert divergence.model in (*OUTCOMES, "unchecked")
        assert divergence.model != case.expect
        if divergence.kind == "bug":
            assert ITEM.match(divergence.item), divergence.item
        else:
            assert divergence.kind == "documented" and divergence.reason
