{{/* Names, labels and the pieces every fairstream pod shares. */}}

{{- define "fairstream.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "fairstream.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "fairstream.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "fairstream.labels" -}}
helm.sh/chart: {{ include "fairstream.chart" . }}
app.kubernetes.io/name: {{ include "fairstream.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Selector labels of one component: include with (dict "root" $ "component" "scheduler"). */}}
{{- define "fairstream.selectorLabels" -}}
app.kubernetes.io/name: {{ include "fairstream.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "fairstream.componentLabels" -}}
{{ include "fairstream.labels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* values.schema.json refuses an empty repository; this says the same when the schema is skipped. */}}
{{- define "fairstream.imageRepository" -}}
{{- required "image.repository is required: no public registry serves the fairstream image. Build and push it (make image-push IMAGE=registry.example.com/team/fairstream, README: Deploy), then --set image.repository=registry.example.com/team/fairstream" .Values.image.repository }}
{{- end }}

{{- define "fairstream.image" -}}
{{- printf "%s:%s" (include "fairstream.imageRepository" .) (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{- define "fairstream.workerImage" -}}
{{- $repo := default (include "fairstream.imageRepository" .) .Values.worker.image.repository }}
{{- $tag := default (default .Chart.AppVersion .Values.image.tag) .Values.worker.image.tag }}
{{- printf "%s:%s" $repo $tag }}
{{- end }}

{{- define "fairstream.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "fairstream.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "fairstream.secretName" -}}
{{- default (printf "%s-kafka" (include "fairstream.fullname" .)) .Values.kafka.existingSecret }}
{{- end }}

{{/* The pre-install hook runs before the release's own Secret exists: it reads a hook copy. */}}
{{- define "fairstream.hookSecretName" -}}
{{- default (printf "%s-topics-kafka" (include "fairstream.fullname" .)) .Values.kafka.existingSecret }}
{{- end }}

{{- define "fairstream.sasl" -}}
{{- if hasPrefix "SASL_" .Values.kafka.securityProtocol }}true{{ end }}
{{- end }}

{{- define "fairstream.tls" -}}
{{- if or (eq .Values.kafka.securityProtocol "SSL") (eq .Values.kafka.securityProtocol "SASL_SSL") }}true{{ end }}
{{- end }}

{{/* True when a CA file is mounted: from tls.caCert, or from existingSecret's caCert key (an
empty key name: that Secret has no CA, the image's system CAs apply), under SSL/SASL_SSL. */}}
{{- define "fairstream.caFile" -}}
{{- if and (include "fairstream.tls" .) (or .Values.kafka.tls.caCert (and .Values.kafka.existingSecret .Values.kafka.secretKeys.caCert)) }}true{{ end }}
{{- end }}

{{- define "fairstream.caMountPath" -}}/etc/fairstream/kafka{{- end }}

{{/* Whether the chart renders a Secret at all (it holds only SASL credentials and the CA). */}}
{{- define "fairstream.chartSecret" -}}
{{- if and (not .Values.kafka.existingSecret) (or (include "fairstream.sasl" .) (include "fairstream.caFile" .)) }}true{{ end }}
{{- end }}

{{/* The Secret's data; rendered into the release Secret and the hook's copy alike. */}}
{{- define "fairstream.secretData" -}}
{{- if include "fairstream.sasl" . }}
{{ .Values.kafka.secretKeys.saslUsername }}: {{ required "kafka.sasl.username is required with a SASL_* securityProtocol (or set kafka.existingSecret)" .Values.kafka.sasl.username | b64enc | quote }}
{{ .Values.kafka.secretKeys.saslPassword }}: {{ required "kafka.sasl.password is required with a SASL_* securityProtocol (or set kafka.existingSecret)" .Values.kafka.sasl.password | b64enc | quote }}
{{- end }}
{{- if include "fairstream.caFile" . }}
{{ .Values.kafka.secretKeys.caCert }}: {{ .Values.kafka.tls.caCert | b64enc | quote }}
{{- end }}
{{- end }}

{{/* Non-secret connection settings: ConfigMap data and the hook Job's env share them. */}}
{{- define "fairstream.connectionSettings" -}}
FAIRSTREAM_BOOTSTRAP: {{ required "kafka.bootstrap is required" .Values.kafka.bootstrap | quote }}
FAIRSTREAM_SECURITY_PROTOCOL: {{ .Values.kafka.securityProtocol | quote }}
{{- if include "fairstream.sasl" . }}
FAIRSTREAM_SASL_MECHANISM: {{ .Values.kafka.sasl.mechanism | quote }}
{{- end }}
{{- if include "fairstream.caFile" . }}
FAIRSTREAM_SSL_CA_LOCATION: {{ printf "%s/%s" (include "fairstream.caMountPath" .) .Values.kafka.secretKeys.caCert | quote }}
{{- end }}
FAIRSTREAM_INGEST_TOPIC: {{ .Values.topics.ingest | quote }}
FAIRSTREAM_EGRESS_TOPIC: {{ .Values.topics.egress | quote }}
FAIRSTREAM_DLQ_TOPIC: {{ .Values.topics.dlq | quote }}
FAIRSTREAM_POLICY_TOPIC: {{ .Values.topics.policy | quote }}
FAIRSTREAM_FEEDBACK_TOPIC: {{ .Values.scheduler.feedbackTopic | quote }}
FAIRSTREAM_APP_ID: {{ .Values.scheduler.appId | quote }}
FAIRSTREAM_REPLICATION_FACTOR: {{ .Values.topics.replicationFactor | int64 | quote }}
{{- end }}

{{/* Env entries for the SASL credentials, read from the Secret named by .secret. */}}
{{- define "fairstream.secretEnv" -}}
{{- if include "fairstream.sasl" .root }}
- name: FAIRSTREAM_SASL_USERNAME
  valueFrom:
    secretKeyRef:
      name: {{ .secret }}
      key: {{ .root.Values.kafka.secretKeys.saslUsername }}
- name: FAIRSTREAM_SASL_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ .secret }}
      key: {{ .root.Values.kafka.secretKeys.saslPassword }}
{{- end }}
{{- end }}

{{/* Volume of the CA file (only its key), from the Secret named by .secret. */}}
{{- define "fairstream.caVolume" -}}
{{- if include "fairstream.caFile" .root }}
- name: kafka-ca
  secret:
    secretName: {{ .secret }}
    items:
      - key: {{ .root.Values.kafka.secretKeys.caCert }}
        path: {{ .root.Values.kafka.secretKeys.caCert }}
{{- end }}
{{- end }}

{{- define "fairstream.caVolumeMount" -}}
{{- if include "fairstream.caFile" . }}
- name: kafka-ca
  mountPath: {{ include "fairstream.caMountPath" . }}
  readOnly: true
{{- end }}
{{- end }}
