"""What tests build and start: real AdmissionReview bodies, cluster views, pipelines, the ASGI app,
a TLS server. Test modules import them from here; conftest.py holds only pytest's fixtures."""

from __future__ import annotations

import copy
import os
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson
import yaml
from fastapi.testclient import TestClient

from app.certs import mint
from app.cluster.static import StaticSource
from app.cluster.view import ClusterView
from app.config import Policy, Settings, load_policy
from app.config.policy import parse_policy
from app.metrics import Metrics
from app.pipeline import Decision, Endpoint, Pipeline
from app.transport.app import create_app
from app.transport.review import decode_review

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "apiserver-v1.36.2"
FIXTURE_NAMES = sorted(p.stem for p in FIXTURES.glob("*.json"))
GROUP_FIXTURES = ROOT / "tests" / "fixtures" / "apiserver-v1.37.2"
GROUP_FIXTURE_NAMES = sorted(p.stem for p in GROUP_FIXTURES.glob("*.json"))
"""A Workload and a PodGroup with group claims, as a kube-apiserver v1.37.2 sent them (the API
is off by default: tests/fixtures/README.md)."""


Obj = dict[str, Any]


def load_fixture(name: str) -> Obj:
    """A fresh copy of a captured AdmissionReview (name without .json)."""
    folder = GROUP_FIXTURES if name in GROUP_FIXTURE_NAMES else FIXTURES
    data: Obj = orjson.loads((folder / f"{name}.json").read_bytes())
    return data


def review(
    name: str, *, namespace: str | None = None, uid: str | None = None, **request: Any
) -> Obj:
    """A captured review, optionally moved to another namespace or with request fields replaced."""
    body = load_fixture(name)
    req = body["request"]
    if namespace is not None:
        req["namespace"] = namespace
        for key in ("object", "oldObject"):
            if isinstance(req.get(key), dict):
                req[key].setdefault("metadata", {})["namespace"] = namespace
    if uid is not None:
        req["uid"] = uid
    req.update(request)
    return body


def wrap(
    obj: Obj,
    *,
    operation: str = "CREATE",
    old: Obj | None = None,
    uid: str = "test-uid",
    dry_run: bool = False,
) -> Obj:
    """An AdmissionReview around any object, as the API server would send it."""
    api_version = obj.get("apiVersion", "v1")
    group, _, version = api_version.rpartition("/")
    kind = obj["kind"]
    meta = obj.get("metadata", {})
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": group, "version": version, "kind": kind},
            "resource": {"group": group, "version": version, "resource": kind.lower() + "s"},
            "requestKind": {"group": group, "version": version, "kind": kind},
            "name": meta.get("name", ""),
            "namespace": meta.get("namespace", ""),
            "operation": operation,
            "userInfo": {"username": "tester"},
            "object": obj,
            "oldObject": old,
            "dryRun": dry_run,
        },
    }


def namespace(name: str, mode: str | None = None, **labels: str) -> Obj:
    if mode is not None:
        labels = {"gpu-mode": mode, **labels}
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


DEMO_NAMESPACES = [
    namespace("gpu-e2e", "dra-only"),
    namespace("ml-research", "translate"),
    namespace("ml-audit", "audit"),
    namespace("default"),
    namespace("kube-system"),
    namespace("dra-webhook"),
]


def make_view(objects: list[Obj] | None = None) -> ClusterView:
    """A synced view holding `objects` (default: the demo namespaces only)."""
    view = ClusterView()
    StaticSource(view, objects=DEMO_NAMESPACES if objects is None else objects).load()
    return view


def make_pipeline(objects: list[Obj] | None = None, policy: Policy | None = None) -> Pipeline:
    return Pipeline(policy or load_policy(), make_view(objects), own_namespace="dra-webhook")


def decide(
    obj: Obj,
    endpoint: Endpoint = Endpoint.VALIDATE,
    objects: list[Any] | None = None,
    policy: Policy | None = None,
    **wrap_args: Any,
) -> Decision:
    """One review of `obj` (wrapped as the API server sends it) by a fresh pipeline."""
    pipeline = make_pipeline(objects, policy)
    return pipeline.review(endpoint, decode_review(orjson.dumps(wrap(obj, **wrap_args))))


def policy_from(text: str) -> Policy:
    return parse_policy(text, "test policy")


