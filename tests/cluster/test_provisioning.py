"""Template provisioning: the view as the cache, one API call per template however many
admissions need it, and one outcome per decision (the answers they become are pinned through
the app in tests/transport/test_translate_provision.py)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from app.cluster.provisioning import Outcome, Provisioner, Status
from app.cluster.static import StaticSource
from app.cluster.view import ClusterView, Kind
from app.errors import TemplateConflictError, TemplateCreateError
from app.k8s.templates import TEMPLATE_LABEL
from tests.cluster import objects

pytestmark = pytest.mark.anyio

Obj = dict[str, Any]
NS = "ml-research"


class _Source(StaticSource):
    """A static source whose creates and touches wait for `release` and are counted; `error`
    makes both fail; `collects_templates` turns template garbage collection on."""

    def __init__(self, objs: list[Obj], *, collects_templates: bool = False) -> None:
        super().__init__(ClusterView(), objects=[objects.namespace(NS), *objs])
        self.collects_templates = collects_templates
        self.release = asyncio.Event()
        self.release.set()
        self.error: Exception | None = None
        self.creates: list[str] = []
        self.touches: list[str] = []
        self.load()

    async def create_claim_template(self, template: Obj) -> None:
        self.creates.append(template["metadata"]["name"])
        await self.release.wait()
        if self.error is not None:
            raise self.error
        await super().create_claim_template(template)

    async def touch_claim_template(self, namespace: str, name: str) -> bool:
        self.touches.append(name)
        await self.release.wait()
        if self.error is not None:
            raise self.error
        return await super().touch_claim_template(namespace, name)


def _provisioner(source: _Source, created: list[int] | None = None) -> Provisioner:
    def count() -> None:
        if created is not None:
            created.append(1)

    return Provisioner(source, gc_grace_seconds=3600, on_create=count)


def _template(name: str = "gpu-1") -> Obj:
    return objects.claim_template(name, NS)


async def test_a_template_the_view_holds_costs_no_api_call() -> None:
    source = _Source([_template()])
    assert await _provisioner(source).ensure([_template()]) == Outcome(Status.EXISTED)
    assert source.creates == [] and source.touches == []


async def test_a_missing_template_is_created_and_counted() -> None:
    source = _Source([])
    created: list[int] = []
    outcome = await _provisioner(source, created).ensure([_template()])
    assert outcome == Outcome(Status.CREATED)
    assert source.creates == ["gpu-1"] and created == [1]
    assert source.view.get(Kind.RESOURCE_CLAIM_TEMPLATE, "gpu-1", NS) is not None


async def test_concurrent_admissions_of_a_new_shape_share_one_create() -> None:
    source = _Source([])
    source.release.clear()
    provisioner = _provisioner(source)
    waiters = [
        asyncio.create_task(provisioner.ensure([_template("gpu-1"), _template("gpu-2")]))
        for _ in range(20)
    ]
    await asyncio.sleep(0.01)
    source.release.set()
    outcomes = await asyncio.gather(*waiters)
    assert all(o.status is Status.CREATED for o in outcomes)  # each waited for the one create
    assert sorted(source.creates) == ["gpu-1", "gpu-2"]


async def test_a_stored_template_that_changes_is_compared_again() -> None:
    wanted = _template()
    source = _Source([_template()])
    provisioner = _provisioner(source)
    for _ in range(2):  # the second answered from the comparison kept
        assert await provisioner.ensure([wanted]) == Outcome(Status.EXISTED)
    changed = _template()
    changed["metadata"]["resourceVersion"] = "2"
    changed["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"] = 7
    source.view.apply(Kind.RESOURCE_CLAIM_TEMPLATE, changed)
    outcome = await provisioner.ensure([wanted])
    assert outcome.status is Status.CONFLICT
    assert outcome.reason.endswith("its spec is not the one dra-webhook builds under that name")
    source.view.apply(
        Kind.RESOURCE_CLAIM_TEMPLATE,
        {**_template(), "metadata": {**_template()["metadata"], "resourceVersion": "3"}},
    )
    assert await provisioner.ensure([wanted]) == Outcome(Status.EXISTED)


async def test_a_template_of_its_name_with_other_content_is_a_conflict_before_any_call() -> None:
    forged = _template()
    del forged["metadata"]["labels"]
    source = _Source([forged])
    for dry_run in (False, True):
        outcome = await _provisioner(source).ensure(
            [_template("gpu-0"), _template()], dry_run=dry_run
        )
        assert outcome.status is Status.CONFLICT and outcome.template == "gpu-1"
        assert outcome.reason == (
            f"ResourceClaimTemplate {NS}/gpu-1 exists, but it is not labelled "
            "app.kubernetes.io/managed-by=dra-webhook"
        )
    assert source.creates == []


async def test_a_dry_run_creates_nothing() -> None:
    source = _Source([])
    assert await _provisioner(source).ensure([_template()], dry_run=True) == Outcome(Status.DRY_RUN)
    assert source.creates == []


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (TemplateCreateError("403 Forbidden: denied", refused=True), Status.REFUSED),
        (TemplateCreateError("API server unreachable"), Status.FAILED),
        (TemplateConflictError("ResourceClaimTemplate x exists, but ..."), Status.CONFLICT),
    ],
    ids=["refused", "failed", "conflict read back"],
)
async def test_a_failed_create_is_an_outcome_with_the_api_servers_reason(
    error: TemplateCreateError, status: Status
) -> None:
    source = _Source([])
    source.error = error
    outcome = await _provisioner(source).ensure([_template()])
    assert outcome == Outcome(status, "gpu-1", str(error))
    assert not outcome.ok


async def test_a_failure_is_shared_by_its_waiters_and_not_remembered() -> None:
    source = _Source([])
    source.error = TemplateCreateError("API server unreachable")
    source.release.clear()
    provisioner = _provisioner(source)
    waiters = [asyncio.create_task(provisioner.ensure([_template()])) for _ in range(5)]
    await asyncio.sleep(0.01)
    source.release.set()
    assert {o.status for o in await asyncio.gather(*waiters)} == {Status.FAILED}
    assert source.creates == ["gpu-1"]
    source.error = None
    assert (await provisioner.ensure([_template()])).status is Status.CREATED
    assert source.creates == ["gpu-1", "gpu-1"]


async def test_a_bug_is_raised_not_turned_into_an_outcome() -> None:
    source = _Source([])
    source.error = RuntimeError("a bug, not an API error")
    with pytest.raises(RuntimeError, match="a bug"):
        await _provisioner(source).ensure([_template()])


# -- with template garbage collection ----------------------------------------------------------


async def test_an_idle_template_is_touched_once_before_it_is_relied_on_then_left_alone() -> None:
    source = _Source([_template()], collects_templates=True)
    source.release.clear()
    provisioner = _provisioner(source)
    waiters = [asyncio.create_task(provisioner.ensure([_template()])) for _ in range(5)]
    await asyncio.sleep(0.01)
    source.release.set()
    assert {o.status for o in await asyncio.gather(*waiters)} == {Status.EXISTED}
    assert source.touches == ["gpu-1"] and source.creates == []
    await provisioner.ensure([_template()])
    assert source.touches == ["gpu-1"]  # fresh for a quarter of the grace period


async def test_an_idle_template_the_touch_finds_gone_is_created_again() -> None:
    source = _Source([_template()], collects_templates=True)

    async def gone(namespace: str, name: str) -> bool:  # another replica's collector deleted it
        source.touches.append(name)
        return False

    source.touch_claim_template = gone  # type: ignore[method-assign]
    assert (await _provisioner(source).ensure([_template()])).status is Status.CREATED
    assert source.touches == ["gpu-1"] and source.creates == ["gpu-1"]


async def test_a_template_claims_were_made_from_is_not_touched() -> None:
    made = objects.claim("pod-a-gpu", NS)
    made["metadata"]["labels"] = {TEMPLATE_LABEL: "gpu-1"}
    source = _Source([_template(), made], collects_templates=True)
    assert (await _provisioner(source).ensure([_template()])).status is Status.EXISTED
    assert source.touches == [] and source.creates == []


async def test_settled_is_what_ensure_answers_without_a_call_and_none_where_it_calls() -> None:
    forged = _template("gpu-9")
    del forged["metadata"]["labels"]
    source = _Source([_template(), forged], collects_templates=True)
    provisioner = _provisioner(source)
    assert provisioner.settled([_template("gpu-2")]) is None  # missing: a create to await
    assert provisioner.settled([_template("gpu-2")], dry_run=True) == Outcome(Status.DRY_RUN)
    assert provisioner.settled([_template()]) is None  # idle: a touch to await first
    conflict = provisioner.settled([_template("gpu-9")])
    assert conflict is not None and conflict.status is Status.CONFLICT
    assert source.creates == [] and source.touches == []  # (it calls nothing itself)
    assert await provisioner.ensure([_template()]) == Outcome(Status.EXISTED)  # touched now
    assert provisioner.settled([_template()]) == Outcome(Status.EXISTED)
    assert source.touches == ["gpu-1"]
