"""CEL backends bound to the Kubernetes library."""
