"""Policies: pure functions (request, context) -> Result. No HTTP, no Kubernetes client, no I/O."""
