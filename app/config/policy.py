"""The policy file: what the webhook enforces, validated once at startup.

Every error names the key that is wrong (`namespaceModes.label: ...`), so a bad ConfigMap fails
the rollout with a message an operator can act on.
"""

from __future__ import annotations

import hashlib
import re
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal, NamedTuple

import yaml
from pydantic import (
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from app.config import validation
from app.config.base import LabelSelector
from app.config.base import StrictModel as _Model
from app.config.dra_only import DraOnly
from app.config.exceptions import PolicyException, unique_exception_names
from app.config.files import Place, read_text, yaml_problem
from app.config.preemption import Preemption
from app.config.sharing import DEFAULT_SHARING, SharingRule, unique_names
from app.config.tenancy import (
    AdminAccess,
    DeviceClassAllowList,
    DeviceTaints,
    unique_allow_list_names,
)
from app.config.translation import Translation
from app.errors import PolicyError
from app.regex import RegexError, compile_re2


class NamespaceModes(_Model):
    """How a namespace opts in: one label whose value picks the mode."""

    label: str = "gpu-mode"
    dra_only: str = Field(default="dra-only", alias="draOnly")
    translate: str = "translate"
    audit: str = "audit"


class LegacyResources(_Model):
    """Extended resources served by device plugins: exact names and shell-style patterns."""

    names: tuple[str, ...] = (
        "nvidia.com/gpu",
        "nvidia.com/gpu.shared",
        "nvidia.com/mig-*",
        "amd.com/gpu",
        "gpu.intel.com/*",
        "habana.ai/gaudi",
    )
    annotations: tuple[str, ...] = ("gpu-fraction", "gpu-memory", "gpu-fraction-num-devices")
    """Pod annotations through which a scheduler hands out GPU shares (KAI Scheduler's):
    a pod or template carrying one is reported like a legacy request."""

    @field_validator("names")
    @classmethod
    def _not_empty(cls, names: tuple[str, ...]) -> tuple[str, ...]:
        for name in names:
            if not name or name.strip() != name:
                raise ValueError(f"invalid resource name or pattern {name!r}")
        return names


_GROUP_REF = re.compile(r"\$(\d+)")
"""`$n` in a mapping's deviceClassName or selectors (admin text, not user input)."""


class MappingRule(_Model):
    """One rule from an extended-resource name to a DRA device request.

    `resource` is an exact name, or with `pattern: true` a full-match regular expression (RE2
    syntax: it runs on names from users, so in linear time) whose groups may be used as `$1`,
    `$2`... in `deviceClassName` and `selectors`.
    """

    resource: str
    pattern: bool = False
    device_class_name: str = Field(alias="deviceClassName")
    selectors: tuple[str, ...] = ()
    leave_to_scheduler: bool | None = Field(default=None, alias="leaveToScheduler")
    """In translate namespaces, leave the names this rule matches as written where a DeviceClass
    maps them to this rule's class (the scheduler serves them, KEP-5004): true, false (always
    translate), or unset (`translation.leaveMapped` decides). docs/translation.md says when."""

    @model_validator(mode="after")
    def _regex_compiles(self) -> MappingRule:
        if self.leave_to_scheduler and self.selectors:
            raise ValueError(
                f"mapping {self.resource!r}: leaveToScheduler needs a rule without selectors "
                "(the scheduler's claim for an extended resource has none)"
            )
        if self.pattern:
            try:
                groups = compile_re2(self.resource).groups
            except RegexError as exc:
                raise ValueError(f"resource pattern {self.resource!r}: {exc}") from None
            for text in (self.device_class_name, *self.selectors):
                for ref in _GROUP_REF.findall(text):
                    if len(ref) > 3 or int(ref) > groups:
                        raise ValueError(
                            f"resource pattern {self.resource!r} has {groups} group(s), "
                            f"but ${ref} is used"
                        )
        return self


DEFAULT_MAPPINGS = (
    MappingRule(resource="nvidia.com/gpu", deviceClassName="gpu.nvidia.com"),
    MappingRule(
        resource="nvidia.com/mig-(.+)",
        pattern=True,
        deviceClassName="mig.nvidia.com",
        selectors=('device.attributes["gpu.nvidia.com"].profile == "$1"',),
    ),
    MappingRule(resource="amd.com/gpu", deviceClassName="gpu.amd.com"),
)


FailureMode = Literal["open", "closed"]


class StaleView(_Model):
    """What a check does once the cluster view of a kind it reads is stale.

    Stale: the live source has been out of sync with the API server for that kind longer than
    the configured bound (or has not listed it yet). Until then checks run on the last good state.
    open: the check is skipped and the response says so in a warning; closed: the request is
    denied (503) with a message naming the stale kinds.
    """

    default: FailureMode = "open"
    checks: dict[str, FailureMode] = Field(default_factory=dict)
    """Per check name (as the pipeline registers it, e.g. `dra-only`), overriding `default`."""

    def mode(self, check: str) -> FailureMode:
        return self.checks.get(check, self.default)


class Failure(_Model):
    """What a check does when it cannot decide (namespace unknown, cluster view stale, a bug)."""

    unknown_namespace: FailureMode = Field(default="closed", alias="unknownNamespace")
    """The API server only sends namespaces that carry the mode label, so a namespace the view
    cannot find, even after asking the API server, is an opted-in one: allowing it unchecked
    would let new namespaces skip dra-only."""
    internal_error: FailureMode = Field(default="open", alias="internalError")
    template_create: FailureMode = Field(default="closed", alias="templateCreate")
    """open: admit the pod untranslated with a warning; closed: deny it (the controller retries)."""
    stale_view: StaleView = Field(default_factory=StaleView, alias="staleView")
    cel_budget: FailureMode = Field(default="closed", alias="celBudget")
    """A review whose CEL work exceeds `cel.reviewBudget` (selector compiles and evaluations) or
    `cel.compileBudget` (new expressions, their compile time, the CEL text it carries): closed
    denies it naming the budget; open allows it with a warning that it was not checked."""


CheckAction = Literal["off", "warn", "deny"]


class SelectorChecks(_Model):
    """Checks of the CEL selectors in ResourceClaims, ResourceClaimTemplates and DeviceClasses.

    A selector that does not compile is denied (one that only needs a library this engine lacks
    is warned about instead). `unsatisfiable` is what happens to a
    request no device in the cluster's ResourceSlices can satisfy (the scheduler would leave the
    pod Pending without a word); `unsatisfiableByMode` overrides it per namespace mode (the mode
    label's meaning: `dra-only`, `translate`, `audit`).
    """

    unsatisfiable: CheckAction = "warn"
    unsatisfiable_by_mode: dict[Literal["dra-only", "translate", "audit"], CheckAction] = Field(
        default_factory=dict, alias="unsatisfiableByMode"
    )


class RuleMatch(_Model):
    """Which requests a rule looks at."""

    kinds: tuple[str, ...] = Field(min_length=1)
    """Kinds by name: Pod, Deployment, ResourceClaim, ResourceClaimTemplate, DeviceClass..."""
    operations: tuple[Literal["CREATE", "UPDATE"], ...] = ("CREATE", "UPDATE")
    namespace_selector: LabelSelector | None = Field(default=None, alias="namespaceSelector")


class Rule(_Model):
    """An admin rule in CEL, like a ValidatingAdmissionPolicy validation.

    `expression` sees `object`, `oldObject`, `request` and `namespaceObject` and must be true for
    the object to pass; otherwise `message` (or the string `messageExpression` evaluates to) is
    the denial or the warning, per `action`.
    """

    name: str = Field(min_length=1)
    match: RuleMatch
    expression: str = Field(min_length=1)
    message: str = ""
    message_expression: str = Field(default="", alias="messageExpression")
    action: Literal["deny", "warn"] = "deny"


class CompileBudget(_Model):
    """What one review may compile (`cel.compileBudget`): new CEL expressions, by count and by
    CPU time, each bound checked before every compile, and the CEL text its object may carry,
    checked before any is parsed. An expression already compiled (in the cache) is free. Past
    a bound the review is answered at once, per `failure.celBudget`, naming the bound.

    Claims people write ask for a handful of new expressions (a few milliseconds); a claim
    within the API server's limits may carry 8,192, which took seconds to compile."""

    expressions: int = Field(default=128, ge=1)
    """New expressions one review may compile."""
    milliseconds: int = Field(default=50, ge=1)
    """CPU time one review may spend compiling new expressions. Checked before each compile,
    so the last one may end past it (a selector is at most 10 KiB)."""
    text_bytes: int = Field(default=64 * 1024, ge=1, alias="bytes")
    """Bytes of CEL text (its distinct selectors) the object under review may carry."""


class Cel(_Model):
    """The CEL engine and what is checked with it."""

    backend: Literal["cel-expr-python", "cel-python"] = "cel-expr-python"
    cache_size: int = Field(default=4096, ge=1, alias="cacheSize")
    """Compiled expressions kept (LRU); a new one compiles once, then costs a lookup."""
    selectors: SelectorChecks = Field(default_factory=SelectorChecks)
    review_budget: int = Field(default=1_000_000, ge=1, alias="reviewBudget")
    """CEL cost units one review may spend checking selectors: each selector evaluation costs
    its estimated cost, each selector compiled for the review 1,000. About 0.5 s of work here;
    a claim of ordinary size spends a few thousand (failure.celBudget says what happens past)."""
    compile_budget: CompileBudget = Field(default_factory=CompileBudget, alias="compileBudget")
    rules: tuple[Rule, ...] = ()

    @field_validator("rules")
    @classmethod
    def _unique_names(cls, rules: tuple[Rule, ...]) -> tuple[Rule, ...]:
        seen: set[str] = set()
        for rule in rules:
            if rule.name in seen:
                raise ValueError(f"rule name {rule.name!r} is used twice")
            seen.add(rule.name)
        return rules


DeviceLimit = Annotated[int, Field(ge=0, strict=True)]
CapacityLimit = Annotated[
    str, Field(pattern=r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E)?$", strict=True)
]
"""A capacity amount (160Gi, 100): a non-negative decimal quantity."""
ANY_CLASS = "*"
"""In a per-DeviceClass limit map: every class the map does not name."""


class Quota(_Model):
    """Limits on DRA use in the namespaces an entry selects.

    Per-class maps are keyed by DeviceClass name, `*` for every class not named. When several
    entries select a namespace, every one applies: the strictest limit of each kind wins.
    """

    name: str = Field(min_length=1)
    namespace_selector: LabelSelector = Field(
        default_factory=LabelSelector, alias="namespaceSelector"
    )
    action: Literal["deny", "warn"] = "deny"
    max_devices_per_request: dict[str, DeviceLimit] = Field(
        default_factory=dict, alias="maxDevicesPerRequest"
    )
    max_devices_per_claim: dict[str, DeviceLimit] = Field(
        default_factory=dict, alias="maxDevicesPerClaim"
    )
    max_devices_per_namespace: dict[str, DeviceLimit] = Field(
        default_factory=dict, alias="maxDevicesPerNamespace"
    )
    max_claims_per_namespace: DeviceLimit | None = Field(
        default=None, alias="maxClaimsPerNamespace"
    )
    max_capacity_per_claim: dict[str, dict[str, CapacityLimit]] = Field(
        default_factory=dict, alias="maxCapacityPerClaim"
    )
    """DeviceClass (or `*`) -> capacity name -> the most one claim may ask for (count x amount,
    after the devices' requestPolicy rounding), e.g. {gpu-shared.nvidia.com: {memory: 40Gi}}."""
    max_capacity_per_namespace: dict[str, dict[str, CapacityLimit]] = Field(
        default_factory=dict, alias="maxCapacityPerNamespace"
    )
    """The same, summed over the namespace's claims and the pods a workload will run."""
    allow_allocation_mode_all: bool = Field(default=False, alias="allowAllocationModeAll")
    """allocationMode: All asks for an unknown number of devices: denied where a device limit
    of this entry applies to its class, unless this is true."""


class OpaqueConfig(_Model):
    """Driver parameters passed to the driver as they are (`opaque` device config)."""

    driver: str = Field(min_length=1)
    parameters: dict[str, Any]


class DeviceToleration(_Model):
    """A toleration for device taints, as in a claim's request."""

    key: str | None = None
    operator: Literal["Exists", "Equal"] = "Equal"
    value: str | None = None
    effect: Literal["NoSchedule", "NoExecute"] | None = None
    toleration_seconds: int | None = Field(default=None, alias="tolerationSeconds")


class ClassDefaults(_Model):
    """What is added to a request for this DeviceClass when the user left it out."""

    selectors: tuple[str, ...] = ()
    """CEL expressions appended to the request's selectors (those not already there)."""
    config: tuple[OpaqueConfig, ...] = ()
    """Added for the request when the claim has no opaque config for that driver."""
    tolerations: tuple[DeviceToleration, ...] = ()
    """Set when the request has no tolerations."""
    count: int | None = Field(default=None, ge=1)
    """Set when the request has neither allocationMode nor count."""


class NamespaceClass(_Model):
    """The DeviceClass a request gets when it names none, in the namespaces selected."""

    namespace_selector: LabelSelector = Field(
        default_factory=LabelSelector, alias="namespaceSelector"
    )
    device_class_name: str = Field(alias="deviceClassName", min_length=1)


class Defaults(_Model):
    """DeviceClass defaults for ResourceClaims and ResourceClaimTemplates (on CREATE)."""

    device_classes: dict[str, ClassDefaults] = Field(default_factory=dict, alias="deviceClasses")
    namespace_device_classes: tuple[NamespaceClass, ...] = Field(
        default=(), alias="namespaceDeviceClasses"
    )
    """The first entry whose selector matches the namespace wins."""


class Policy(_Model):
    """The whole policy file."""

    namespace_modes: NamespaceModes = Field(default_factory=NamespaceModes, alias="namespaceModes")
    legacy_resources: LegacyResources = Field(
        default_factory=LegacyResources, alias="legacyResources"
    )
    mappings: tuple[MappingRule, ...] = Field(default_factory=lambda: DEFAULT_MAPPINGS)
    sharing: tuple[SharingRule, ...] = Field(default_factory=lambda: DEFAULT_SHARING)
    """GPU-sharing names -> consumable-capacity requests (app.config.sharing, docs/sharing.md)."""
    dra_only: DraOnly = Field(default_factory=DraOnly, alias="draOnly")
    translation: Translation = Field(default_factory=Translation)
    failure: Failure = Field(default_factory=Failure)
    exempt_namespaces: Annotated[tuple[str, ...], Field(alias="exemptNamespaces")] = (
        "kube-system",
    )
    cel: Cel = Field(default_factory=Cel)
    quotas: tuple[Quota, ...] = ()
    resource_quotas: Literal["deny", "warn", "ignore"] = Field(
        default="deny", alias="resourceQuotas"
    )
    """Workloads over a native ResourceQuota's device limit: denied, warned, or not checked."""
    defaults: Defaults = Field(default_factory=Defaults)
    exceptions: tuple[PolicyException, ...] = ()
    """Objects allowed (dra-only) or left untranslated (translate) until a date."""
    workload_kinds: tuple[dict[str, Any], ...] = Field(default=(), alias="workloadKinds")
    """More workload kinds for the catalogue (app/workloads/catalogue.yaml has the format);
    validated when the pipeline is built, with the key's path on error."""
    admin_access: AdminAccess = Field(default_factory=AdminAccess, alias="adminAccess")
    """Who may turn DRA admin access on for a namespace (app.config.tenancy, docs/tenancy.md)."""
    device_classes: tuple[DeviceClassAllowList, ...] = Field(default=(), alias="deviceClasses")
    """Which DeviceClasses the namespaces each entry selects may use (docs/tenancy.md)."""
    preemption: Preemption = Field(default_factory=Preemption)
    """Saying what moving to DRA takes away: the scheduler's preemption (app.config.preemption)."""
    device_taints: DeviceTaints = Field(default_factory=DeviceTaints, alias="deviceTaints")
    """Who may write a DeviceTaintRule that evicts pods (app.config.tenancy, docs/operations.md)."""

    _exception_names = field_validator("exceptions")(unique_exception_names)
    _allow_list_names = field_validator("device_classes")(unique_allow_list_names)

    @field_validator("sharing")
    @classmethod
    def _sharing_unique(cls, rules: tuple[SharingRule, ...]) -> tuple[SharingRule, ...]:
        return unique_names(rules)

    @field_validator("quotas")
    @classmethod
    def _quota_names_unique(cls, quotas: tuple[Quota, ...]) -> tuple[Quota, ...]:
        seen: set[str] = set()
        for quota in quotas:
            if quota.name in seen:
                raise ValueError(f"quota name {quota.name!r} is used twice")
            seen.add(quota.name)
        return quotas


DEFAULT_POLICY_RESOURCE = "default-policy.yaml"


class Origin(NamedTuple):
    """Where the policy in force was read, and the first 12 hex digits of the sha256 of its
    text: what the startup log line and `dra_webhook_policy_info` name."""

    source: str
    digest: str


def load_policy(path: Path | None = None) -> Policy:
    """Read and validate the policy file; None reads the embedded default."""
    return load_policy_with_origin(path)[0]


def load_policy_with_origin(path: Path | None = None) -> tuple[Policy, Origin]:
    """The policy and where it came from (a file, the chart's ConfigMap in a file, the
    embedded default)."""
    if path is None:
        text = resources.files("app.config").joinpath(DEFAULT_POLICY_RESOURCE).read_text()
        source = "embedded default policy"
    else:
        text = read_text(path, PolicyError, "policy file")
        source = str(path)
    return _parse(text, source)


class _Loader(yaml.SafeLoader):
    """YAML without implicit timestamps: `until: 2026-13-01` reaches the model as text, which
    refuses it naming the key, instead of failing inside the YAML parser."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


POLICY_KEY = "policy.yaml"
"""The key of the chart's ConfigMap that holds the policy."""


def parse_policy(text: str, source: str = "policy") -> Policy:
    """Validate policy YAML text; errors name the file and the key path (see `_parse`)."""
    return _parse(text, source)[0]


def _parse(
    text: str, source: str, file: str | None = None, place: Place | None = None
) -> tuple[Policy, Origin]:
    """Validate policy YAML text; every error is `file:line:column: ...` naming the key.

    The text may also be the chart's ConfigMap itself (`kubectl get configmap NAME -o yaml`): its
    `policy.yaml` is read, so a server run outside the cluster runs the policy the chart renders.
    `source` names it for the log (`cm.yaml (ConfigMap NAME, policy.yaml)`); `file` and `place`
    say where its lines are in the file, for errors.
    """
    file = source if file is None else file
    try:
        data: Any = yaml.load(text, Loader=_Loader)  # a SafeLoader
    except yaml.YAMLError as exc:
        raise PolicyError(str(yaml_problem(file, exc, text, place))) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise PolicyError(f"{source}: the top level must be a mapping, not {type(data).__name__}")
    if data.get("kind") == "ConfigMap" and data.get("apiVersion") == "v1":
        inner = (
            (data.get("data") or {}).get(POLICY_KEY) if isinstance(data.get("data"), dict) else None
        )
        if not isinstance(inner, str):
            raise PolicyError(f"{source}: a ConfigMap without data.{POLICY_KEY} (the chart's key)")
        name = (
            (data.get("metadata") or {}).get("name", "")
            if isinstance(data.get("metadata"), dict)
            else ""
        )
        inner_source = f"{source} (ConfigMap {name}, {POLICY_KEY})"
        inner_place = validation.literal_block(text, ("data", POLICY_KEY), _Loader)
        return _parse(inner, inner_source, source if inner_place else inner_source, inner_place)
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    try:
        return Policy.model_validate(data), Origin(source, digest)
    except ValidationError as exc:
        found = validation.problems(exc, Policy, file, text, _Loader)
        raise PolicyError("; ".join(str(validation.moved(p, place)) for p in found)) from None
