"""`migrate` over one file of 100 documents (run: ``make bench`` or ``-k migrate``).

Half are Deployments asking for `nvidia.com/gpu`, half ConfigMaps: the cost of a rewrite (a
round-trip load, edit and dump of each Deployment, the others copied as text) and of a second run
over the result (every document loaded, nothing changed). Results in docs/benchmarks.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from app.cluster.view import ClusterView
from app.config import load_policy
from app.migrate.files import Templates, rewrite
from app.migrate.objects import Rules

DEPLOYMENT = """\
---
# team {i}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: trainer-{i}
  namespace: ml
spec:
  replicas: 2
  selector:
    matchLabels: {{app: trainer-{i}}}
  template:
    metadata:
      labels: {{app: trainer-{i}}}
    spec:
      containers:
        - name: cuda
          image: "nvcr.io/nvidia/pytorch:24.01-py3"
          resources:
            limits:
              cpu: "4"
              nvidia.com/gpu: {count}   # whole GPUs
            requests:
              memory: 16Gi
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: settings-{i}
data:
  epochs: "10"
"""
TEXT = "".join(DEPLOYMENT.format(i=i, count=1 + i % 4) for i in range(50))


def _rules() -> Rules:
    return Rules.build(load_policy(None), ClusterView())


def test_bench_migrate_rewrites_100_documents(benchmark: Any) -> None:
    rules = _rules()
    result = benchmark(lambda: rewrite(Path("m.yaml"), TEXT, rules, Templates(rules), apart=False))
    assert result.after != TEXT and not result.problems


def test_bench_migrate_second_run_over_100_documents(benchmark: Any) -> None:
    rules = _rules()
    once = rewrite(Path("m.yaml"), TEXT, rules, Templates(rules), apart=False).after
    result = benchmark(lambda: rewrite(Path("m.yaml"), once, rules, Templates(rules), apart=False))
    assert result.after == once
