"""Journey releases: the webhook learns what the release it serves keeps, and writes nothing the
API server would drop (app.cluster.release).

On 1.34 and 1.35 (DRAConsumableCapacity alpha, off) a HAMi pod's share cannot become a
consumable-capacity request: the API server would drop `capacity` without a word, and its CEL
knows no `device.allowMultipleAllocations`, so a template naming it is refused with a 422 the user
would read as an internal error. The webhook refuses the pod instead, naming the release and the
gate; `migrate` says the same of the templates it would write. From 1.36 the same pod gets its
share. A dry-run probe shows the webhook which fields its API server keeps, whatever the version.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.assets import control_plane_release
from tests.e2e import objects as o
from tests.e2e.controlplane import ControlPlane
from tests.e2e.fleet import SHARING_SINCE
from tests.e2e.kube import ApiError, Kube
from tests.e2e.webhook import Webhook

pytestmark = [pytest.mark.journey("releases")]

Obj = dict[str, Any]
HAMI = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4000"}


def _hami(name: str, namespace: str) -> Obj:
    return o.pod(name, namespace, o.pod_spec(o.container("cuda", limits=HAMI)))


def test_the_webhook_says_which_release_it_serves_and_what_it_keeps(webhook: Webhook) -> None:
    minor, version = control_plane_release()
    log = webhook.server.log.read_text(errors="replace")
    line = next(line for line in log.splitlines() if "API server release" in line)
    assert version in line
    assert '"source": "probed"' in line or "'source': 'probed'" in line
    kept = minor >= SHARING_SINCE
    assert f'"DRAConsumableCapacity": {str(kept).lower()}' in line


def test_a_hami_share_in_a_translate_namespace_gets_what_the_release_keeps(
    kube: Kube, namespace: Callable[..., str], webhook: Webhook
) -> None:
    minor, version = control_plane_release()
    ns = namespace("translate")
    if minor < SHARING_SINCE:
        with pytest.raises(ApiError) as refused:
            kube.create(_hami("infer", ns))
        message = refused.value.message
        assert f"Kubernetes {version} does not keep `exactly.capacity`" in message
        assert "DRAConsumableCapacity is off" in message
        assert "422" not in message and "could not create" not in message
        assert not kube.list("ResourceClaimTemplate", ns)
        return
    stored = kube.create(_hami("infer", ns)).obj
    (entry,) = stored["spec"]["resourceClaims"]
    template = kube.get("ResourceClaimTemplate", entry["resourceClaimTemplateName"], ns)
    (request,) = template["spec"]["spec"]["devices"]["requests"]
    assert request["exactly"]["capacity"]["requests"] == {"memory": "4000Mi"}


def test_migrate_for_the_release_says_the_same_of_the_templates_it_would_write(
    tmp_path: Path,
) -> None:
    minor, version = control_plane_release()
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(yaml.safe_dump(_hami("infer", "ml-research")))
    run = subprocess.run(
        [sys.executable, "-m", "app", "migrate", "--kubernetes-version", version,
         "--diff", str(manifest)],
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    said = run.stdout + run.stderr
    if minor < SHARING_SINCE:
        assert run.returncode == 2, said
        assert f"Kubernetes {version} does not keep `exactly.capacity`" in said
    else:
        assert run.returncode == 1, said  # something to change
        assert "memory: 4000Mi" in said


def test_report_names_the_release_and_the_dra_features_it_serves(
    control_plane: ControlPlane,
) -> None:
    minor, version = control_plane_release()
    run = subprocess.run(
        [sys.executable, "-m", "app", "report", "--kubeconfig", str(control_plane.kubeconfig())],
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    last = run.stdout.strip().splitlines()[-1]
    assert last.startswith(f"Kubernetes {version} (release defaults): resource.k8s.io v1")
    sharing = "on" if minor >= SHARING_SINCE else "off"
    assert f"DRAConsumableCapacity {sharing}" in last
