{{/*
overlaylab.fullname: the release name, truncated to 40 characters so that pod names
(<fullname>-churner-<k>) and their DNS labels stay under 63. The Python side
(controller/hosting.py) names pods and Services the same way.
*/}}
{{- define "overlaylab.fullname" -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}

{{/* overlaylab.labels: on every object; teardown deletes by overlaylab.io/run-id. */}}
{{- define "overlaylab.labels" -}}
app.kubernetes.io/name: overlaylab
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
overlaylab.io/run-id: {{ .Values.runId | quote }}
{{- end -}}

{{/* overlaylab.selectorLabels ROLE: stable labels a selector may match. */}}
{{- define "overlaylab.selectorLabels" -}}
app.kubernetes.io/name: overlaylab
app.kubernetes.io/instance: {{ .root.Release.Name }}
overlaylab.io/role: {{ .role }}
{{- end -}}

{{- define "overlaylab.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag }}
{{- end -}}

{{/* The pods' copy of the experiment (a ConfigMap), mounted at /config. */}}
{{- define "overlaylab.configVolume" -}}
- name: config
  configMap:
    name: {{ include "overlaylab.fullname" . }}-experiment
{{- end -}}

{{/* The results volume: the PVC, or a directory of the node (results.hostPath). */}}
{{- define "overlaylab.resultsVolume" -}}
- name: results
  {{- if .Values.results.hostPath }}
  hostPath:
    path: {{ .Values.results.hostPath }}
    type: Directory
  {{- else }}
  persistentVolumeClaim:
    claimName: {{ include "overlaylab.fullname" . }}-results
  {{- end }}
{{- end -}}
