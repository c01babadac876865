{{/* The chart's name: the `app.kubernetes.io/name` label. The controller's hairpin Services
     select proxy pods by it (HAIRPIN_PROXY_SELECTOR below), so overriding it keeps both equal. */}}
{{- define "hairpin.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end }}

{{/* Prefix of every object name; 50 characters leave room for the longest suffix. */}}
{{- define "hairpin.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "hairpin.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end }}

{{/* repository:tag, or repository:tag@digest when a digest pins the image. */}}
{{- define "hairpin.image" -}}
{{- $ref := printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- if .Values.image.digest -}}
{{- $ref = printf "%s@%s" $ref .Values.image.digest -}}
{{- end -}}
{{- $ref -}}
{{- end }}

{{- define "hairpin.labels" -}}
app.kubernetes.io/name: {{ include "hairpin.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: hairpin
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version | replace "+" "_" }}
{{- end }}

{{- define "hairpin.selector" -}}
app.kubernetes.io/name: {{ include "hairpin.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Settings shared by the controller and the uninstall hook, as environment variables. */}}
{{- define "hairpin.plannerEnv" -}}
- name: HAIRPIN_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
- name: HAIRPIN_COREDNS_NAMESPACE
  value: {{ .Values.coredns.namespace | quote }}
- name: HAIRPIN_COREDNS_CONFIGMAPS
  value: {{ join "," .Values.coredns.configMaps | quote }}
- name: HAIRPIN_COREDNS_CUSTOM_CONFIGMAP
  value: {{ .Values.coredns.customConfigMap | quote }}
- name: HAIRPIN_COREDNS_CUSTOM_KEY
  value: {{ .Values.coredns.customKey | quote }}
- name: HAIRPIN_NODE_LOCAL_DNS_CONFIGMAPS
  value: {{ join "," .Values.coredns.nodeLocalDnsConfigMaps | quote }}
- name: HAIRPIN_NODE_LOCAL_DNS_NAMESPACE
  value: {{ .Values.coredns.namespace | quote }}
- name: HAIRPIN_DNS_MODE
  value: {{ .Values.coredns.dnsMode | quote }}
- name: HAIRPIN_CURE
  value: {{ .Values.controller.cure | quote }}
- name: HAIRPIN_PROXY_SELECTOR
  value: "app.kubernetes.io/name={{ include "hairpin.name" . }},app.kubernetes.io/component=proxy"
- name: HAIRPIN_LISTENER_PORT_BASE
  value: {{ .Values.proxy.listenerPortBase | quote }}
- name: HAIRPIN_DENY_HOSTNAMES
  value: {{ join "," .Values.admission.denyHostnames | quote }}
- name: HAIRPIN_HOSTNAME_NAMESPACES
  value: {{ join "," .Values.admission.hostnameNamespaces | quote }}
- name: HAIRPIN_VERIFY_HOSTNAMES
  value: {{ .Values.admission.verifyHostnames | quote }}
- name: HAIRPIN_LOG_FORMAT
  value: {{ .Values.log.format | quote }}
- name: HAIRPIN_LOG
  value: {{ .Values.log.level | quote }}
{{- end }}

{{/*
A pod's annotations: hairpin's pods opt out of service-mesh sidecar injection (Istio, Linkerd),
then the chart value's annotations (which win). A sidecar in the controller's pod would answer
the native cure's probe itself and "prove" a cure that does not work; in the proxy's pod it
would sit between the PROXY header and the ingress; in the uninstall Job it would keep the Job
running. docs/controller.md says why.
*/}}
{{- define "hairpin.podAnnotations" -}}
{{- $mesh := dict "sidecar.istio.io/inject" "false" "linkerd.io/inject" "disabled" -}}
{{- toYaml (merge (deepCopy (. | default dict)) $mesh) -}}
{{- end }}
