"""Kubernetes object names, checked as the API server checks them (apimachinery validation).

A name taken from a review is attacker-controlled when someone other than the API server can
reach the webhook's port: before it is used anywhere (an API path, a log line, a cache key) it
must be what the API server would have accepted. Namespaces are DNS-1123 labels; the objects
this webhook reviews (pods, workloads, claims, DeviceClasses) have DNS-1123 subdomain names.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["DNS_LABEL_MAX", "DNS_SUBDOMAIN_MAX", "is_dns_label", "is_dns_subdomain", "shown"]

DNS_LABEL_MAX: Final = 63
DNS_SUBDOMAIN_MAX: Final = 253
_LABEL: Final = re.compile(r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?")
_SUBDOMAIN: Final = re.compile(rf"{_LABEL.pattern}(?:\.{_LABEL.pattern})*")
"""Labels joined by '.' (one match, not a split and a match per label: every review's name)."""


def is_dns_label(name: str) -> bool:
    """An RFC 1123 label: at most 63 lower-case letters, digits and '-', alphanumeric at both
    ends (IsDNS1123Label: what a namespace name must be)."""
    return 0 < len(name) <= DNS_LABEL_MAX and _LABEL.fullmatch(name) is not None


def is_dns_subdomain(name: str) -> bool:
    """An RFC 1123 subdomain: labels joined by '.', at most 253 characters (IsDNS1123Subdomain)."""
    return 0 < len(name) <= DNS_SUBDOMAIN_MAX and _SUBDOMAIN.fullmatch(name) is not None


def shown(name: str, limit: int = 80) -> str:
    """`name` quoted and cut for a message (a name that failed validation can be any size)."""
    text = name if len(name) <= limit else name[: limit - 3] + "..."
    return repr(text)
