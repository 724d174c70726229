"""Plain-dict helpers over raw Kubernetes JSON: no client model classes, no I/O."""
