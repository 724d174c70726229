"""dra-webhook: admission webhook that carries GPU workloads from device plugins to DRA."""

__version__ = "0.1.0"
