"""Fixtures of the quota tests."""

from __future__ import annotations

import pytest

from app.pipeline import Pipeline
from tests.claim_objects import cluster_objects
from tests.helpers import make_pipeline
from tests.policies.quota.helpers import research_policy


@pytest.fixture
def research() -> Pipeline:
    return make_pipeline(cluster_objects(), research_policy())
