"""Instructions per admission review, the webhook against a bare FastAPI echo, counted by
valgrind (callgrind): `make bench-instructions` (`python -m tests.instructions`).

CPU time per review on a shared 2-vCPU machine moves by 20% from run to run; the number of
instructions a review executes does not (a fixed hash seed, the same inputs: the same count to
a few tenths of a percent). Each review goes through uvicorn's httptools protocol and the app in
process, as tests/benchmarks/test_bench_transport.py sends them (no socket, no TLS: those cost
both servers the same), and only the loop over the reviews is counted (callgrind collects inside
`_operator.call`, which runs it). The echo is the floor any FastAPI webhook pays: a route that
parses the review, reads the pod's containers and allows it, on uvicorn's own protocol. Both log
as they do when served, to /dev/null: the webhook its JSON lines (a denied review writes its
decision line, about 50k instructions), the echo nothing (no access log, as perf-ratio runs it).

    python -m tests.instructions [--reviews N] [--mutate NAMESPACE] [FIXTURE ...]

Prints, per captured review (default: the denied legacy pod and the allowed DRA pod), the
thousands of instructions per review of each server and their ratio. `--mutate NAMESPACE` sends
the review to /mutate, moved to NAMESPACE (a translate namespace of the embedded cluster:
ml-research), against the same echo. Needs valgrind (apt-get install valgrind); about two
minutes per figure.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.responses import Response

DEFAULT = ("pod-create-legacy-gpu", "pod-create-with-resourceclaims")
WARM = 50
"""Reviews sent before counting: caches filled, the interpreter's specializations made."""


def _serve(target: str, fixture: str, count: int, mutate: str) -> None:
    """In the child: build the server, warm it up, then send `count` reviews inside
    `_operator.call` (the only function callgrind collects in)."""
    import _operator

    import uvloop

    from tests.helpers import load_fixture, review
    from tests.inprocess import Connection, raw_request

    body = orjson.dumps(review(fixture, namespace=mutate) if mutate else load_fixture(fixture))
    raw = raw_request(body)
    if mutate:
        raw = raw.replace(b"POST /validate", b"POST /mutate", 1)
    import uvicorn
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    from app.config import Settings
    from app.logs import logging_config
    from app.server.protocol import LimitedHttpToolsProtocol
    from app.transport.app import create_app

    loop = uvloop.new_event_loop()
    protocol_class: type[HttpToolsProtocol] = HttpToolsProtocol
    app: Any
    # Each server logs as it does when served (its lines to /dev/null): the webhook with its
    # JSON lines and no access log (`serve`: a line per denied review), the echo with uvicorn's
    # warnings only and no access log (as perf-ratio runs it).
    sys.stderr = open(os.devnull, "w")  # noqa: SIM115 (the child's for its lifetime)
    if target == "webhook":
        settings = Settings()
        uvicorn.Config(app=None, log_config=logging_config(settings.log_level), access_log=False)
        protocol_class, app = LimitedHttpToolsProtocol, create_app(settings)
    else:
        uvicorn.Config(app=None, log_level="warning", access_log=False)
        app = _echo(mutate)
    connection = Connection(app, protocol_class, loop)
    connection.loop.run_until_complete(connection.send(raw, WARM))
    if not connection.transport.written.startswith(b"HTTP/1.1 200 OK\r\n"):
        print(
            f"{target} did not answer 200: {connection.transport.written[:200]!r}",
            file=sys.__stderr__,
        )
        os._exit(1)
    _operator.call(lambda: loop.run_until_complete(connection.send(raw, count)))
    os._exit(0)  # (no teardown to count or wait for)


def _echo(mutate: str) -> object:
    from fastapi.responses import Response

    app = FastAPI()

    @app.post("/mutate" if mutate else "/validate")
    async def answer(request: Request) -> Response:
        review = orjson.loads(await request.body())
        req = review["request"]
        _ = (req["kind"], req["namespace"], req["object"]["spec"]["containers"])
        out = {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "response": {"uid": req["uid"], "allowed": True},
        }
        return Response(orjson.dumps(out), media_type="application/json")

    return app


def _count(target: str, fixture: str, count: int, mutate: str) -> float:
    """Thousands of instructions per review of `target` (webhook or echo)."""
    command = [
        "valgrind",
        "--tool=callgrind",
        "--collect-atstart=no",
        "--toggle-collect=_operator_call",
        "--callgrind-out-file=/dev/null",
        sys.executable,
        "-m",
        "tests.instructions",
        "--child",
        target,
        "--reviews",
        str(count),
        "--mutate",
        mutate,
        fixture,
    ]
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    found = re.search(r"Collected : (\d+)", done.stderr)
    if done.returncode or found is None:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-5:])
        sys.exit(f"{target} {fixture}: valgrind exited {done.returncode}:\n{tail}")
    return int(found.group(1)) / count / 1000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("fixtures", nargs="*", default=list(DEFAULT))
    parser.add_argument("--reviews", type=int, default=500)
    parser.add_argument("--mutate", default="", metavar="NAMESPACE")
    parser.add_argument("--child", choices=("webhook", "echo"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.reviews < 1:
        parser.error("--reviews must be at least 1")
    if args.child:
        _serve(args.child, args.fixtures[0], args.reviews, args.mutate)
        return 0
    if shutil.which("valgrind") is None:
        print("needs valgrind: apt-get install valgrind", file=sys.stderr)
        return 2
    where = f"/mutate in {args.mutate}" if args.mutate else "/validate"
    print(f"| review ({where}) | webhook, k instr. | echo, k instr. | ratio |")
    print("| --- | ---: | ---: | ---: |")
    for fixture in args.fixtures:
        ours = _count("webhook", fixture, args.reviews, args.mutate)
        echo = _count("echo", fixture, args.reviews, args.mutate)
        print(f"| {fixture} | {ours:.1f} | {echo:.1f} | {ours / echo:.3f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
