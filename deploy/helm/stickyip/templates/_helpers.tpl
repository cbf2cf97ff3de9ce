{{/* The image both the installer and checkpointd's static pod run. */}}
{{- define "stickyip.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* "true" when the chart grants nodes the right to write their NodeRecords
(nodes/rbac.yaml, deploy/placement/nodes): placement.grantNodes "always", or
"auto" once the API server has the stickyip-node-records policy
(templates/placement.yaml says why, and the NOTES how to see it in effect
first). */}}
{{- define "stickyip.placementGrant" -}}
{{- $mode := .Values.placement.grantNodes -}}
{{- if eq $mode "always" -}}true
{{- else if and (eq $mode "auto") (lookup "admissionregistration.k8s.io/v1" "ValidatingAdmissionPolicy" "" "stickyip-node-records") -}}true
{{- else -}}false
{{- end -}}
{{- end -}}

{{/* One file of deploy/placement, as a document of its own: (list $ path).
Only the lines marked "# placement.statefulSets" change, with that value. */}}
{{- define "stickyip.placementFile" -}}
{{- $root := index . 0 }}
{{- $path := index . 1 }}
---
# From deploy/placement/{{ trimPrefix "files/placement/" $path }}
{{- $body := $root.Files.Get $path }}
{{- if $root.Values.placement.statefulSets }}
{{- $body = replace "expression: \"''\" # placement.statefulSets" (printf "expression: \"'%s'\" # placement.statefulSets" $root.Values.placement.statefulSets) $body }}
{{- $body = replace "matchExpressions: [{key: stickyip.io/statefulsets, operator: Exists}] # placement.statefulSets: []" "matchExpressions: [] # placement.statefulSets" $body }}
{{- $body = replace "matchExpressions: [{key: stickyip.io/statefulsets, operator: DoesNotExist}] # placement.statefulSets: none" "matchExpressions: [{key: stickyip.io/statefulsets, operator: Exists}, {key: stickyip.io/statefulsets, operator: DoesNotExist}] # placement.statefulSets" $body }}
{{- end }}
{{ $body }}
{{- end -}}
