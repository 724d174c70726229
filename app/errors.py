"""Every exception dra-webhook defines, and what the boundary answers for each.

    DraWebhookError
    ├── ReviewError           the HTTP request is not a usable AdmissionReview -> HTTP 400
    ├── ObjectShapeError      the object does not parse as its kind -> validating: denied with the
    │                         field path (422 Invalid); mutating: allowed unchanged
    ├── ConfigError           the process settings or the policy file are invalid -> startup fails
    │   ├── PolicyError       the policy file, with the key that is wrong
    │   └── ClusterFileError  the static cluster file, with the item that is wrong
    └── TemplateCreateError   the API server refused a ResourceClaimTemplate -> per failure policy
        └── TemplateConflictError  one of that name exists with other content -> always denied

Anything else raised while answering a review is a bug: the boundary logs it with the request uid
and answers per the configured failure policy, never with a stack trace or an HTTP 500.
"""

from __future__ import annotations


class DraWebhookError(Exception):
    """Base of every error this project raises on purpose."""


class ReviewError(DraWebhookError):
    """The request body is not a usable AdmissionReview; answered with HTTP 400 and this text."""


class ObjectShapeError(DraWebhookError):
    """A field of the admitted object has the wrong type or an unparsable value."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message


class ConfigError(DraWebhookError, ValueError):
    """Configuration is invalid; the message names the file and the key."""


class PolicyError(ConfigError):
    """The policy file is unreadable or invalid."""


class ClusterFileError(ConfigError):
    """The static cluster file is unreadable or holds an invalid object."""


class TemplateCreateError(DraWebhookError):
    """Creating a ResourceClaimTemplate failed; the message carries the API server's reason.

    `refused`: the API server answered and refused this template (admission denied it, it is
    invalid, the webhook may not create it): asking again cannot help. Otherwise (a timeout, an
    unreachable or overloaded server) a retry may.
    """

    def __init__(self, message: str, *, refused: bool = False) -> None:
        super().__init__(message)
        self.refused = refused


class TemplateConflictError(TemplateCreateError):
    """A ResourceClaimTemplate of the name translation needs exists, but is not the one it built
    (not labelled as managed by dra-webhook, or another spec); the message says which and why."""
