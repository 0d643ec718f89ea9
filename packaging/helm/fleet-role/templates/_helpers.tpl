{{/* The release's name for its objects, as Helm's own starter chart makes
it: the release's name where it holds the chart's ("fleet-role", whose
objects keep the names fleet-role-controller, fleet-role-operator and so
on that the Ansible role, the uninstall and the docs use), else
<release>-fleet-role; fullnameOverride over both. Every object's name,
cluster-scoped ones and those in kube-node-lease or a hold's namespace
too, starts with it, so two releases never clash. Cut to 40 characters,
which leaves room for the longest suffix (-controller-heartbeats) within
a name's 63. */}}
{{- define "fleet-role.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end }}

{{/* The controller's name: its Deployment's, its ClusterRole's and
Role's, and its ServiceAccount's unless serviceAccount.name says. */}}
{{- define "fleet-role.controller" -}}
{{- printf "%s-controller" (include "fleet-role.fullname" .) -}}
{{- end }}

{{/* The controller's ServiceAccount: serviceAccount.name, else the
controller's name, made unless serviceAccount.create is false. */}}
{{- define "fleet-role.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "fleet-role.controller" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end }}

{{/* The labels of every object of the release; no managed-by, since
the Ansible role applies the same render (packaging/kubernetes). */}}
{{- define "fleet-role.labels" -}}
app.kubernetes.io/name: fleet-role-controller
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/part-of: fleet-role
{{- end }}

{{/* The Pods' labels, the Deployment's selector (never changed: a
selector is immutable, and an upgrade from an earlier chart must keep
it). Two releases in one namespace would select each other's Pods; they
would share the status ConfigMap and the regrade Lease too, which the
controller names itself: one release a namespace. */}}
{{- define "fleet-role.selector" -}}
app.kubernetes.io/name: fleet-role-controller
{{- end }}

{{/* The image's tag: image.tag, else the appVersion make chart packages
the chart with; never none, never a "latest" (it moves under a running
Deployment, and a node keeps whichever it pulled first). */}}
{{- define "fleet-role.tag" -}}
{{- $tag := .Values.image.tag | default .Chart.AppVersion -}}
{{- if not $tag -}}
{{- fail "image.tag is required (fleet-role's version, as make -s image-tag prints it), or install the chart make chart packages" -}}
{{- end -}}
{{- if eq $tag "latest" -}}
{{- fail "image.tag latest names no version: give fleet-role's version (make -s image-tag)" -}}
{{- end -}}
{{- $tag -}}
{{- end }}

{{/* One TOML value: a string quoted, a number an integer, a list of
strings an array, a bool as it is. */}}
{{- define "fleet-role.tomlValue" -}}
{{- if kindIs "string" . -}}{{ . | quote }}
{{- else if kindIs "bool" . -}}{{ . }}
{{- else if kindIs "slice" . -}}[{{ range $i, $v := . }}{{ if $i }}, {{ end }}{{ $v | quote }}{{ end }}]
{{- else -}}{{ . | int }}
{{- end -}}
{{- end }}

{{/* Lines "key = value" of a dict of TOML keys to values, sorted, a key
whose value is unset (null, "" or an empty list) left out: the
controller's default then. */}}
{{- define "fleet-role.tomlKeys" -}}
{{- range $k, $v := . }}
{{- if not (or (kindIs "invalid" $v) (and (kindIs "string" $v) (eq $v "")) (and (kindIs "slice" $v) (empty $v))) }}
{{ $k }} = {{ include "fleet-role.tomlValue" $v }}
{{- end }}
{{- end }}
{{- end }}

{{/* A TOML table of a dict of keys to values, left out where every value
is unset. */}}
{{- define "fleet-role.tomlTable" -}}
{{- $keys := include "fleet-role.tomlKeys" .keys -}}
{{- if $keys }}

[{{ .name }}]
{{- $keys }}
{{- end }}
{{- end }}

{{/* controller.toml's keys outside any table, from .Values.config. */}}
{{- define "fleet-role.configRoot" -}}
# fleet-role controller configuration (fleet-role config default controller
# lists every key and its default), from the chart's values.
version = 1
dry_run = {{ .Values.config.dryRun }}
namespace = {{ .Release.Namespace | quote }}
period = {{ .Values.config.period | quote }}
cooldown = {{ .Values.config.cooldown | quote }}
probe_period = {{ .Values.config.probePeriod | quote }}
runner_selector = {{ .Values.config.runnerSelector | quote }}
listen_address = ":{{ .Values.metrics.port }}"
{{- with .Values.config }}
{{- include "fleet-role.tomlKeys" (dict
  "lease_duration" .leaseDuration
  "dead_after" .deadAfter
  "write_gap_budget" .writeGapBudget
  "min_pass_interval" .minPassInterval
  "drain_timeout" .drainTimeout) }}
{{- /* Note: "" is a value here (no failure domain), null the default. */}}
{{- if not (kindIs "invalid" .failureDomainLabel) }}
failure_domain_label = {{ .failureDomainLabel | quote }}
{{- end }}
{{- end }}
{{- end }}

{{/* controller.toml's tables, from the typed values: each where a value
of it is set. */}}
{{- define "fleet-role.configTables" -}}
{{- with .Values.config.leaderElection }}
{{- include "fleet-role.tomlTable" (dict "name" "leader_election" "keys" (dict
  "lease_duration" .leaseDuration "renew_deadline" .renewDeadline "retry_period" .retryPeriod)) }}
{{- end }}
{{- with .Values.config.verdicts }}
{{- include "fleet-role.tomlTable" (dict "name" "verdicts" "keys" (dict
  "window" .window "fsync_limit" .fsyncLimit "read_limit" .readLimit
  "wal_fsync_p99_limit" .walFsyncP99Limit "backend_commit_p99_limit" .backendCommitP99Limit)) }}
{{- end }}
{{- with .Values.config.maintenanceWindow }}
{{- include "fleet-role.tomlTable" (dict "name" "maintenance_window" "keys" (dict
  "days" .days "start" .start "end" .end "time_zone" .timeZone)) }}
{{- end }}
{{- with .Values.config.remediation }}
{{- include "fleet-role.tomlTable" (dict "name" "remediation" "keys" (dict
  "max_retries" .maxRetries "retry_period" .retryPeriod "min_healthy_period" .minHealthyPeriod)) }}
{{- end }}
{{- with .Values.config.bounds }}
{{- include "fleet-role.tomlTable" (dict "name" "bounds" "keys" (dict
  "snapshot" .snapshot "runners" .runners "drain" .drain "promote" .promote
  "join" .join "gates" .gates "step_down" .stepDown "remove_member" .removeMember
  "member_gone" .memberGone "uncordon" .uncordon "rollback" .rollback
  "remove_fallback" .removeFallback "remove_by_voter" .removeByVoter)) }}
{{- end }}
{{- with .Values.holds }}
{{- $kured := dict }}
{{- if eq .kured.namespace "off" }}
{{- $kured = dict "kured_daemonset" "off" }}
{{- else if .kured.namespace }}
{{- $kured = dict "kured_daemonset" (printf "%s/%s" .kured.namespace .kured.name)
  "kured_lock_annotation" .kured.lockAnnotation "kured_lock_ttl" .kured.lockTTL
  "kured_concurrency" .kured.concurrency }}
{{- end }}
{{- $prometheus := dict }}
{{- if .prometheus.url }}
{{- $prometheus = dict "prometheus_url" .prometheus.url "alert_filter_regexp" .prometheus.alertFilterRegexp
  "alert_filter_match_only" .prometheus.alertFilterMatchOnly "alert_firing_only" .prometheus.alertFiringOnly }}
{{- end }}
{{- if or .kured.namespace .upgradePlansNamespace .prometheus.url }}

[holds]
{{- include "fleet-role.tomlKeys" $kured }}
{{- include "fleet-role.tomlKeys" (dict "upgrade_plans_namespace" .upgradePlansNamespace) }}
{{- include "fleet-role.tomlKeys" $prometheus }}
{{- if and .prometheus.url (kindIs "string" .prometheus.alertIgnoreRegexp) }}
alert_ignore_regexp = {{ include "fleet-role.tomlValue" .prometheus.alertIgnoreRegexp }}
{{- end }}
{{- if and .prometheus.url (kindIs "bool" .prometheus.alertIgnoreOutgoing) }}
alert_ignore_outgoing = {{ .prometheus.alertIgnoreOutgoing }}
{{- end }}
{{- end }}
{{- end }}
{{- if or .Values.notify.urls .Values.notify.secretName }}

[notify]
urls = [{{ range $i, $u := .Values.notify.urls }}{{ if $i }}, {{ end }}{{ $u | quote }}{{ end }}]
{{- if .Values.notify.secretName }}
urls_file = "/etc/fleet-role-notify/urls"
{{- end }}
{{- with .Values.notify }}
{{- include "fleet-role.tomlKeys" (dict "retry_backoff" .retryBackoff "max_retry_backoff" .maxRetryBackoff "max_queued" .maxQueued) }}
{{- end }}
{{- end }}
{{- end }}

{{/* controller.toml: the keys of the values, config.extra after the keys
outside any table (so that its own such keys stay outside), then the
tables of the values. A key or table of config.extra that the values
render too would be a duplicate, which the controller refuses, crash
looping: the render fails instead, naming it. */}}
{{- define "fleet-role.config" -}}
{{- $root := include "fleet-role.configRoot" . -}}
{{- $tables := include "fleet-role.configTables" . -}}
{{- with .Values.config.extra }}
{{- $extra := fromToml . }}
{{- if hasKey $extra "Error" }}
{{- fail (printf "config.extra is not TOML: %s" (get $extra "Error")) }}
{{- end }}
{{- $rendered := fromToml (printf "%s\n%s" $root $tables) }}
{{- range $key := keys $extra | sortAlpha }}
{{- if hasKey $rendered $key }}
{{- fail (printf "config.extra sets %q, which the chart's values set too (a duplicate the controller refuses): set it in the values (config.*, holds, notify) or only in config.extra" $key) }}
{{- end }}
{{- end }}
{{- end }}
{{- $root }}
{{- with .Values.config.extra }}

{{ . | trim }}
{{- end }}
{{- $tables }}
{{ end }}

{{/* The Pods' affinity: .Values.affinity, and with preferNonVoters a
preference for Nodes that are not voters (the Node label
fleet-role.io/role): a swap drains the voter it takes out, and a
controller there would be evicted in the middle of its own swap. */}}
{{- define "fleet-role.affinity" -}}
{{- $affinity := deepCopy (.Values.affinity | default dict) -}}
{{- if .Values.preferNonVoters -}}
{{- $node := get $affinity "nodeAffinity" | default dict -}}
{{- $preferred := get $node "preferredDuringSchedulingIgnoredDuringExecution" | default list -}}
{{- $notVoter := dict "key" "fleet-role.io/role" "operator" "NotIn" "values" (list "voter") -}}
{{- $term := dict "weight" 100 "preference" (dict "matchExpressions" (list $notVoter)) -}}
{{- $_ := set $node "preferredDuringSchedulingIgnoredDuringExecution" (append $preferred $term) -}}
{{- $_ := set $affinity "nodeAffinity" $node -}}
{{- end -}}
{{- toYaml $affinity -}}
{{- end }}

{{/* The Pods' spread: topologySpreadConstraints, else (null) one replica
a Node where the scheduler can, so that a drain or a Node lost takes
one replica, not the leader and its standby together. */}}
{{- define "fleet-role.topologySpreadConstraints" -}}
{{- if kindIs "invalid" .Values.topologySpreadConstraints -}}
- maxSkew: 1
  topologyKey: kubernetes.io/hostname
  whenUnsatisfiable: ScheduleAnyway
  labelSelector:
    matchLabels:
      {{- include "fleet-role.selector" . | nindent 6 }}
{{- else -}}
{{- toYaml .Values.topologySpreadConstraints -}}
{{- end -}}
{{- end }}

{{/* The controller's default [bounds] (config.DefaultController), by the
values' names, as JSON: what a bound left unset is. tests/helm holds them
to the controller's. */}}
{{- define "fleet-role.boundDefaults" -}}
{{- dict "snapshot" "10m" "runners" "1h" "drain" "15m" "promote" "10m" "join" "10m"
  "gates" "15m" "stepDown" "5m" "removeMember" "10m" "memberGone" "15m" "uncordon" "15m"
  "rollback" "5m" "removeFallback" "2m" "removeByVoter" "5m" | toJson }}
{{- end }}

{{/* The whole seconds of a Go duration ("1h30m", "90s", "1.5h"), rounded
up. */}}
{{- define "fleet-role.seconds" -}}
{{- $unit := dict "h" 3600.0 "m" 60.0 "s" 1.0 "ms" 0.001 "us" 0.000001 "µs" 0.000001 "ns" 0.000000001 }}
{{- $total := 0.0 }}
{{- range regexFindAll "[0-9.]+(ns|us|µs|ms|s|m|h)" . -1 }}
{{- $total = addf $total (mulf (regexFind "^[0-9.]+" . | float64) (get $unit (regexReplaceAll "^[0-9.]+" . ""))) }}
{{- end }}
{{- $total | ceil | int }}
{{- end }}
