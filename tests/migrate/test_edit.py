"""Comments stay where they were when translation removes the fields around them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.migrate.helpers import Run

HEAD = """\
apiVersion: v1
kind: Pod
metadata: {name: p}
spec:
  containers:
  - name: app
    image: x
    resources:
"""


@pytest.mark.parametrize(
    ("resources", "kept"),
    [
        (  # a comment line under the removed name, about the next one
            "      limits:\n        nvidia.com/gpu: 1  # gone with it\n"
            "        # cpu is for the loader\n        cpu: 2\n",
            "      limits:\n        # cpu is for the loader\n        cpu: 2\n",
        ),
        (  # under the removed name, about the next one, after a name that stays
            "      limits:\n        memory: 1Gi\n        nvidia.com/gpu: 1\n"
            "        # cpu is for the loader\n        cpu: 2\n",
            "      limits:\n        memory: 1Gi\n        # cpu is for the loader\n        cpu: 2\n",
        ),
        (  # after a map that goes away whole
            "      limits:\n        nvidia.com/gpu: 1\n      # requests follow\n"
            "      requests:\n        cpu: 1\n",
            "      # requests follow\n      requests:\n        cpu: 1\n",
        ),
    ],
)
def test_a_comment_line_after_a_removed_field_is_kept(
    resources: str, kept: str, tmp_path: Path, migrate: Callable[..., Run]
) -> None:
    (tmp_path / "p.yaml").write_text(HEAD + resources)
    assert migrate("--write", "--templates-out", "t.yaml", "p.yaml").code == 0
    text = (tmp_path / "p.yaml").read_text()
    # a comment on the removed line itself moves to the claim that replaces it
    assert text.count("gone with it") == resources.count("gone with it")
    assert "gone with it" not in text or "- name: gpu-app  # gone with it\n" in text, text
    assert HEAD + kept in text, text


@pytest.mark.parametrize(
    ("resources", "comment"),
    [
        (  # on its own line right above the removed name, after a name that stays
            "      limits:\n        cpu: 2\n        # the GPU it trains on\n"
            "        nvidia.com/gpu: 1\n",
            "# the GPU it trains on",
        ),
        (  # above the first name of a map that goes away whole, and on the line itself
            "      limits:\n        # one GPU\n        nvidia.com/gpu: 1  # for training\n",
            "# one GPU; for training",
        ),
    ],
)
def test_a_comment_on_or_above_a_removed_line_moves_to_the_claim_that_replaces_it(
    resources: str, comment: str, tmp_path: Path, migrate: Callable[..., Run]
) -> None:
    (tmp_path / "p.yaml").write_text(HEAD + resources)
    assert migrate("--write", "--templates-out", "t.yaml", "p.yaml").code == 0
    text = (tmp_path / "p.yaml").read_text()
    assert f"      claims:\n      - name: gpu-app  {comment}\n" in text, text
    assert text.count(comment.split(";", maxsplit=1)[0]) == 1, text
