{{/*
overlaylab.fullname: the release name, truncated to 40 characters so that pod names
(<fullname>-churner-<k>) and their DNS labels stay under 63. The Python side
(controller/backends/hosting.py) names pods and Services the same way.
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

{{/* overlaylab.podSecurity: every pod runs as uid 10001 with the runtime's seccomp profile
(Pod Security Standard "restricted"). */}}
{{- define "overlaylab.podSecurity" -}}
securityContext:
  runAsNonRoot: true
  runAsUser: 10001
  runAsGroup: 10001
  fsGroup: 10001
  seccompProfile: {type: RuntimeDefault}
{{- end -}}

{{/* overlaylab.containerSecurity: every container: no privilege escalation, no capabilities, a
read-only root filesystem (writable paths are volumes). */}}
{{- define "overlaylab.containerSecurity" -}}
securityContext:
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: true
  runAsNonRoot: true
  capabilities: {drop: [ALL]}
{{- end -}}

{{/* overlaylab.tmp: the writable /tmp of a container with a read-only root filesystem. */}}
{{- define "overlaylab.tmpVolume" -}}
- name: tmp
  emptyDir: {sizeLimit: 64Mi}
{{- end -}}

{{/* overlaylab.pki ROLE: the run's certificate for ROLE, mounted at /pki (tls.enabled). */}}
{{- define "overlaylab.pkiVolume" -}}
- name: pki
  secret:
    secretName: {{ include "overlaylab.fullname" .root }}-tls-{{ .role }}
    defaultMode: 0440
{{- end -}}

{{/* overlaylab.pods: the names of every peer pod (the controller's Role is limited to them). */}}
{{- define "overlaylab.pods" -}}
{{- $name := include "overlaylab.fullname" . -}}
{{- $pods := list -}}
{{- range $k := until (int .Values.peers.replicas) }}{{ $pods = append $pods (printf "%s-peer-%d" $name $k) }}{{ end -}}
{{- range $k := until (int .Values.peers.churners) }}{{ $pods = append $pods (printf "%s-churner-%d" $name $k) }}{{ end -}}
{{- toJson $pods -}}
{{- end -}}

{{/* overlaylab.webToken: the web token (templates/web-token.yaml) as a file, its path in
$OVERLAYLAB_WEB_TOKEN_FILE: webTokenEnv (an env entry), webTokenMount, webTokenVolume. */}}
{{- define "overlaylab.webTokenEnv" -}}
- {name: OVERLAYLAB_WEB_TOKEN_FILE, value: /run/web-token/token}
{{- end -}}
{{- define "overlaylab.webTokenMount" -}}
- {name: web-token, mountPath: /run/web-token, readOnly: true}
{{- end -}}
{{- define "overlaylab.webTokenVolume" -}}
- name: web-token
  secret:
    secretName: {{ include "overlaylab.fullname" . }}-web-token
    defaultMode: 0440
{{- end -}}
