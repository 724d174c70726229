"""Configuration: process settings from the environment, policy rules from a YAML file.

`Settings` (pydantic-settings, env prefix `DRA_WEBHOOK_`) says how the process runs; `Policy`
(a YAML file, validated at startup) says what the webhook enforces. Both are built once and passed
down; nothing reads the environment anywhere else.
"""

from app.config.policy import Policy, load_policy
from app.config.settings import Settings
from app.errors import PolicyError

__all__ = ["Policy", "PolicyError", "Settings", "load_policy"]
