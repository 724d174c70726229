"""A real Kubernetes control plane on loopback: etcd, kube-apiserver, kube-controller-manager and
kube-scheduler, from the binaries in CONTROL_PLANE_ASSETS (see tests/assets.py).

The tests' session fixture (tests/e2e/conftest.py) and `make e2e` use it; for development,

    CONTROL_PLANE_ASSETS=... python -m tests.e2e.controlplane [--dir DIR] [--fleet]

starts one, prints the admin kubeconfig's path and `export KUBECONFIG=...`, and stops it on
Ctrl-C (docs/control-plane.md).

Everything lives in one folder: its own PKI (one CA that signs the API server's serving
certificate and two client certificates: an admin in `system:masters` and the webhook's identity,
`system:serviceaccount:dra-webhook:dra-webhook`, which has no permission until a binding gives it
one), service-account signing keys, etcd's data, a kubeconfig per identity and one log file per
process. Ports are picked free on 127.0.0.1 at start; nothing listens elsewhere.

No kubelet runs: pods are scheduled (spec.nodeName, claims allocated) and go no further. The
controller-manager runs the controllers the journeys need (workloads, claims from templates,
service accounts and their tokens, quota usage, garbage collection); node lifecycle is off, so
hand-made Nodes stay Ready.

Processes are stopped by their own PID (SIGTERM, then SIGKILL after a timeout), in reverse start
order; the API server alone can be stopped and started again on the same port (`restart_apiserver`)
for the fault journeys.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

HOST = "127.0.0.1"
ADMIN = "admin"
WEBHOOK = "webhook"
WEBHOOK_USER = "system:serviceaccount:dra-webhook:dra-webhook"
"""The webhook's identity: the user name the chart's ClusterRoleBinding (subject ServiceAccount
dra-webhook in namespace dra-webhook) grants its ClusterRole to."""
IDENTITIES: dict[str, tuple[str, tuple[str, ...]]] = {
    ADMIN: ("e2e-admin", ("system:masters",)),
    WEBHOOK: (WEBHOOK_USER, ("system:serviceaccounts", "system:serviceaccounts:dra-webhook")),
}
CONTROLLERS = (
    "deployment-controller",
    "replicaset-controller",
    "job-controller",
    "cronjob-controller",
    "resourceclaim-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "resourcequota-controller",
    "garbage-collector-controller",
    "namespace-controller",
    "root-ca-certificate-publisher-controller",
)
"""What the journeys need; node-lifecycle-controller is not among them, so Nodes made by hand
are never marked NotReady or tainted for want of a kubelet."""
EVICTION_CONTROLLER = "device-taint-eviction-controller"
"""Started by the journey that needs it, for its length only (`start_controllers`): it evicts
the pods whose allocated devices carry a NoExecute taint their claims do not tolerate with
effect NoExecute, which the satisfiability differential's generated devices carry (a claim
tolerating `operator: Exists` gets such a device from the scheduler and then loses its pod)."""
_GROUP_CLAIM_GATES = ("GenericWorkload=true", "DRAWorkloadResourceClaims=true")
OPT_IN: dict[int, tuple[tuple[str, ...], tuple[str, ...]]] = {
    # group claims (test_group_claims.py): Workload and PodGroup with resourceClaims; no other
    # journey creates either, and pods without a schedulingGroup are scheduled as before.
    # device-taints: the scheduler and the eviction controller act on DeviceTaintRules (the
    # v1beta2 API is served already, resource.k8s.io/v1beta2 being on); no field of a claim or
    # slice depends on it, and 1.37 has it on by default
    36: (
        ("DRADeviceTaintRules=true", *_GROUP_CLAIM_GATES),
        ("scheduling.k8s.io/v1alpha2=true",),
    ),
    37: (_GROUP_CLAIM_GATES, ("scheduling.k8s.io/v1beta1=true",)),
}
"""Per release minor: the feature gates (`Name=true`) and API versions (`group/version=true`)
the journeys turn on besides the defaults, for APIs a platform team opts into (a gate that is
off by default). Each is chosen so that it changes nothing another journey pins on that release
(the fields the API server keeps on claims, what the release probe sees); the journey that needs
one says so in its module docstring. Applied to every component that knows the gate."""
READY_TIMEOUT = 60.0
STOP_TIMEOUT = 10.0
STOP_TIMEOUTS = {"kube-apiserver": 3.0}
"""kube-apiserver stops listening at once on SIGTERM but then drains its clients' watches for
about ten more seconds; nothing here needs that drain."""
POLL = 0.1


class ControlPlaneError(RuntimeError):
    """A process exited or the API server did not become ready; the message has its log tail."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


