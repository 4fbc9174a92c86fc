{{- /* Names follow Istio's so that existing tooling and habits work. */}}

{{- /* "-REV" for a revision, "" for the default revision. */}}
{{- define "pilot.suffix" -}}
{{- if .Values.revision }}-{{ .Values.revision }}{{ end -}}
{{- end }}

{{- /* The Deployment, Service and ServiceAccount: istiod or istiod-REV. */}}
{{- define "pilot.name" -}}
istiod{{ include "pilot.suffix" . }}
{{- end }}

{{- /* Value of the istio.io/rev label: the revision, or "default". */}}
{{- define "pilot.revLabel" -}}
{{ .Values.revision | default "default" }}
{{- end }}

{{- define "pilot.image" -}}
{{- $tag := .Values.pilot.tag | default .Values.global.tag | default .Chart.AppVersion -}}
{{- if contains "/" .Values.pilot.image -}}
{{ .Values.pilot.image }}
{{- else -}}
{{ .Values.pilot.hub | default .Values.global.hub }}/{{ .Values.pilot.image }}:{{ $tag }}
{{- end -}}
{{- end }}

{{- /* Labels every object carries besides app and istio.io/rev. */}}
{{- define "pilot.commonLabels" -}}
app.kubernetes.io/name: istiod
app.kubernetes.io/part-of: meshpilot
app.kubernetes.io/instance: {{ .Release.Name | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service | quote }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | quote }}
{{- end }}

{{- define "pilot.selectorLabels" -}}
app: istiod
istio.io/rev: {{ include "pilot.revLabel" . | quote }}
{{- end }}

{{- define "pilot.labels" -}}
{{ include "pilot.selectorLabels" . }}
{{ include "pilot.commonLabels" . }}
{{- end }}

{{- /* xDS address that injected proxies dial. */}}
{{- define "pilot.discoveryAddress" -}}
{{- .Values.meshConfig.defaultConfig.discoveryAddress | default (printf "%s.%s.svc:15012" (include "pilot.name" .) .Release.Namespace) -}}
{{- end }}

{{- /* Fails the render on values that would produce broken objects. */}}
{{- define "pilot.checkValues" -}}
{{- $label := "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$" -}}
{{- with .Values.revision -}}
{{- if or (not (regexMatch $label .)) (gt (len .) 50) -}}
{{- fail (printf "revision %q must be a DNS label of at most 50 characters (it names objects and labels)" .) -}}
{{- end -}}
{{- if eq . "default" -}}
{{- fail "revision \"default\" is reserved: it is the istio.io/rev value of the default revision; use revision \"\"" -}}
{{- end -}}
{{- end -}}
{{- range .Values.revisionTags -}}
{{- if not (regexMatch $label .) -}}
{{- fail (printf "revision tag %q must be a DNS label" .) -}}
{{- end -}}
{{- if eq . $.Values.revision -}}
{{- fail (printf "revision tag %q equals the revision it points at" .) -}}
{{- end -}}
{{- if and (eq . "default") (not $.Values.revision) -}}
{{- fail "revision tag \"default\" needs a revision: the default revision already serves the default selectors" -}}
{{- end -}}
{{- end -}}
{{- if kindIs "bool" .Values.meshConfig.ingressControllerMode -}}
{{- fail (printf "meshConfig.ingressControllerMode is the boolean %v: YAML reads a bare OFF (or on, yes, no) as a boolean; quote it: \"OFF\"" .Values.meshConfig.ingressControllerMode) -}}
{{- end -}}
{{- if not (has .Values.meshConfig.ingressControllerMode (list "OFF" "DEFAULT" "STRICT")) -}}
{{- fail (printf "meshConfig.ingressControllerMode must be OFF, DEFAULT or STRICT, not %q" .Values.meshConfig.ingressControllerMode) -}}
{{- end -}}
{{- end }}

{{- /*
One injection webhook, without its selectors (the caller appends them).
Arguments: root (the chart context) and name.
*/}}
{{- define "pilot.injectionWebhook" -}}
- name: {{ .name }}
  clientConfig:
    service:
      name: {{ include "pilot.name" .root }}
      namespace: {{ .root.Release.Namespace }}
      path: /inject
      port: 443
  rules:
  - operations: [CREATE]
    apiGroups: [""]
    apiVersions: [v1]
    resources: [pods]
  failurePolicy: {{ .root.Values.sidecarInjectorWebhook.failurePolicy }}
  reinvocationPolicy: {{ .root.Values.sidecarInjectorWebhook.reinvocationPolicy }}
  sideEffects: None
  admissionReviewVersions: [v1]
  timeoutSeconds: {{ .root.Values.sidecarInjectorWebhook.timeoutSeconds }}
{{- end }}

{{- /*
The webhooks that inject for istio.io/rev=<value>: namespaces labelled with it
(and not with istio-injection), and pods labelled with it in namespaces that
chose nothing. Arguments: root and value.
*/}}
{{- define "pilot.revisionWebhooks" -}}
{{ include "pilot.injectionWebhook" (dict "root" .root "name" "rev.namespace.sidecar-injector.istio.io") }}
  namespaceSelector:
    matchExpressions:
    - {key: istio.io/rev, operator: In, values: [{{ .value | quote }}]}
    - {key: istio-injection, operator: DoesNotExist}
  objectSelector:
    matchExpressions:
    - {key: sidecar.istio.io/inject, operator: NotIn, values: ["false"]}
{{ include "pilot.injectionWebhook" (dict "root" .root "name" "rev.object.sidecar-injector.istio.io") }}
  namespaceSelector:
    matchExpressions:
    - {key: istio.io/rev, operator: DoesNotExist}
    - {key: istio-injection, operator: DoesNotExist}
  objectSelector:
    matchExpressions:
    - {key: sidecar.istio.io/inject, operator: NotIn, values: ["false"]}
    - {key: istio.io/rev, operator: In, values: [{{ .value | quote }}]}
{{- end }}

{{- /*
The default selectors: namespaces labelled istio-injection=enabled, and pods
labelled sidecar.istio.io/inject=true in namespaces that chose nothing.
Argument: root.
*/}}
{{- define "pilot.defaultWebhooks" -}}
{{ include "pilot.injectionWebhook" (dict "root" .root "name" "namespace.sidecar-injector.istio.io") }}
  namespaceSelector:
    matchExpressions:
    - {key: istio-injection, operator: In, values: [enabled]}
  objectSelector:
    matchExpressions:
    - {key: sidecar.istio.io/inject, operator: NotIn, values: ["false"]}
{{ include "pilot.injectionWebhook" (dict "root" .root "name" "object.sidecar-injector.istio.io") }}
  namespaceSelector:
    matchExpressions:
    - {key: istio-injection, operator: DoesNotExist}
    - {key: istio.io/rev, operator: DoesNotExist}
  objectSelector:
    matchExpressions:
    - {key: sidecar.istio.io/inject, operator: In, values: ["true"]}
    - {key: istio.io/rev, operator: DoesNotExist}
{{- end }}
