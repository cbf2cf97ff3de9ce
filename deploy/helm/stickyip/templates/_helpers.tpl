{{/* The image both the installer and checkpointd's static pod run. */}}
{{- define "stickyip.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