# -- PKI ------------------------------------------------------------------------------------


def _pem_key(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _name(common: str, organizations: tuple[str, ...] = ()) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
    return x509.Name([*attributes, x509.NameAttribute(NameOID.COMMON_NAME, common)])


@dataclass(frozen=True)
class Pki:
    """File paths of the control plane's CA, serving pair, client pairs and SA keys."""

    folder: Path

    @property
    def ca(self) -> Path:
        return self.folder / "ca.crt"

    def cert(self, name: str) -> Path:
        return self.folder / f"{name}.crt"

    def key(self, name: str) -> Path:
        return self.folder / f"{name}.key"

    @property
    def sa_key(self) -> Path:
        return self.folder / "sa.key"

    @property
    def sa_pub(self) -> Path:
        return self.folder / "sa.pub"

    def create(self) -> None:
        """One CA signs the serving certificate (127.0.0.1, localhost) and a client certificate
        per identity (CN = user, O = groups); an RSA pair signs service-account tokens."""
        self.folder.mkdir(parents=True, exist_ok=True)
        now = dt.datetime.now(dt.UTC)
        start, end = now - dt.timedelta(minutes=5), now + dt.timedelta(days=2)
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_name = _name("dra-webhook e2e CA")
        ca = (
            x509.CertificateBuilder()
            .subject_name(ca_name)
            .issuer_name(ca_name)
            .public_key(ca_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(end)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True, key_cert_sign=True, crl_sign=True,
                    content_commitment=False, key_encipherment=False, data_encipherment=False,
                    key_agreement=False, encipher_only=False, decipher_only=False,
                ),
                critical=True,
            )
            .sign(ca_key, hashes.SHA256())
        )  # fmt: skip
        self.ca.write_bytes(ca.public_bytes(serialization.Encoding.PEM))

        def leaf(name: str, subject: x509.Name, server: bool) -> None:
            key = ec.generate_private_key(ec.SECP256R1())
            builder = (
                x509.CertificateBuilder()
                .subject_name(subject)
                .issuer_name(ca_name)
                .public_key(key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(start)
                .not_valid_after(end)
                .add_extension(
                    x509.ExtendedKeyUsage(
                        [ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH]
                    ),
                    critical=False,
                )
            )  # fmt: skip
            if server:
                builder = builder.add_extension(
                    x509.SubjectAlternativeName(
                        [x509.DNSName("localhost"), x509.IPAddress(_ip(HOST))]
                    ),
                    critical=False,
                )
            cert = builder.sign(ca_key, hashes.SHA256())
            self.cert(name).write_bytes(cert.public_bytes(serialization.Encoding.PEM))
            self.key(name).write_bytes(_pem_key(key))
            self.key(name).chmod(0o600)

        leaf("apiserver", _name("kube-apiserver"), server=True)
        for identity, (user, groups) in IDENTITIES.items():
            leaf(identity, _name(user, groups), server=False)
        sa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.sa_key.write_bytes(_pem_key(sa))
        self.sa_pub.write_bytes(
            sa.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )


def _ip(text: str) -> object:
    import ipaddress

    return ipaddress.ip_address(text)


# -- the processes --------------------------------------------------------------------------


@dataclass
class ControlPlane:
    """The four processes, their folder and how to reach the API server."""

    assets: Path
    root: Path
    minor: int = 0
    """The release's minor (`OPT_IN` is read for it); 0 turns nothing on."""
    etcd_port: int = field(default_factory=free_port)
    etcd_peer_port: int = field(default_factory=free_port)
    api_port: int = field(default_factory=free_port)
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    startup_seconds: float = 0.0
    """From starting etcd to the API server's first successful request (GET /readyz)."""

    @property
    def pki(self) -> Pki:
        return Pki(self.root / "pki")

    @property
    def url(self) -> str:
        return f"https://{HOST}:{self.api_port}"

    def kubeconfig(self, identity: str = ADMIN) -> Path:
        return self.root / f"{identity}.kubeconfig"

    def log(self, name: str) -> Path:
        return self.root / "logs" / f"{name}.log"

    # -- lifecycle

    def start(self) -> None:
        """Start all four and return once the API server answers and the default namespace's
        ServiceAccount exists (the controller-manager is working; pods can be created)."""
        (self.root / "logs").mkdir(parents=True, exist_ok=True)
        self.pki.create()
        for identity in IDENTITIES:
            self._write_kubeconfig(identity)
        began = time.monotonic()
        self._start("etcd", self._etcd_args())
        self._start("kube-apiserver", self._apiserver_args())
        self.wait_ready()
        self.startup_seconds = time.monotonic() - began
        self._start("kube-controller-manager", self._controller_manager_args())
        self._start("kube-scheduler", self._scheduler_args())
        self._wait(
            lambda: self._get("/api/v1/namespaces/default/serviceaccounts/default") == 200,
            "the default ServiceAccount (serviceaccount controller)",
        )

    def stop(self) -> None:
        for name in reversed(list(self.processes)):
            self._stop(name)

    def start_controllers(self, name: str, controllers: tuple[str, ...]) -> None:
        """A second kube-controller-manager running only `controllers`, as process `name`
        (stopped with `stop_process`, or with the rest): for a journey that needs a controller
        the others must not have running."""
        args = [a for a in self._controller_manager_args() if not a.startswith("--controllers=")]
        controllers_arg = f"--controllers={','.join(controllers)}"
        self._start(name, [*args, controllers_arg], binary="kube-controller-manager")

    def stop_process(self, name: str) -> None:
        """Stop a process started on the side (`start_controllers`) and forget it: one that has
        ended on purpose is no sign of trouble to the waits that watch the others."""
        self._stop(name)
        self.processes.pop(name, None)

    def stop_apiserver(self) -> None:
        self._stop("kube-apiserver")

    def start_apiserver(self) -> None:
        self._start("kube-apiserver", self._apiserver_args())
        self.wait_ready()

    def wait_ready(self, timeout: float = READY_TIMEOUT) -> None:
        self._wait(lambda: self._get("/readyz") == 200, "kube-apiserver /readyz", timeout)

    def alive(self) -> dict[str, bool]:
        return {name: p.poll() is None for name, p in self.processes.items()}

    def log_tails(self, lines: int = 40) -> str:
        parts = []
        for name in self.processes:
            text = self.log(name).read_text(errors="replace").splitlines()[-lines:]
            parts.append(f"--- {self.log(name)} (last {len(text)} lines)\n" + "\n".join(text))
        return "\n".join(parts)

    # -- internals

    def _start(self, name: str, args: list[str], binary: str = "") -> None:
        with self.log(name).open("ab") as log:
            self.processes[name] = subprocess.Popen(
                [str(self.assets / (binary or name)), *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.root,
                start_new_session=True,  # Ctrl-C reaches the parent only, which stops them in order
            )

    def _stop(self, name: str) -> None:
        process = self.processes.get(name)
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(STOP_TIMEOUTS.get(name, STOP_TIMEOUT))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def _get(self, path: str) -> int:
        context = ssl.create_default_context(cafile=str(self.pki.ca))
        context.load_cert_chain(self.pki.cert(ADMIN), self.pki.key(ADMIN))
        try:
            with urllib.request.urlopen(self.url + path, context=context, timeout=2) as answer:
                status: int = answer.status
                return status
        except urllib.error.HTTPError as error:
            return error.code
        except (OSError, ssl.SSLError):
            return 0

    def _wait(self, done: object, what: str, timeout: float = READY_TIMEOUT) -> None:
        assert callable(done)
        deadline = time.monotonic() + timeout
        while not done():
            dead = [name for name, up in self.alive().items() if not up]
            if dead or time.monotonic() > deadline:
                reason = f"{', '.join(dead)} exited" if dead else f"timed out after {timeout:.0f} s"
                raise ControlPlaneError(f"waiting for {what}: {reason}\n{self.log_tails()}")
            time.sleep(POLL)

    def _write_kubeconfig(self, identity: str) -> None:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "e2e",
                    "cluster": {"server": self.url, "certificate-authority": str(self.pki.ca)},
                }
            ],
            "users": [
                {
                    "name": identity,
                    "user": {
                        "client-certificate": str(self.pki.cert(identity)),
                        "client-key": str(self.pki.key(identity)),
                    },
                }
            ],
            "contexts": [{"name": identity, "context": {"cluster": "e2e", "user": identity}}],
            "current-context": identity,
        }
        self.kubeconfig(identity).write_text(yaml.safe_dump(config))

    def _etcd_args(self) -> list[str]:
        client, peer = f"http://{HOST}:{self.etcd_port}", f"http://{HOST}:{self.etcd_peer_port}"
        return [
            "--name=e2e",
            f"--data-dir={self.root / 'etcd'}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=e2e={peer}",
            "--unsafe-no-fsync",  # a throwaway store: durability costs seconds on a busy disk
            "--log-level=warn",
        ]

    def _apiserver_args(self) -> list[str]:
        pki = self.pki
        return [
            f"--etcd-servers=http://{HOST}:{self.etcd_port}",
            f"--bind-address={HOST}",
            f"--advertise-address={HOST}",
            f"--secure-port={self.api_port}",
            f"--tls-cert-file={pki.cert('apiserver')}",
            f"--tls-private-key-file={pki.key('apiserver')}",
            f"--client-ca-file={pki.ca}",
            f"--cert-dir={self.root / 'apiserver'}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={pki.sa_pub}",
            f"--service-account-signing-key-file={pki.sa_key}",
            "--service-cluster-ip-range=10.96.0.0/16",
            "--authorization-mode=Node,RBAC",
            "--endpoint-reconciler-type=none",
            # v1beta2 so that matchPolicy: Equivalent conversion can be seen (tests/fixtures);
            # v1beta1 too, to read objects written for it back as v1 (test_migrate_versions.py)
            "--runtime-config="
            + ",".join(
                ("resource.k8s.io/v1beta1=true", "resource.k8s.io/v1beta2=true", *self._apis())
            ),
            "--profiling=false",
            *self._gates(),
        ]

    def _gates(self) -> list[str]:
        gates = OPT_IN.get(self.minor, ((), ()))[0]
        return [f"--feature-gates={','.join(gates)}"] if gates else []

    def _apis(self) -> tuple[str, ...]:
        return OPT_IN.get(self.minor, ((), ()))[1]

    def _component_args(self) -> list[str]:
        kubeconfig = str(self.kubeconfig(ADMIN))
        return [
            f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--leader-elect=false",
            f"--bind-address={HOST}",
            "--secure-port=0",
            *self._gates(),
        ]

    def _controller_manager_args(self) -> list[str]:
        return [
            *self._component_args(),
            f"--controllers={','.join(CONTROLLERS)}",
            "--use-service-account-credentials=false",
            f"--service-account-private-key-file={self.pki.sa_key}",
            f"--root-ca-file={self.pki.ca}",
            "--concurrent-deployment-syncs=5",
        ]

    def _scheduler_args(self) -> list[str]:
        return self._component_args()


