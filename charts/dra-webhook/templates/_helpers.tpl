{{/*
Names are cut to 63 characters: the limit of a DNS label, and so of a Service name.
*/}}
{{- define "dra-webhook.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "dra-webhook.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
"<fullname>-<suffix>" within 63 characters: the full name is cut first, so the suffix survives
and names with different suffixes stay different. Argument: (list . "suffix").
*/}}
{{- define "dra-webhook.suffixed" -}}
{{- $root := index . 0 }}
{{- $suffix := index . 1 }}
{{- $base := include "dra-webhook.fullname" $root | trunc (int (sub 62 (len $suffix))) | trimSuffix "-" }}
{{- printf "%s-%s" $base $suffix }}
{{- end }}

{{- define "dra-webhook.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels every object carries. */}}
{{- define "dra-webhook.labels" -}}
helm.sh/chart: {{ include "dra-webhook.chart" . }}
{{ include "dra-webhook.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | trunc 63 | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: dra-webhook
{{- end }}

{{/* The labels that select the pods: never change them on upgrade. */}}
{{- define "dra-webhook.selectorLabels" -}}
app.kubernetes.io/name: {{ include "dra-webhook.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "dra-webhook.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "dra-webhook.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "dra-webhook.tlsSecretName" -}}
{{- default (include "dra-webhook.suffixed" (list . "tls")) .Values.certificates.secretName }}
{{- end }}

{{/* The serving Certificate's name (cert-manager mode), also used by inject-ca-from. */}}
{{- define "dra-webhook.servingCertificateName" -}}
{{- include "dra-webhook.suffixed" (list . "serving") }}
{{- end }}

{{/* The DNS names the API server may use for the Service. */}}
{{- define "dra-webhook.serviceDnsNames" -}}
{{- $svc := include "dra-webhook.fullname" . }}
{{- $ns := .Release.Namespace }}
{{- list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.cluster.local" $svc $ns) | toJson }}
{{- end }}

{{/* The policy's namespace modes, with the server's defaults for keys the values leave out. */}}
{{- define "dra-webhook.modeLabel" -}}
{{- $modes := .Values.policy.namespaceModes | default dict }}
{{- $modes.label | default "gpu-mode" }}
{{- end }}

{{- define "dra-webhook.modeValues" -}}
{{- $modes := .Values.policy.namespaceModes | default dict }}
{{- list ($modes.draOnly | default "dra-only") ($modes.translate | default "translate") ($modes.audit | default "audit") | toJson }}
{{- end }}

{{/*
Namespaces the webhooks never see: the release namespace and kube-system always (merged in
whatever the values say), then the policy's and the extra ones.
*/}}
{{- define "dra-webhook.exemptNamespaces" -}}
{{- $exempt := list .Release.Namespace "kube-system" }}
{{- $exempt = concat $exempt (.Values.policy.exemptNamespaces | default list) .Values.webhook.extraExemptNamespaces }}
{{- $exempt | uniq | toJson }}
{{- end }}

{{/*
The namespaceSelector of a namespaced entry: never the exempt namespaces; unless the entry is
"wide", only namespaces that opted in with the mode label. Argument: (list . wide).
*/}}
{{- define "dra-webhook.namespaceSelector" -}}
{{- $root := index . 0 }}
{{- $wide := index . 1 }}
namespaceSelector:
  matchExpressions:
    {{- if not $wide }}
    - key: {{ include "dra-webhook.modeLabel" $root | quote }}
      operator: In
      values: {{ include "dra-webhook.modeValues" $root }}
    {{- end }}
    - key: kubernetes.io/metadata.name
      operator: NotIn
      values: {{ include "dra-webhook.exemptNamespaces" $root }}
{{- end }}

{{/*
CEL (evaluated by the API server, never sent to us) that is true when a pod spec at the given
path asks for devices: an extended resource (any name with a "/" prefix: the legacy names, the
implicit deviceclass.resource.kubernetes.io/<class> ones, names a DeviceClass maps) in the
requests or limits of any container, init container or ephemeral container, or any DRA claim.
`object` is untyped here, so every optional field is guarded by has().
Argument: the CEL path of the pod spec, e.g. "object.spec".
*/}}
{{- define "dra-webhook.celUsesDevices" -}}
{{- $s := . -}}
{{- $parts := splitList "." $s -}}
{{- $guards := list -}}
{{- range $i, $_ := rest $parts -}}
{{- $guards = append $guards (printf "has(%s)" (slice $parts 0 (add $i 2) | join ".")) -}}
{{- end -}}
{{ join " && " $guards }} && (
  (has({{ $s }}.resourceClaims) && size({{ $s }}.resourceClaims) > 0) ||
  [
    has({{ $s }}.containers) ? {{ $s }}.containers : [],
    has({{ $s }}.initContainers) ? {{ $s }}.initContainers : [],
    has({{ $s }}.ephemeralContainers) ? {{ $s }}.ephemeralContainers : []
  ].exists(cs, cs.exists(c, has(c.resources) && (
    (has(c.resources.requests) && c.resources.requests.exists(r, r.contains('/'))) ||
    (has(c.resources.limits) && c.resources.limits.exists(r, r.contains('/'))) ||
    (has(c.resources.claims) && size(c.resources.claims) > 0)
  )))
)
{{- end }}

{{/*
"true" when the webhook runs in the cluster (a Deployment behind a Service, the default); empty
when webhook.url points the API server at a server outside it (development, the control-plane
tests), which needs only the webhook configurations, RBAC, the ServiceAccount and the policy.
*/}}
{{- define "dra-webhook.inCluster" -}}
{{- if not .Values.webhook.url }}true{{ end }}
{{- end }}

{{/*
The common fields of every webhook entry. Arguments: dict with root (.), path (/mutate or
/validate), failurePolicy, timeoutSeconds.
*/}}
{{- define "dra-webhook.clientConfig" -}}
admissionReviewVersions: ["v1"]
matchPolicy: Equivalent
failurePolicy: {{ .failurePolicy }}
timeoutSeconds: {{ .timeoutSeconds }}
clientConfig:
  {{- if .root.Values.webhook.url }}
  url: {{ printf "%s%s" (trimSuffix "/" .root.Values.webhook.url) .path | quote }}
  {{- else }}
  service:
    name: {{ include "dra-webhook.fullname" .root }}
    namespace: {{ .root.Release.Namespace }}
    path: {{ .path }}
    port: {{ .root.Values.service.port }}
  {{- end }}
  {{- if .caBundle }}
  caBundle: {{ .caBundle }}
  {{- end }}
{{- end }}

{{/* Workloads whose pod template is at spec.template.spec. */}}
{{- define "dra-webhook.workloadRules" -}}
- apiGroups: ["apps"]
  apiVersions: ["v1"]
  operations: ["CREATE", "UPDATE"]
  resources: ["deployments", "replicasets", "statefulsets", "daemonsets"]
  scope: Namespaced
- apiGroups: ["batch"]
  apiVersions: ["v1"]
  operations: ["CREATE", "UPDATE"]
  resources: ["jobs"]
  scope: Namespaced
- apiGroups: [""]
  apiVersions: ["v1"]
  operations: ["CREATE", "UPDATE"]
  resources: ["replicationcontrollers"]
  scope: Namespaced
{{- end }}

{{/* The operators' workload kinds (webhook.operatorWorkloads), any version: the webhook reads
them by group and kind. */}}
{{- define "dra-webhook.operatorRules" -}}
{{- range . }}
- apiGroups: [{{ .apiGroup | quote }}]
  apiVersions: ["*"]
  operations: ["CREATE", "UPDATE"]
  resources: {{ toJson .resources }}
  scope: Namespaced
{{- end }}
{{- end }}

{{/*
"true" when the chart renders the dra-only rule as a ValidatingAdmissionPolicy
(templates/admissionpolicy.yaml): admissionPolicy.enabled, unless the policy allows names that
DeviceClasses map (policy.draOnly.mappedNames: allow, or its deprecated form
allowDeviceClassExtendedResources: true), which only the webhook can check. Then pods in
dra-only and audit namespaces need the webhook only for quotas and rules.
*/}}
{{- define "dra-webhook.admissionPolicyEnforces" -}}
{{- $policy := .Values.policy | default dict }}
{{- $mapped := or (eq (dig "draOnly" "mappedNames" "deny" $policy) "allow") (dig "draOnly" "allowDeviceClassExtendedResources" false $policy) }}
{{- /* nearMisses: deny needs an edit distance, which CEL has not: the webhook enforces */}}
{{- $near := eq (dig "draOnly" "nearMisses" "warn" $policy) "deny" }}
{{- if and .Values.admissionPolicy.enabled (not $mapped) (not $near) }}true{{ end }}
{{- end }}

{{/*
The minor releases whose kube-scheduler preempts lower-priority pods for DRA devices, space
separated: app/cluster/release.py PREEMPTS_FOR_DRA (tests/chart/test_chart_preemption.py keeps
the two equal). None yet.
*/}}
{{- define "dra-webhook.preemptsForDRA" -}}
{{- end }}

{{/*
Whether the admission policy says what a bare Pod that may preempt loses on DRA claims:
policy.preemption.warn, and a release (the one the chart is rendered for) whose scheduler does
not preempt for DRA devices.
*/}}
{{- define "dra-webhook.preemptionWarned" -}}
{{- $policy := .Values.policy | default dict }}
{{- $minor := toString (semver .Capabilities.KubeVersion.Version).Minor }}
{{- if and (dig "preemption" "warn" true $policy) (not (has $minor (splitList " " (include "dra-webhook.preemptsForDRA" .)))) }}true{{ end }}
{{- end }}

{{/*
Fails unless a policy string can be pasted between single quotes into CEL. Argument: (list key value).
*/}}
{{- define "dra-webhook.celSafe" -}}
{{- $value := toString (index . 1) }}
{{- if regexMatch "['\\\n\r]" $value }}
{{- fail (printf "%s: %q cannot be rendered into the ValidatingAdmissionPolicy (quote, backslash or line break); set admissionPolicy.enabled=false" (index . 0) $value) }}
{{- end }}
{{- end }}

{{/*
A namespaceSelector from parts: the mode values a namespace must be labelled with (none: any),
more label requirements (matchLabels and matchExpressions, e.g. a quota entry's selector), and
the exempt namespaces always left out. Argument: (list . modes selector) where selector is a
LabelSelector dict or empty.
*/}}
{{- define "dra-webhook.selectorFor" -}}
{{- $root := index . 0 }}
{{- $modes := index . 1 }}
{{- $selector := index . 2 | default dict }}
namespaceSelector:
  {{- with $selector.matchLabels }}
  matchLabels: {{ toJson . }}
  {{- end }}
  matchExpressions:
    {{- if $modes }}
    - key: {{ include "dra-webhook.modeLabel" $root | quote }}
      operator: In
      values: {{ toJson $modes }}
    {{- end }}
    {{- range $selector.matchExpressions }}
    - {{ toJson . }}
    {{- end }}
    - key: kubernetes.io/metadata.name
      operator: NotIn
      values: {{ include "dra-webhook.exemptNamespaces" $root }}
{{- end }}

{{/*
A label selector as CEL over a label map (a CEL expression of type map(string, string)), with
the meaning of a webhook's namespaceSelector/objectSelector: every matchLabels pair and every
expression must hold; empty: true. Argument: (list key labels selector), key naming the values
for errors.
*/}}
{{- define "dra-webhook.celSelector" -}}
{{- $where := index . 0 }}
{{- $labels := index . 1 }}
{{- $selector := index . 2 | default dict }}
{{- $terms := list }}
{{- range $key, $value := $selector.matchLabels | default dict }}
{{- include "dra-webhook.celSafe" (list $where $key) }}
{{- include "dra-webhook.celSafe" (list $where $value) }}
{{- $terms = append $terms (printf "('%s' in %s && %s['%s'] == '%s')" $key $labels $labels $key $value) }}
{{- end }}
{{- range $selector.matchExpressions | default list }}
{{- include "dra-webhook.celSafe" (list $where .key) }}
{{- $values := list }}
{{- range .values | default list }}
{{- include "dra-webhook.celSafe" (list $where .) }}
{{- $values = append $values (printf "'%s'" .) }}
{{- end }}
{{- $in := printf "('%s' in %s && %s['%s'] in [%s])" .key $labels $labels .key (join ", " $values) }}
{{- if eq .operator "In" }}{{ $terms = append $terms $in }}
{{- else if eq .operator "NotIn" }}{{ $terms = append $terms (printf "!%s" $in) }}
{{- else if eq .operator "Exists" }}{{ $terms = append $terms (printf "('%s' in %s)" .key $labels) }}
{{- else if eq .operator "DoesNotExist" }}{{ $terms = append $terms (printf "!('%s' in %s)" .key $labels) }}
{{- else }}{{ fail (printf "%s: operator %q is not In, NotIn, Exists or DoesNotExist" $where .operator) }}
{{- end }}
{{- end }}
{{- if $terms }}{{ join " && " $terms }}{{ else }}true{{ end }}
{{- end }}

{{/*
CEL that is true when a policy exception (policy.exceptions) selects the object: its kind, its
namespace's labels, the labels of the pods it makes. No date: CEL in the API server has no
clock, so the objects an exception selects are left to the webhook, which judges `until`.
*/}}
{{- define "dra-webhook.celExcepted" -}}
{{- $policy := .Values.policy | default dict }}
{{- $any := list }}
{{- range $i, $exception := get $policy "exceptions" | default list }}
{{- $where := printf "policy.exceptions[%d]" $i }}
{{- $terms := list }}
{{- with $exception.kinds }}
{{- $kinds := list }}
{{- range . }}{{ include "dra-webhook.celSafe" (list $where .) }}{{ $kinds = append $kinds (printf "'%s'" .) }}{{ end }}
{{- $terms = append $terms (printf "request.kind.kind in [%s]" (join ", " $kinds)) }}
{{- end }}
{{- $terms = append $terms (include "dra-webhook.celSelector" (list (printf "%s.namespaceSelector" $where) "variables.namespaceLabels" $exception.namespaceSelector)) }}
{{- $terms = append $terms (include "dra-webhook.celSelector" (list (printf "%s.objectSelector" $where) "variables.podLabels" $exception.objectSelector)) }}
{{- $any = append $any (printf "(%s)" (join " && " $terms)) }}
{{- end }}
{{- if $any }}{{ join " || " $any }}{{ else }}false{{ end }}
{{- end }}

{{/* Seconds between the webhook's reads of the report's PolicyReports; 0: no gauge. */}}
{{- define "dra-webhook.migrationGaugeInterval" -}}
{{- if and .Values.report.enabled .Values.report.policyReports }}
{{- .Values.report.gaugeIntervalSeconds }}
{{- else }}0{{ end }}
{{- end }}

{{/*
MiB one worker needs at least: its baseline (memoryPerWorker.requestMi), the cache budget, the
request bodies it may buffer and 64 MiB of headroom (chart README, "Memory and workers").
*/}}
{{- define "dra-webhook.memoryNeededMi" -}}
{{- add .Values.memoryPerWorker.requestMi .Values.memoryPerWorker.cacheBudgetMi (div (int64 .Values.limits.maxBufferedBytes) 1048576) 64 -}}
{{- end }}

{{/*
The container's memory limit, checked: `resources.limits.memory` as it is, else
memoryPerWorker.limitMi times workers. One source of truth for the cache budget: the server is
given memoryPerWorker.cacheBudgetMi (DRA_WEBHOOK_CACHE_MAX_BYTES), and whichever limit the
container runs with must hold every worker's need (dra-webhook.memoryNeededMi), so `helm
template` fails with the arithmetic, whichever of the settings was changed. A memory request
above the limit, which the API server would refuse, fails here too.
*/}}
{{- define "dra-webhook.memoryLimit" -}}
{{- $workers := int .Values.workers }}
{{- $need := include "dra-webhook.memoryNeededMi" . | int }}
{{- $sum := printf "requestMi (%d) + cacheBudgetMi (%d) + limits.maxBufferedBytes (%d MiB) + 64 MiB of headroom = %d MiB" (int .Values.memoryPerWorker.requestMi) (int .Values.memoryPerWorker.cacheBudgetMi) (div (int64 .Values.limits.maxBufferedBytes) 1048576) $need }}
{{- $set := (.Values.resources.limits | default dict).memory }}
{{- $limit := "" }}
{{- $limitMi := 0 }}
{{- if $set }}
{{- $limitMi = include "dra-webhook.quantityMi" (list "resources.limits.memory" $set) | int64 }}
{{- $all := mul $workers $need }}
{{- if lt $limitMi (int64 $all) }}
{{- fail (printf "resources.limits.memory (%v = %d MiB) cannot hold %d worker(s) x (memoryPerWorker.%s) = %d MiB: raise it to at least %dMi, unset it (memoryPerWorker.limitMi times workers), or lower memoryPerWorker.cacheBudgetMi or workers" $set $limitMi $workers $sum $all $all) }}
{{- end }}
{{- $limit = toString $set }}
{{- else }}
{{- if lt (int .Values.memoryPerWorker.limitMi) $need }}
{{- fail (printf "memoryPerWorker.limitMi (%d) cannot hold %s: raise limitMi or lower cacheBudgetMi" (int .Values.memoryPerWorker.limitMi) $sum) }}
{{- end }}
{{- $limitMi = mul $workers .Values.memoryPerWorker.limitMi | int64 }}
{{- $limit = printf "%dMi" $limitMi }}
{{- end }}
{{- with (.Values.resources.requests | default dict).memory }}
{{- $requestMi := include "dra-webhook.quantityMi" (list "resources.requests.memory" .) | int64 }}
{{- if gt $requestMi $limitMi }}
{{- fail (printf "resources.requests.memory (%v = %d MiB) is above the memory limit (%s = %d MiB): the API server refuses such a pod" . $requestMi $limit $limitMi) }}
{{- end }}
{{- end }}
{{- $limit -}}
{{- end }}

{{/*
MiB of a Kubernetes memory quantity, rounded down: digits with an optional fraction, then a
binary (Ki..Ei) or decimal (k..E, m) suffix or an exponent (e6). Anything else fails, naming
the value. Argument: (list "the value's name" value).
*/}}
{{- define "dra-webhook.quantityMi" -}}
{{- $name := index . 0 }}
{{- $value := toString (index . 1) }}
{{- $number := regexFind "^[0-9]+(\\.[0-9]+)?" $value }}
{{- $suffix := trimPrefix $number $value }}
{{- $units := dict "" 1.0 "m" 0.001 "k" 1e3 "M" 1e6 "G" 1e9 "T" 1e12 "P" 1e15 "E" 1e18 "Ki" 1024.0 "Mi" 1048576.0 "Gi" 1073741824.0 "Ti" 1099511627776.0 "Pi" 1125899906842624.0 "Ei" 1152921504606846976.0 }}
{{- $scale := 0.0 }}
{{- if not $number }}
{{- else if hasKey $units $suffix }}
{{- $scale = get $units $suffix | float64 }}
{{- else if regexMatch "^[eE][+]?[0-9]{1,2}$" $suffix }}
{{- $scale = 1.0 }}
{{- range until (regexFind "[0-9]+" $suffix | int) }}
{{- $scale = mulf $scale 10 }}
{{- end }}
{{- end }}
{{- if eq $scale 0.0 }}
{{- fail (printf "%s (%s) is not a memory quantity (e.g. 512Mi, 2Gi, 1G)" $name $value) }}
{{- end }}
{{- floor (divf (mulf (float64 $number) $scale) 1048576) | int64 -}}
{{- end }}

{{/*
CEL: the value of a Namespace's resource.kubernetes.io/admin-access label, or "<unset>" (no
label value can be that: values are letters, digits, '-', '_' and '.'). `object` is untyped in
a webhook's matchConditions, so each field is guarded by has(); oldObject is null on CREATE.
Argument: "object" or "oldObject".
*/}}
{{- define "dra-webhook.celAdminAccessLabel" -}}
{{- $o := . -}}
{{- $key := "resource.kubernetes.io/admin-access" -}}
{{- if eq $o "oldObject" -}}
(request.operation == 'CREATE' || !has(oldObject.metadata.labels) || !('{{ $key }}' in oldObject.metadata.labels) ? '<unset>' : oldObject.metadata.labels['{{ $key }}'])
{{- else -}}
(!has({{ $o }}.metadata.labels) || !('{{ $key }}' in {{ $o }}.metadata.labels) ? '<unset>' : {{ $o }}.metadata.labels['{{ $key }}'])
{{- end -}}
{{- end }}

{{/* CEL: true when a Namespace write sets, changes or removes the admin-access label. */}}
{{- define "dra-webhook.celAdminAccessChange" -}}
{{ include "dra-webhook.celAdminAccessLabel" "oldObject" }} != {{ include "dra-webhook.celAdminAccessLabel" "object" }}
{{- end }}

{{/* "true" when the policy's admin-access guard is on (policy.adminAccess.enabled). */}}
{{- define "dra-webhook.adminAccessGuard" -}}
{{- if dig "adminAccess" "enabled" false (.Values.policy | default dict) }}true{{ end }}
{{- end }}

{{/*
CEL: true when a ResourceClaim (object.spec) or ResourceClaimTemplate (object.spec.spec) has a
request asking for adminAccess (objects arrive as v1: matchPolicy Equivalent).
*/}}
{{- define "dra-webhook.celAsksAdminAccess" -}}
(request.kind.kind == 'ResourceClaimTemplate'
  ? (has(object.spec.spec) && has(object.spec.spec.devices) && has(object.spec.spec.devices.requests) ? object.spec.spec.devices.requests : [])
  : (has(object.spec) && has(object.spec.devices) && has(object.spec.devices.requests) ? object.spec.devices.requests : [])
).exists(r, has(r.exactly) && has(r.exactly.adminAccess) && r.exactly.adminAccess == true)
{{- end }}

{{/*
Managed certificates (certificates.mode: managed): the server makes, rotates and serves its own
pair and keeps the caBundle current (app/cluster/certificates.py). Not with webhook.caBundle
(a server outside the cluster that brings its own pair). "true" or "".
*/}}
{{- define "dra-webhook.managedCerts" -}}
{{- if and (eq .Values.certificates.mode "managed") (not .Values.webhook.caBundle) }}true{{ end }}
{{- end }}

{{/* The Secret the managed certificates live in, and the Lease that elects their rotator. */}}
{{- define "dra-webhook.managedSecretName" -}}
{{- default (include "dra-webhook.suffixed" (list . "certs")) .Values.certificates.secretName }}
{{- end }}

{{- define "dra-webhook.managedLeaseName" -}}
{{- include "dra-webhook.suffixed" (list . "certs") }}
{{- end }}
