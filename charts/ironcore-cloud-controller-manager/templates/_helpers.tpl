{{- define "ccm.name" -}}
ironcore-cloud-controller-manager
{{- end }}

{{- define "ccm.selectorLabels" -}}
app.kubernetes.io/name: {{ include "ccm.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "ccm.labels" -}}
{{ include "ccm.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/component: cloud-controller-manager
{{- end }}

{{- define "ccm.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{- /* The upstream controllers, the provider's reader of the cluster's identity (internal/clusterid) and the load balancer repair controller,
that get their own service account with --use-service-account-credentials. */ -}}
{{- define "ccm.controllerServiceAccounts" -}}
cloud-node-controller cloud-node-lifecycle-controller service-controller route-controller ironcore-cluster-identity ironcore-load-balancer-repair
{{- end }}
