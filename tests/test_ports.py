"""No test needs the ports the README's `make run` holds (8443, and 8081 for the probes), so
`make run` and `make test` side by side both work.

The proof is the whole suite: tests/conftest.py holds both ports on 127.0.0.1 for the session,
as `make run` does, and every test runs beside them. Here: that the hold is in place, and that a
`serve` left on the default ports would fail, naming the flag that moves it.
"""

from __future__ import annotations

import errno
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import TOUR_PORTS


@pytest.mark.parametrize("host", ["127.0.0.1", "0.0.0.0"])
@pytest.mark.parametrize("port", TOUR_PORTS)
def test_the_ports_make_run_holds_are_taken_while_the_suite_runs(host: str, port: int) -> None:
    with socket.socket() as sock, pytest.raises(OSError) as refused:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        sock.bind((host, port))
        sock.listen()
    assert refused.value.errno == errno.EADDRINUSE


PORT, HEALTH_PORT = TOUR_PORTS


@pytest.mark.parametrize(
    ("args", "said"),
    [
        ((), f"--port {PORT}: 127.0.0.1:{PORT} is already in use"),
        (
            ("--port", "0"),
            f"--health-port {HEALTH_PORT}: 127.0.0.1:{HEALTH_PORT} is already in use",
        ),
    ],
)
def test_serve_beside_make_run_names_the_busy_port_and_writes_nothing(
    args: tuple[str, ...], said: str, tmp_path: Path
) -> None:
    """As `make run` starts it, in an empty folder: it stops before minting certificates."""
    result = subprocess.run(
        [sys.executable, "-m", "app", "serve", "--host", "127.0.0.1", *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr.splitlines() == [f"dra-webhook: {said} (another dra-webhook?)"]
    assert list(tmp_path.iterdir()) == []
