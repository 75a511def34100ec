{{/* vim: set filetype=mustache: */}}

{{/* Chart name, overridable with nameOverride. */}}
{{- define "memq.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
Full name of the release's objects: <release>-<chart> unless the release name already
contains the chart name. At most 52 characters, so that StatefulSet pod names, their
controller-revision-hash label and the "-headless" / "-auditor" suffixes stay within 63.
*/}}
{{- define "memq.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "memq.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels on every object. */}}
{{- define "memq.labels" -}}
helm.sh/chart: {{ include "memq.chart" . }}
{{ include "memq.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: memq
{{- end -}}

{{- define "memq.selectorLabels" -}}
app.kubernetes.io/name: {{ include "memq.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Brokers: selector labels (pods, Services, PDB, affinity, spread). */}}
{{- define "memq.broker.selectorLabels" -}}
{{ include "memq.selectorLabels" . }}
app.kubernetes.io/component: broker
{{- end -}}

{{- define "memq.broker.labels" -}}
{{ include "memq.labels" . }}
app.kubernetes.io/component: broker
{{- end -}}

{{- define "memq.auditor.fullname" -}}
{{- printf "%s-auditor" (include "memq.fullname" .) -}}
{{- end -}}

{{- define "memq.auditor.selectorLabels" -}}
{{ include "memq.selectorLabels" . }}
app.kubernetes.io/component: auditor
{{- end -}}

{{- define "memq.auditor.labels" -}}
{{ include "memq.labels" . }}
app.kubernetes.io/component: auditor
{{- end -}}

{{/* Headless Service of the brokers: the StatefulSet's serviceName, one DNS name per pod. */}}
{{- define "memq.broker.headless" -}}
{{- printf "%s-headless" (include "memq.fullname" .) -}}
{{- end -}}

{{/* The client Service, host:port: what clients use as bootstrap.servers. */}}
{{- define "memq.bootstrap" -}}
{{- printf "%s.%s.svc.%s:%d" (include "memq.fullname" .) .Release.Namespace .Values.clusterDomain (int (include "memq.brokerPort" .)) -}}
{{- end -}}

{{- define "memq.brokerPort" -}}9092{{- end -}}
{{- define "memq.httpPort" -}}9093{{- end -}}
{{- define "memq.auditorPort" -}}8080{{- end -}}

{{- define "memq.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "memq.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "memq.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "memq.zkChroot" -}}
{{- default (printf "/memq/%s" .Values.clusterName) .Values.zookeeper.chroot -}}
{{- end -}}

{{/* Pod-level securityContext (the invariants are fixed, only the ids come from values). */}}
{{- define "memq.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: {{ int .Values.securityContext.runAsUser }}
runAsGroup: {{ int .Values.securityContext.runAsGroup }}
fsGroup: {{ int .Values.securityContext.fsGroup }}
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "memq.containerSecurityContext" -}}
runAsNonRoot: true
runAsUser: {{ int .Values.securityContext.runAsUser }}
runAsGroup: {{ int .Values.securityContext.runAsGroup }}
readOnlyRootFilesystem: true
allowPrivilegeEscalation: false
privileged: false
capabilities:
  drop: ["ALL"]
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/*
A values scalar as text for the command line (`--set KEY=VALUE`). Numbers arrive as
float64 (Helm decodes values as JSON), so whole numbers are printed as integers instead
of Go's 1e+06 notation.
*/}}
{{- define "memq.scalar" -}}
{{- $v := . -}}
{{- if kindIs "float64" $v -}}
{{- if eq $v (floor $v) -}}{{ int64 $v }}{{- else -}}{{ $v }}{{- end -}}
{{- else if kindIs "invalid" $v -}}
null
{{- else -}}
{{- $v -}}
{{- end -}}
{{- end -}}

{{/*
The broker's YAML configuration (keys of docs/configuration.md). Per-pod keys come from
the environment: MEMQ__BROKER_ID, MEMQ__ADVERTISED_HOST (and MEMQ__RACK when set).
*/}}
{{- define "memq.brokerConfig" -}}
{{- $v := .Values -}}
{{- $s3 := dict "bucket" $v.s3.bucket "use_hash_prefix" $v.s3.useHashPrefix -}}
{{- with $v.s3.region }}{{ $_ := set $s3 "region" . }}{{ end -}}
{{- with $v.s3.endpointUrl }}{{ $_ := set $s3 "endpoint_url" . }}{{ end -}}
{{- $s3 = mustMergeOverwrite (deepCopy ($v.s3.options | default dict)) $s3 -}}
{{- $defaults := deepCopy $v.topicDefaults -}}
{{- $notification := mustMergeOverwrite (deepCopy ($defaults.notification | default dict)) (dict "bootstrap_servers" $v.kafka.bootstrapServers) -}}
{{- with $v.kafka.producer }}{{ $_ := set $notification "producer" (deepCopy .) }}{{ end -}}
{{- $_ := set $defaults "notification" $notification -}}
{{- $_ := set $defaults "storage" (dict "type" "s3" "s3" $s3) -}}
{{- $zk := dict "connect" $v.zookeeper.connect "chroot" (include "memq.zkChroot" .) "session_timeout_ms" (int $v.zookeeper.sessionTimeoutMs) -}}
{{- $fixed := dict "cluster" $v.clusterName "host" "0.0.0.0" "port" (int (include "memq.brokerPort" .)) "http_port" (int (include "memq.httpPort" .)) "auto_create_topics" false "topic_defaults" $defaults "zookeeper" $zk -}}
{{- $config := mustMergeOverwrite (deepCopy ($v.broker.config | default dict)) $fixed -}}
{{- toYaml $config -}}
{{- end -}}

{{/* Seconds a broker pod gets between deletion and SIGKILL. */}}
{{- define "memq.broker.terminationGracePeriodSeconds" -}}
{{- $shutdown := int (ceil (default 60 .Values.broker.config.shutdown_timeout_s)) -}}
{{- add $shutdown (int .Values.broker.preStopSleepSeconds) (int .Values.broker.terminationGraceMarginSeconds) -}}
{{- end -}}

{{/* Cross-field checks the schema cannot express; a failed check names the fix. */}}
{{- define "memq.validate" -}}
{{- $v := .Values -}}
{{- $ring := mul (int64 (default 4 $v.topicDefaults.ring_size)) (int64 (default 8388608 $v.topicDefaults.batch.bytes)) -}}
{{- $limit := int64 (default 1073741824 $v.broker.config.memory_limit_bytes) -}}
{{- if gt $ring $limit -}}
{{- fail (printf "topicDefaults: ring_size x batch.bytes = %d bytes, more than broker.config.memory_limit_bytes (%d): not even one topic would fit; raise memory_limit_bytes or lower ring_size / batch.bytes" $ring $limit) -}}
{{- end -}}
{{- $block := int64 (default (default 8388608 $v.topicDefaults.batch.bytes) $v.topicDefaults.max_block_bytes) -}}
{{- $frame := int64 (default 16777216 $v.broker.config.max_frame_bytes) -}}
{{- if gt (add $block 65536) $frame -}}
{{- fail (printf "topicDefaults: the largest block (%d bytes: max_block_bytes, or batch.bytes) plus 64 KiB does not fit in broker.config.max_frame_bytes (%d); raise max_frame_bytes or set a smaller max_block_bytes" $block $frame) -}}
{{- end -}}
{{- $seen := dict -}}
{{- range $v.topics -}}
{{- if hasKey $seen .name -}}
{{- fail (printf "topics: %q is listed twice" .name) -}}
{{- end -}}
{{- $_ := set $seen .name true -}}
{{- end -}}
{{- end -}}

{{/* Where the auditor keeps its SQLite file (a PVC or an emptyDir is mounted here). */}}
{{- define "memq.auditor.dataDir" -}}/var/lib/memq-auditor{{- end -}}

{{/* The auditor's YAML configuration (`memq audit serve --config`). */}}
{{- define "memq.auditorConfig" -}}
{{- $a := .Values.auditor -}}
{{- $config := dict
  "kafka" (dict "bootstrap_servers" (default .Values.kafka.bootstrapServers $a.bootstrapServers))
  "audit_topic" $a.auditTopic
  "db_path" (printf "%s/audit.db" (include "memq.auditor.dataDir" .))
  "http_host" "0.0.0.0"
  "http_port" (int (include "memq.auditorPort" .))
  "grace_period_s" (int $a.gracePeriodSeconds)
-}}
{{- toYaml $config -}}
{{- end -}}
