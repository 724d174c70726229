"""`dra-webhook check` on kinds the webhook is not sent: a GPU request in an unknown kind is
found by the workload scan and judged by the namespace's mode, never passed in silence."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.cli import main

UNKNOWN = """\
apiVersion: example.com/v1
kind: TrainingRun
metadata: {name: r1, namespace: %s}
spec:
  roles:
    worker:
      resources:
        limits: {nvidia.com/gpu: 2}
"""


@pytest.mark.parametrize(
    ("namespace", "code", "said"),
    [
        ("gpu-e2e", 1, "DENIED"),
        ("ml-research", 1, "DENIED"),
        ("ml-audit", 0, "would be denied in a dra-only namespace"),
        ("default", 0, "allowed"),
    ],
)
def test_a_gpu_request_in_an_unknown_kind_is_judged_by_the_namespaces_mode(
    namespace: str, code: int, said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "run.yaml"
    path.write_text(UNKNOWN % namespace)
    assert main(["check", str(path)]) == code
    out = capsys.readouterr().out
    assert said in out
    if namespace != "default":
        assert "spec.roles.worker.resources.limits[nvidia.com/gpu]: nvidia.com/gpu: 2" in out
    if code:  # a denial's message is whole (a warning is cut at 256 characters)
        assert "add the kind to the policy's workloadKinds" in out
