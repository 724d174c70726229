"""The migrate tests' `migrate` fixture (run `dra-webhook migrate` in-process from tmp_path)."""

from tests.migrate.conftest import migrate

__all__ = ["migrate"]
