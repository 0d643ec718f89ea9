{{/* The labels of every object of the release; no managed-by, since
the Ansible role applies the same render (packaging/kubernetes). */}}
{{- define "fleet-role.labels" -}}
app.kubernetes.io/name: fleet-role-controller
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/part-of: fleet-role
{{- end }}

{{/* The Pods' labels, the Deployment's selector (never changed). */}}
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

{{/* controller.toml, from .Values.config. */}}
{{- define "fleet-role.config" -}}
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
{{- with .Values.holds }}
{{- if or .kured.namespace .upgradePlansNamespace .prometheus.url }}

[holds]
{{- if .kured.namespace }}
kured_daemonset = {{ printf "%s/%s" .kured.namespace .kured.name | quote }}
kured_lock_annotation = {{ .kured.lockAnnotation | quote }}
kured_lock_ttl = {{ .kured.lockTTL | quote }}
kured_concurrency = {{ .kured.concurrency | int }}
{{- end }}
{{- with .upgradePlansNamespace }}
upgrade_plans_namespace = {{ . | quote }}
{{- end }}
{{- if .prometheus.url }}
prometheus_url = {{ .prometheus.url | quote }}
alert_filter_regexp = {{ .prometheus.alertFilterRegexp | quote }}
alert_filter_match_only = {{ .prometheus.alertFilterMatchOnly }}
alert_firing_only = {{ .prometheus.alertFiringOnly }}
{{- end }}
{{- end }}
{{- end }}
{{- if or .Values.notify.urls .Values.notify.secretName }}

[notify]
urls = [{{ range $i, $u := .Values.notify.urls }}{{ if $i }}, {{ end }}{{ $u | quote }}{{ end }}]
{{- if .Values.notify.secretName }}
urls_file = "/etc/fleet-role-notify/urls"
{{- end }}
{{- end }}
{{- with .Values.config.extra }}

{{ . | trim }}
{{- end }}
{{ end }}
