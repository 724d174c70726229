"""Reading the files a user names (a policy, a cluster dump, manifests): one line naming the
file and what is wrong with it, never a traceback, whatever the bytes."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from app.errors import ConfigError


def read_text(path: Path, error: type[ConfigError], what: str = "") -> str:
    """The UTF-8 text of `path`; `error("<what> <path>: <why>")` when it cannot be read or
    is not UTF-8 (Kubernetes manifests and policy files always are)."""
    where = f"{what} {path}" if what else str(path)
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise error(
            f"{where}: not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset {exc.start})"
        ) from None
    except OSError as exc:
        raise error(f"{where}: {exc.strerror or exc}") from None


def one_line(exc: BaseException) -> str:
    """An error's text on one line (a YAML parser's error spans several, with a caret)."""
    return " ".join(str(exc).split())


MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")


def manifest_files(paths: Iterable[Path]) -> list[Path]:
    """The files named, and the YAML and JSON files in the folders named (recursively, in name
    order, hidden ones left out), as `kubectl apply -R -f` reads a folder."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            found += sorted(
                p
                for p in path.rglob("*")
                if p.suffix.lower() in MANIFEST_SUFFIXES
                and p.is_file()
                and not any(part.startswith(".") for part in p.relative_to(path).parts)
            )
        else:
            found.append(path)
    return list(dict.fromkeys(found))