def _main() -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.e2e.controlplane",
        description="Start a local control plane from CONTROL_PLANE_ASSETS until Ctrl-C.",
    )
    parser.add_argument("--dir", type=Path, default=None, help="its folder (default: a new one)")
    parser.add_argument(
        "--fleet", action="store_true", help="publish the tests' GPU fleet (tests/e2e/fleet.py)"
    )
    args = parser.parse_args()
    assets = os.environ.get("CONTROL_PLANE_ASSETS", "")
    if not assets:
        print(
            "set CONTROL_PLANE_ASSETS to the folder of the binaries: "
            'CONTROL_PLANE_ASSETS="$(hack/get-control-plane)"',
            file=sys.stderr,
        )
        return 2
    # SIGTERM (e.g. `timeout`) stops the children like Ctrl-C does: they run in their own session
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    root = args.dir or Path(tempfile.mkdtemp(prefix="dra-e2e-"))
    from tests.assets import read_release

    minor = (read_release(Path(assets)) or (0, ""))[0]
    plane = ControlPlane(Path(assets), root.resolve(), minor)
    try:
        plane.start()
    except ControlPlaneError as error:
        plane.stop()
        print(error, file=sys.stderr)
        return 1
    if args.fleet:
        from tests.e2e.fleet import publish
        from tests.e2e.kube import Kube

        kube = Kube(plane)
        publish(kube, minor or 36)
        kube.close()
    print(f"control plane up in {plane.startup_seconds:.1f} s at {plane.url}; logs in {root}/logs")
    print(f"webhook identity: {plane.kubeconfig(WEBHOOK)}")
    print(f"export KUBECONFIG={plane.kubeconfig(ADMIN)}", flush=True)
    try:
        while all(plane.alive().values()):
            time.sleep(1)
        print(f"a process exited:\n{plane.log_tails()}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        plane.stop()


if __name__ == "__main__":
    sys.exit(_main())
