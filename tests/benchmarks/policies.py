"""Policies the benchmarks share (a helper module: no test module imports another)."""

THREE_RULES = """
cel:
  backend: {backend}
  rules:
    - name: owner-label
      match: {{kinds: [Pod, ResourceClaim]}}
      expression: has(object.metadata.labels) && "owner" in object.metadata.labels
      message: needs an owner label
    - name: no-host-network
      match: {{kinds: [Pod]}}
      expression: '!has(object.spec.hostNetwork) || !object.spec.hostNetwork'
      message: no host network
    - name: few-containers
      match: {{kinds: [Pod]}}
      expression: size(object.spec.containers) <= 8
      message: at most 8 containers
"""
"""Three admin rules on pods and claims, the `{backend}` CEL backend filled in."""
