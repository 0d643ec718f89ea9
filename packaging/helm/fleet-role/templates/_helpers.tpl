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
{{- with .Values.config.extra }}

{{ . | trim }}
{{- end }}
{{ end }}
