{{- /* Names follow Istio's where the control plane or habits expect them. */}}

{{- /*
Image of a section (cni or nodeProxy). Arguments: root and section (the
section's values).
*/}}
{{- define "cni.image" -}}
{{- $v := .section -}}
{{- $tag := $v.tag | default .root.Values.global.tag | default .root.Chart.AppVersion -}}
{{- if contains "/" $v.image -}}
{{ $v.image }}
{{- else -}}
{{ $v.hub | default .root.Values.global.hub }}/{{ $v.image }}:{{ $tag }}
{{- end -}}
{{- end }}

{{- /* Labels every object carries besides app. */}}
{{- define "cni.commonLabels" -}}
app.kubernetes.io/part-of: meshpilot
app.kubernetes.io/instance: {{ .Release.Name | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service | quote }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | quote }}
{{- end }}

{{- /* The installer's objects: meshpilot-cni. */}}
{{- define "cni.name" -}}meshpilot-cni{{- end }}

{{- define "cni.selectorLabels" -}}
app: meshpilot-cni
{{- end }}

{{- define "cni.labels" -}}
{{ include "cni.selectorLabels" . }}
app.kubernetes.io/name: meshpilot-cni
{{ include "cni.commonLabels" . }}
{{- end }}

{{- /*
The node proxy's objects: ztunnel, the ServiceAccount the control plane's
--trusted-node-accounts names by default (<namespace>/ztunnel).
*/}}
{{- define "nodeproxy.name" -}}ztunnel{{- end }}

{{- define "nodeproxy.selectorLabels" -}}
app: ztunnel
{{- end }}

{{- define "nodeproxy.labels" -}}
{{ include "nodeproxy.selectorLabels" . }}
app.kubernetes.io/name: ztunnel
{{ include "cni.commonLabels" . }}
{{- end }}

{{- /* Directory of the node agent's socket on the host, shared by both. */}}
{{- define "cni.socketDir" -}}/var/run/meshpilot{{- end }}

{{- define "cni.pullSecrets" -}}
{{- with .Values.global.imagePullSecrets }}
imagePullSecrets:
{{- range . }}
- name: {{ . }}
{{- end }}
{{- end }}
{{- end }}

{{/* The capture backend, refused at render time unless the agent knows it. */}}
{{- define "nodeproxy.captureBackend" -}}
{{- if not (has . (list "nftables" "iptables")) -}}
{{- fail (printf "nodeProxy.captureBackend %q: want nftables or iptables" .) -}}
{{- end -}}
{{- . -}}
{{- end }}
