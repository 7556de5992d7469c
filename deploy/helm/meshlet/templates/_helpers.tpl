{{/*
The control plane's namespace and names are fixed, not derived from the
release: the injector's serving certificate names
meshlet-injector.meshlet-system.svc, it patches the caBundle of the
MutatingWebhookConfiguration named meshlet-injector, and injected sidecars
dial that Service. So one release per cluster.
*/}}
{{- define "meshlet.namespace" -}}meshlet-system{{- end -}}
{{- define "meshlet.name" -}}meshlet-injector{{- end -}}

{{/* Labels of every object. */}}
{{- define "meshlet.labels" -}}
app.kubernetes.io/name: meshlet-injector
app.kubernetes.io/part-of: meshlet
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* An image value's reference: repository@digest when it has a digest
(pinned), else repository:tag. */}}
{{- define "meshlet.image" -}}
{{- if .digest }}{{ .repository }}@{{ .digest }}{{ else }}{{ .repository }}:{{ .tag }}{{ end -}}
{{- end -}}

{{/* The fields both webhooks share. */}}
{{- define "meshlet.webhookCommon" -}}
admissionReviewVersions: [v1]
sideEffects: None
failurePolicy: {{ .failurePolicy }}
timeoutSeconds: {{ .timeoutSeconds }}
reinvocationPolicy: IfNeeded
clientConfig:
  service: {name: {{ .name }}, namespace: {{ .namespace }}, path: /inject, port: 443}
rules:
  - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods], scope: Namespaced}
{{- end -}}
