"""`dra-webhook serve --kubeconfig` against the fake API server, as a real process over TLS."""

from __future__ import annotations

import signal
from functools import partial
from pathlib import Path

import anyio
import pytest

from app.cli import main
from app.cluster.factory import build_source
from app.cluster.live import LiveSource
from app.cluster.view import ClusterView
from app.config import Settings
from app.config.settings import ClusterSource
from app.errors import ConfigError
from tests.cluster import objects
from tests.cluster.fake_apiserver import FakeApiServer
from tests.cluster.helpers import FAST, eventually
from tests.helpers import TlsServer, review, start_server, stop_server


def _validate(server: TlsServer, body: dict[str, object]) -> dict[str, object]:
    with server.client() as client:
        http = client.post("/validate?timeout=10s", json=body)
    assert http.status_code == 200
    response: dict[str, object] = http.json()["response"]
    return response


@pytest.mark.slow
@pytest.mark.anyio
async def test_serve_with_a_kubeconfig_is_ready_once_synced_and_answers_from_the_live_view(
    apiserver: FakeApiServer, tmp_path: Path
) -> None:
    kubeconfig = apiserver.write_kubeconfig(tmp_path / "kubeconfig")
    env = {f"DRA_WEBHOOK_{key.upper()}": str(value) for key, value in FAST.items()}
    # start_server blocks until /readyz is 200: run it in a thread while this loop serves the API
    server = await anyio.to_thread.run_sync(
        partial(start_server, tmp_path, "--kubeconfig", str(kubeconfig), env=env)
    )
    try:
        await eventually(
            lambda: len({path for _, path, query in apiserver.requests if "watch" in query}) == 10,
            "a watch on each of the ten kinds (PriorityClasses, Pods and PodGroups among them)",
        )
        denied = await anyio.to_thread.run_sync(_validate, server, review("pod-create-legacy-gpu"))
        assert denied["allowed"] is False

        # the namespace leaves dra-only on the API server: the next review sees it
        apiserver.put(objects.namespace("gpu-e2e", **{"gpu-mode": "audit"}))
        for _ in range(200):
            answer = await anyio.to_thread.run_sync(
                _validate, server, review("pod-create-legacy-gpu")
            )
            if answer["allowed"]:
                break
            await anyio.sleep(0.02)
        assert answer["allowed"] is True
        assert "would be denied in a dra-only namespace" in str(answer["warnings"])
    finally:
        code = await anyio.to_thread.run_sync(stop_server, server)
    assert code in (0, -signal.SIGTERM)  # uvicorn re-raises the signal after a clean shutdown
    assert "Traceback" not in server.log.read_text()


def test_serve_with_a_missing_kubeconfig_fails_before_binding_with_a_plain_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nope"
    assert main(["serve", "--kubeconfig", str(missing), "--cert-dir", str(tmp_path)]) == 2
    assert f"dra-webhook: kubeconfig {missing}:" in capsys.readouterr().err


def test_serve_in_cluster_outside_a_pod_fails_with_a_plain_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert main(["serve", "--in-cluster", "--cert-dir", str(tmp_path)]) == 2
    assert "dra-webhook: in-cluster service account:" in capsys.readouterr().err


def test_build_source_gives_the_live_source_for_a_kubeconfig(tmp_path: Path) -> None:
    kubeconfig = FakeApiServer().write_kubeconfig(tmp_path / "kubeconfig")
    settings = Settings(cluster_source=ClusterSource.KUBECONFIG, kubeconfig=kubeconfig)
    assert isinstance(build_source(settings, ClusterView()), LiveSource)


def test_build_source_refuses_a_kubeconfig_that_is_not_one(tmp_path: Path) -> None:
    bad = tmp_path / "kubeconfig"
    bad.write_text("just: [text")
    settings = Settings(cluster_source=ClusterSource.KUBECONFIG, kubeconfig=bad)
    with pytest.raises(ConfigError, match=f"kubeconfig {bad}"):
        build_source(settings, ClusterView())
