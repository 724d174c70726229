"""CEL: engine backends, the Kubernetes CEL library, device values and the compile cache."""
