{{/* Chart name, truncated to the 63 characters of a DNS label. */}}
{{- define "rag-gateway.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Fully qualified app name; the release name alone when it already contains the chart name. */}}
{{- define "rag-gateway.fullname" -}}
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

{{- define "rag-gateway.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels shared by every object of the release. */}}
{{- define "rag-gateway.commonLabels" -}}
helm.sh/chart: {{ include "rag-gateway.chart" . }}
app.kubernetes.io/name: {{ include "rag-gateway.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: rag-gateway
{{- end }}

{{/* Gateway objects. */}}
{{- define "rag-gateway.labels" -}}
{{ include "rag-gateway.commonLabels" . }}
app.kubernetes.io/component: gateway
{{- end }}

{{- define "rag-gateway.selectorLabels" -}}
app.kubernetes.io/name: {{ include "rag-gateway.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: gateway
{{- end }}

{{/* In-cluster Redis. */}}
{{- define "rag-gateway.redis.fullname" -}}
{{- printf "%s-redis" (include "rag-gateway.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "rag-gateway.redis.selectorLabels" -}}
app.kubernetes.io/name: {{ include "rag-gateway.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: redis
{{- end }}

{{/* In-cluster llama.cpp server. */}}
{{- define "rag-gateway.llm.fullname" -}}
{{- printf "%s-llm" (include "rag-gateway.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "rag-gateway.llm.selectorLabels" -}}
app.kubernetes.io/name: {{ include "rag-gateway.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: llm
{{- end }}

{{- define "rag-gateway.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "rag-gateway.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The Secret the gateway reads its keys from: an existing one, or the chart's (if it has any key). */}}
{{- define "rag-gateway.secretName" -}}
{{- if .Values.secrets.existingSecret }}
{{- .Values.secrets.existingSecret }}
{{- else if include "rag-gateway.secretData" . }}
{{- include "rag-gateway.fullname" . }}
{{- end }}
{{- end }}

{{/* Secret keys from values, base64-encoded; empty values are left out. */}}
{{- define "rag-gateway.secretData" -}}
{{- with .Values.secrets }}
{{- if .openaiApiKey }}
OPENAI_API_KEY: {{ .openaiApiKey | b64enc | quote }}
{{- end }}
{{- if .pineconeApiKey }}
PINECONE_API_KEY: {{ .pineconeApiKey | b64enc | quote }}
{{- end }}
{{- if .tavilyApiKey }}
TAVILY_API_KEY: {{ .tavilyApiKey | b64enc | quote }}
{{- end }}
{{- if .redisUrl }}
REDIS_URL: {{ .redisUrl | b64enc | quote }}
{{- end }}
{{- if .curationDatabaseUrl }}
GATEWAY_CURATION_DATABASE_URL: {{ .curationDatabaseUrl | b64enc | quote }}
{{- end }}
{{- if .apiKeys }}
GATEWAY_API_KEYS: {{ .apiKeys | toJson | b64enc | quote }}
{{- end }}
{{- if .consoleSecret }}
GATEWAY_CONSOLE_SECRET: {{ .consoleSecret | b64enc | quote }}
{{- end }}
{{- end }}
{{- end }}

{{- define "rag-gateway.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* "true" when documents live in the embedded LanceDB store on /data (no Pinecone). */}}
{{- define "rag-gateway.embeddedStore" -}}
{{- $provider := .Values.vectorStore.provider }}
{{- if or (eq $provider "lancedb") (and (eq $provider "") (not .Values.secrets.pineconeApiKey)) }}true{{ end }}
{{- end }}

{{/* The claim holding the embedded store: existingClaim or the chart's. */}}
{{- define "rag-gateway.dataClaim" -}}
{{- default (printf "%s-data" (include "rag-gateway.fullname" .)) .Values.vectorStore.existingClaim }}
{{- end }}

{{/* "true" when several pods can mount the embedded store's claim at once (ReadWriteMany). */}}
{{- define "rag-gateway.sharedDataClaim" -}}
{{- $mode := ternary .Values.vectorStore.existingClaimAccessMode .Values.vectorStore.persistence.accessMode (ne .Values.vectorStore.existingClaim "") }}
{{- if eq $mode "ReadWriteMany" }}true{{ end }}
{{- end }}

{{/* The most gateway pods the release can run at once. */}}
{{- define "rag-gateway.maxReplicas" -}}
{{- if .Values.autoscaling.enabled }}{{ int .Values.autoscaling.maxReplicas }}{{ else }}{{ int .Values.replicaCount }}{{ end }}
{{- end }}

{{/* Refuse contradictory values at render time rather than deploying a half-working release. */}}
{{- define "rag-gateway.validate" -}}
{{- if and .Values.redis.enabled .Values.secrets.redisUrl }}
{{- fail "redis.enabled=true and secrets.redisUrl are exclusive: use the in-cluster Redis or an external one" }}
{{- end }}
{{- if and .Values.llamaCpp.enabled (not .Values.llamaCpp.model.existingClaim) }}
{{- fail "llamaCpp.enabled=true needs llamaCpp.model.existingClaim (a PersistentVolumeClaim holding the GGUF model)" }}
{{- end }}
{{- if and .Values.autoscaling.enabled (gt (int .Values.autoscaling.minReplicas) (int .Values.autoscaling.maxReplicas)) }}
{{- fail "autoscaling.minReplicas must not exceed autoscaling.maxReplicas" }}
{{- end }}
{{- if and .Values.ingress.enabled (not .Values.ingress.hosts) }}
{{- fail "ingress.enabled=true needs at least one host in ingress.hosts" }}
{{- end }}
{{- if and .Values.otel.enabled (not .Values.otel.endpoint) }}
{{- fail "otel.enabled=true needs otel.endpoint, the collector's OTLP/HTTP URL (e.g. http://otel-collector.monitoring:4318)" }}
{{- end }}
{{- if and .Values.otel.enabled (regexMatch ":4317(/|$)" .Values.otel.endpoint) }}
{{- fail "otel.endpoint uses port 4317, OTLP's gRPC port: the gateway exports over OTLP/HTTP, usually port 4318" }}
{{- end }}
{{- if le (int .Values.terminationGracePeriodSeconds) (add 30 (int .Values.preStopSleepSeconds)) }}
{{- fail "terminationGracePeriodSeconds must exceed preStopSleepSeconds + 30 (uvicorn's graceful shutdown)" }}
{{- end }}
{{- if and (eq .Values.vectorStore.provider "lancedb") .Values.secrets.pineconeApiKey }}
{{- fail "vectorStore.provider=lancedb and secrets.pineconeApiKey are exclusive: the gateway uses Pinecone whenever it has a key" }}
{{- end }}
{{- if and (eq .Values.vectorStore.provider "pinecone") (not (or .Values.secrets.pineconeApiKey .Values.secrets.existingSecret)) }}
{{- fail "vectorStore.provider=pinecone needs PINECONE_API_KEY: set secrets.pineconeApiKey or put it in secrets.existingSecret" }}
{{- end }}
{{- $replicas := int (include "rag-gateway.maxReplicas" .) }}
{{- if and (gt $replicas 1) (include "rag-gateway.embeddedStore" .) (not (include "rag-gateway.sharedDataClaim" .)) }}
{{- fail (printf "%d replicas on the embedded LanceDB store would split documents between pods (each on its own copy, or stuck on a ReadWriteOnce claim). Run one replica, or share the store: Pinecone (secrets.pineconeApiKey, or vectorStore.provider=pinecone with the key in secrets.existingSecret), or a ReadWriteMany claim (vectorStore.persistence.accessMode=ReadWriteMany, or vectorStore.existingClaim with vectorStore.existingClaimAccessMode=ReadWriteMany)" $replicas) }}
{{- end }}
{{- if and (gt $replicas 1) (ne (toString .Values.config.GATEWAY_CACHE_ENABLED) "false") (not (or .Values.redis.enabled .Values.secrets.redisUrl .Values.secrets.existingSecret)) }}
{{- fail (printf "%d replicas with the answer cache on need a shared Redis: without one each replica caches answers for itself, and a document change through one replica would not invalidate the others' answers. Set redis.enabled=true or secrets.redisUrl (or REDIS_URL in secrets.existingSecret), or config.GATEWAY_CACHE_ENABLED=false" $replicas) }}
{{- end }}
{{- end }}
