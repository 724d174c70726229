"""CEL: engine backends, the Kubernetes CEL library, device values, cost and the compile cache.

The language only; which devices a class + selectors match is :mod:`app.devices`, built on it.
"""
