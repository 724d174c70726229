"""Cases shared by the tenancy tests: the webhook's admin-access guard
(tests/policies/test_tenancy_admin_access.py), the chart's ValidatingAdmissionPolicy twin and
its webhook entry's matchConditions (tests/chart/test_chart_tenancy.py), which must agree."""

from __future__ import annotations

from typing import Any, NamedTuple

from app.config.tenancy import ADMIN_ACCESS_LABEL

LABEL = ADMIN_ACCESS_LABEL
LABEL_PATH = f"metadata.labels[{LABEL}]"

ADMIN_ACCESS = {
    "enabled": True,
    "users": ["alice"],
    "groups": ["platform-admins"],
    "namespaceSelector": {"matchLabels": {"tier": "ops"}},
    "requestAccess": "file a ticket in the PLATFORM queue",
}
"""The policy's adminAccess section these cases are judged by."""


class LabelChange(NamedTuple):
    id: str
    old: dict[str, str] | None
    """The labels before; None: a CREATE."""
    new: dict[str, str]
    user: str
    groups: tuple[str, ...]
    allowed: bool
    said: str = ""
    """What the denial says of the change, after the label's path."""

    @property
    def changes(self) -> bool:
        before = None if self.old is None else self.old.get(LABEL)
        return before != self.new.get(LABEL)


LABEL_CHANGES = [
    LabelChange("set by a tenant", {"team": "a"}, {"team": "a", LABEL: "true"}, "mallory", (),
                False, 'set to "true" (it was not set)'),
    LabelChange("set to false by a tenant", {}, {LABEL: "false"}, "mallory", (), False,
                'set to "false" (it was not set)'),
    LabelChange("changed by a tenant", {LABEL: "false"}, {LABEL: "true"}, "mallory", (), False,
                'changed from "false" to "true"'),
    LabelChange("removed by a tenant", {LABEL: "true"}, {}, "mallory", (), False,
                'removed (it was "true")'),
    LabelChange("created with it by a tenant", None, {LABEL: "true"}, "mallory", (), False,
                'set to "true" (it was not set)'),
    LabelChange("set by a listed user", {}, {LABEL: "true"}, "alice", (), True),
    LabelChange("removed by a listed group", {LABEL: "true"}, {}, "bob", ("platform-admins",),
                True),
    LabelChange("created with it by a listed group", None, {LABEL: "true"}, "bob",
                ("platform-admins",), True),
    LabelChange("other labels changed by a tenant", {LABEL: "true"}, {LABEL: "true", "x": "y"},
                "mallory", (), True),
    LabelChange("created without it by a tenant", None, {"team": "c"}, "mallory", (), True),
    LabelChange("a group named like the user", {}, {LABEL: "true"}, "platform-admins", (),
                False, 'set to "true" (it was not set)'),
]  # fmt: skip


def namespace_object(name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}
