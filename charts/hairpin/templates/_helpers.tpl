{{/* The name label: fixed to "hairpin", because the controller's hairpin Services select
     proxy pods by app.kubernetes.io/name=hairpin,app.kubernetes.io/component=proxy. */}}
{{- define "hairpin.name" -}}hairpin{{- end }}

{{- define "hairpin.fullname" -}}
{{- if contains "hairpin" .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-hairpin" .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end }}

{{- define "hairpin.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{- define "hairpin.labels" -}}
app.kubernetes.io/name: {{ include "hairpin.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: hairpin
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end }}

{{- define "hairpin.selector" -}}
app.kubernetes.io/name: {{ include "hairpin.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "hairpin.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{- define "hairpin.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities:
  drop: [ALL]
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
- name: HAIRPIN_DNS_MODE
  value: {{ .Values.coredns.dnsMode | quote }}
- name: HAIRPIN_LISTENER_PORT_BASE
  value: {{ .Values.proxy.listenerPortBase | quote }}
- name: HAIRPIN_DENY_HOSTNAMES
  value: {{ join "," .Values.admission.denyHostnames | quote }}
- name: HAIRPIN_HOSTNAME_NAMESPACES
  value: {{ join "," .Values.admission.hostnameNamespaces | quote }}
- name: HAIRPIN_LOG_FORMAT
  value: {{ .Values.log.format | quote }}
- name: HAIRPIN_LOG
  value: {{ .Values.log.level | quote }}
{{- end }}
