{{/* The image both the installer and checkpointd's static pod run. */}}
{{- define "stickyip.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* "true" when the chart grants nodes the right to write the placement
index (rbac.yaml, deploy/placement/nodes): placement.grantNodes "always", or
"auto" once the API server has the index policy (templates/placement.yaml
says why, and the NOTES how to see it in effect first). */}}
{{- define "stickyip.placementGrant" -}}
{{- $mode := .Values.placement.grantNodes -}}
{{- if eq $mode "always" -}}true
{{- else if and (eq $mode "auto") (lookup "admissionregistration.k8s.io/v1" "ValidatingAdmissionPolicy" "" "stickyip-placement-index") -}}true
{{- else -}}false
{{- end -}}
{{- end -}}
