"""The `dra-webhook` command: serve | certs | check | report | migrate.

The grammar is :mod:`app.cli.parser`; ``serve`` and its checks before start are
:mod:`app.cli.serve`; the commands that judge manifests or a cluster are :mod:`app.cli.commands`.
Here: dispatch, and every mistake said in one line with exit status 2.
"""

from __future__ import annotations

import sys

from pydantic import ValidationError

from app.certs import mint
from app.cli import commands, parser
from app.errors import ConfigError

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    args, extra = parser.build().parse_known_args(argv)
    if extra:  # said by the command's parser, so its help is the one named
        args.command_parser.error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        if args.command == "check":
            return commands.run_check(args)
        if args.command == "report":
            return commands.run_report(args)
        if args.command == "migrate":
            return commands.run_migrate(args)
        if args.command == "certs":
            try:
                minted = mint(args.out, tuple(args.dns), tuple(args.ip), days=args.days)
            except OSError as exc:
                raise ConfigError(
                    f"cannot write certificates to {args.out.absolute()}: {exc.strerror}; "
                    "pass --out a writable folder"
                ) from None
            print(f"wrote {CA_FILES} to {minted.directory}", file=sys.stderr)
            print(minted.ca_bundle)
            return 0
        from app.cli.serve import run_serve

        return run_serve(args)
    except ConfigError as exc:
        print(f"dra-webhook: {exc}", file=sys.stderr)
        return 2
    except ValidationError as exc:
        print(f"dra-webhook: invalid setting: {_one_line(exc)}", file=sys.stderr)
        return 2


def _one_line(exc: ValidationError) -> str:
    """pydantic's errors as one line: `--workers 0: must be at least 1`, per setting."""
    parts = []
    for error in exc.errors():
        name = ".".join(str(p) for p in error["loc"])
        flag = f"--{name.replace('_', '-')}" if name in _FLAGS else f"DRA_WEBHOOK_{name.upper()}"
        parts.append(f"{flag} {error.get('input')!r}: {error['msg']}")
    return "; ".join(parts)


_FLAGS = frozenset({"host", "port", "health_port", "cert_dir", "workers", "metrics_dir"})
"""Settings that `serve` takes as flags (the others only from DRA_WEBHOOK_* variables)."""


CA_FILES = "ca.crt, ca.key, tls.crt, tls.key"