@dataclass
class AppHarness:
    client: TestClient
    source: StaticSource
    metrics: Metrics

    def post(self, endpoint: str, body: Obj | bytes, **headers: str) -> Any:
        content = body if isinstance(body, bytes) else orjson.dumps(body)
        headers = {"content-type": "application/json", **headers}
        return self.client.post(f"/{endpoint}", content=content, headers=headers)

    def answer(self, endpoint: str, body: Obj) -> Obj:
        """The `response` of a review that must be answered with HTTP 200."""
        http = self.post(endpoint, body)
        assert http.status_code == 200, http.text
        response: Obj = http.json()["response"]
        return response


def build_app(
    objects: list[Obj] | None = None,
    policy: Policy | None = None,
    settings: Settings | None = None,
) -> AppHarness:
    """The real ASGI app with its lifespan started; close with `harness.client.__exit__`."""
    view = ClusterView()
    source = StaticSource(view, objects=DEMO_NAMESPACES if objects is None else objects)
    metrics = Metrics()
    app = create_app(
        settings or Settings(), policy=policy or load_policy(), source=source, metrics=metrics
    )
    client = TestClient(app, raise_server_exceptions=False)
    client.__enter__()
    return AppHarness(client, source, metrics)


TOUR_PORTS = (Settings.model_fields["port"].default, Settings.model_fields["health_port"].default)
"""The ports `make run` holds (8443, and 8081 for the probes): no test may need them."""
ANY_PORTS = ("--port", "0", "--health-port", "0")
"""`serve` arguments for a test expecting it to stop before it serves: any free port, no health
listener, so the run never needs the ports `make run` holds."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class TlsServer:
    base_url: str
    cert_dir: Path
    process: subprocess.Popen[bytes]
    log: Path
    health_port: int = 0
    """The plain-HTTP health listener's port (--health-port)."""
    started: float = 0.0
    """time.monotonic() when the process was spawned."""

    @property
    def ca(self) -> str:
        return str(self.cert_dir / "ca.crt")

    def ssl_context(self) -> ssl.SSLContext:
        """Verifies the server against our CA only, as the API server does with caBundle."""
        return ssl.create_default_context(cafile=self.ca)

    def client(self, **kwargs: Any) -> httpx.Client:
        return httpx.Client(base_url=self.base_url, verify=self.ssl_context(), timeout=10, **kwargs)


def start_server(
    workdir: Path,
    *args: str,
    cert_dir: Path | None = None,
    env: dict[str, str] | None = None,
    wait_ready: bool = True,
    ready_timeout: float = 20,
    spawned: Callable[[TlsServer], None] | None = None,
) -> TlsServer:
    """`python -m app serve` on 127.0.0.1 with freshly minted certificates; waits up to
    `ready_timeout` seconds for /readyz (or /healthz). `spawned` is called with the server as
    soon as its process exists, before the wait (the scale benchmark times readiness from there).
    """
    if cert_dir is None:
        cert_dir = workdir / "certs"
        mint(cert_dir)
    port, health_port = free_port(), free_port()
    log = workdir / f"server-{port}.log"
    with log.open("wb") as log_file:
        started = time.monotonic()
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "app",
                "serve",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--health-port",
                str(health_port),
                "--cert-dir",
                str(cert_dir),
                *args,
            ],
            stdout=log_file,
            stderr=subprocess.STDOUT,
            cwd=workdir,
            env={**os.environ, **(env or {})},
        )
    server = TlsServer(f"https://127.0.0.1:{port}", cert_dir, process, log, health_port, started)
    if spawned is not None:
        spawned(server)
    deadline = time.monotonic() + ready_timeout
    path = "/readyz" if wait_ready else "/healthz"
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"server exited {process.returncode}: {log.read_text()}")
        try:
            # a client per attempt: a server with managed certificates writes its CA (ca.crt)
            # only once it has a pair from the cluster
            with server.client() as client:
                if client.get(path).status_code == 200:
                    return server
        except (httpx.TransportError, FileNotFoundError):
            pass
        if time.monotonic() > deadline:
            stop_server(server)
            raise RuntimeError(f"server did not start: {log.read_text()}")
        time.sleep(0.05)


def stop_server(server: TlsServer, timeout: float = 15) -> int:
    server.process.terminate()
    try:
        return server.process.wait(timeout)
    except subprocess.TimeoutExpired:
        server.process.kill()
        return server.process.wait()


def write_cluster_file(path: Path, objects: list[Obj]) -> Path:
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": objects}))
    return path


def clone(obj: Obj) -> Obj:
    return copy.deepcopy(obj)


def json_paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path (keys and indexes) into a JSON value, the root included: for fuzzing subtrees."""
    found = [prefix]
    if isinstance(node, dict):
        for key, value in node.items():
            found += json_paths(value, (*prefix, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found += json_paths(value, (*prefix, index))
    return found
