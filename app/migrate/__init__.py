"""`dra-webhook migrate`: the webhook's translation applied to the manifests kept in Git.

Translation at admission changes pods, not the YAML a GitOps tool applies; this package rewrites
that YAML with the same code (`app.translation`: mappings, MIG patterns, init and sidecar
semantics, claim names, caps), so a migration ends in a reviewed pull request rather than in
drift. `documents` cuts a YAML stream into documents and round-trips one; `edit` changes only
the nodes that differ; `objects` translates one object; `versions` moves a DRA object written
for resource.k8s.io/v1beta1 or v1beta2 to v1 as the API server converts it, and `advice` says
what to write for what no conversion carries; `files` rewrites one file; `patches` prints
strategic-merge patches for kustomize overlays and Helm charts; `run` walks the paths and
decides what is printed, written and returned. `served` says which resource.k8s.io versions a
target cluster serves, for `check` and `report`. docs/migrate.md is the user's guide.
"""

from __future__ import annotations

from pathlib import Path
from typing import TextIO

from app.cluster.static import StaticSource, named_release
from app.cluster.view import ClusterView
from app.config import load_policy
from app.migrate.objects import Rules
from app.migrate.run import Options, migrate, report

__all__ = ["Options", "Rules", "main", "migrate", "report"]


def main(
    options: Options,
    config: Path | None,
    cluster_file: Path | None,
    stdout: TextIO,
    stderr: TextIO,
    *,
    kubernetes_version: str | None = None,
) -> int:
    """Run `migrate` with the policy file and the static cluster file the server reads, for
    the release named (what it keeps: app.cluster.release)."""
    view = ClusterView()
    StaticSource(view, cluster_file).load()
    named_release(view, kubernetes_version)
    rules = Rules.build(load_policy(config), view)
    return report(migrate(options, rules), options, stdout, stderr)
