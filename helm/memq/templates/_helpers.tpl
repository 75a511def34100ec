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
{{- define "memq.kafkaPort" -}}{{ int .Values.broker.kafkaListener.port }}{{- end -}}
{{- define "memq.kafkaBootstrap" -}}
{{- printf "%s.%s.svc.%s:%d" (include "memq.fullname" .) .Release.Namespace .Values.clusterDomain (int (include "memq.kafkaPort" .)) -}}
{{- end -}}
{{/* security.protocol a Kafka producer uses on the Kafka listener. */}}
{{- define "memq.kafkaListenerProtocol" -}}
{{- $v := .Values -}}
{{- $sasl := and $v.auth.enabled $v.auth.tokenSecret.name -}}
{{- $tls := and $v.tls.enabled $v.broker.kafkaListener.tls -}}
{{- if $tls }}{{ if $sasl }}SASL_SSL{{ else }}SSL{{ end }}{{ else }}{{ if $sasl }}SASL_PLAINTEXT{{ else }}PLAINTEXT{{ end }}{{ end -}}
{{- end -}}

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
{{- $producer := mustMergeOverwrite (deepCopy ($v.kafka.producer | default dict)) (fromYaml (include "memq.kafkaClientSettings" .)) -}}
{{- with $producer }}{{ $_ := set $notification "producer" . }}{{ end -}}
{{- $_ := set $defaults "notification" $notification -}}
{{- $_ := set $defaults "storage" (dict "type" "s3" "s3" $s3) -}}
{{- $zk := dict "connect" $v.zookeeper.connect "chroot" (include "memq.zkChroot" .) "session_timeout_ms" (int $v.zookeeper.sessionTimeoutMs) -}}
{{- $fixed := dict "cluster" $v.clusterName "host" "0.0.0.0" "port" (int (include "memq.brokerPort" .)) "http_port" (int (include "memq.httpPort" .)) "auto_create_topics" false "topic_defaults" $defaults "zookeeper" $zk -}}
{{- if $v.tls.enabled -}}
{{- $_ := set $fixed "tls" (fromYaml (include "memq.serverTls" (dict "root" . "clientAuth" $v.tls.clientAuth))) -}}
{{- end -}}
{{- $kl := $v.broker.kafkaListener -}}
{{- if $kl.enabled -}}
{{- $listener := dict "port" (int $kl.port) "tls" $kl.tls -}}
{{- with $kl.partitions }}{{ $_ := set $listener "partitions" (int .) }}{{ end -}}
{{- $_ := set $fixed "kafka_listener" $listener -}}
{{- end -}}
{{- if $v.auth.enabled -}}
{{- $auth := dict "enabled" true "mtls_identity" $v.auth.mtlsIdentity "superusers" ($v.auth.superusers | default list) -}}
{{- if $v.auth.tokenSecret.name -}}
{{- $_ := set $auth "token_secret_file" (include "memq.tokenSecretFile" .) -}}
{{- end -}}
{{- $_ := set $fixed "auth" $auth -}}
{{- end -}}
{{- $config := mustMergeOverwrite (deepCopy ($v.broker.config | default dict)) $fixed -}}
{{- toYaml $config -}}
{{- end -}}

{{/*
Where the chart mounts Secrets (read-only, group-readable by fsGroup): the TLS Secret
(tls.crt, tls.key, ca.crt), the token-signing secret, Kafka's CA and the S3 store's CA.
Outside /etc/memq, which is a read-only ConfigMap volume.
*/}}
{{- define "memq.tlsDir" -}}/etc/memq-tls{{- end -}}
{{- define "memq.authDir" -}}/etc/memq-auth{{- end -}}
{{- define "memq.kafkaCaDir" -}}/etc/memq-kafka-ca{{- end -}}
{{- define "memq.s3CaDir" -}}/etc/memq-s3-ca{{- end -}}
{{- define "memq.tokenSecretFile" -}}{{ include "memq.authDir" . }}/token-secret{{- end -}}

{{/* A server's `tls` section (broker or auditor): dict "root" . "clientAuth" none|optional|required. */}}
{{- define "memq.serverTls" -}}
{{- $dir := include "memq.tlsDir" .root -}}
{{- $tls := dict "cert_file" (printf "%s/tls.crt" $dir) "key_file" (printf "%s/tls.key" $dir) "client_auth" .clientAuth -}}
{{- if .root.Values.tls.caKey -}}
{{- $_ := set $tls "ca_file" (printf "%s/ca.crt" $dir) -}}
{{- end -}}
{{- toYaml $tls -}}
{{- end -}}

{{/* The TLS Secret as a volume: certificate and key (servers), or with "caOnly" only the CA (clients). */}}
{{- define "memq.tlsVolume" -}}
{{- $t := .root.Values.tls -}}
- name: {{ if .caOnly }}tls-ca{{ else }}tls{{ end }}
  secret:
    secretName: {{ $t.secretName }}
    defaultMode: 0440
    items:
      {{- if not .caOnly }}
      - {key: tls.crt, path: tls.crt}
      - {key: tls.key, path: tls.key}
      {{- end }}
      {{- if $t.caKey }}
      - {key: {{ $t.caKey }}, path: ca.crt}
      {{- end }}
{{- end -}}

{{- define "memq.authVolume" -}}
- name: auth
  secret:
    secretName: {{ .Values.auth.tokenSecret.name }}
    defaultMode: 0440
    items:
      - {key: {{ .Values.auth.tokenSecret.key }}, path: token-secret}
{{- end -}}

{{/* Non-secret librdkafka settings of kafka.security (a YAML map, possibly empty). */}}
{{- define "memq.kafkaClientSettings" -}}
{{- $s := .Values.kafka.security -}}
{{- $out := dict -}}
{{- with $s.protocol }}{{ $_ := set $out "security.protocol" . }}{{ end -}}
{{- with $s.saslMechanism }}{{ $_ := set $out "sasl.mechanisms" . }}{{ end -}}
{{- if $s.caSecret.name }}{{ $_ := set $out "ssl.ca.location" (printf "%s/ca.crt" (include "memq.kafkaCaDir" .)) }}{{ end -}}
{{- toYaml $out -}}
{{- end -}}

{{/*
Optional pieces of pod specs. Each renders nothing or a YAML list without surrounding
blank lines; call sites print it with `with (include ...)` and nindent.
*/}}

{{/* SASL credentials from kafka.security.saslSecret as env entries: dict "root" . "prefix" P (P + SASL.USERNAME, P + SASL.PASSWORD). */}}
{{- define "memq.kafkaSaslEnv" -}}
{{- $s := .root.Values.kafka.security.saslSecret -}}
{{- if $s.name -}}
- name: {{ .prefix }}SASL.USERNAME
  valueFrom:
    secretKeyRef: {name: {{ $s.name }}, key: {{ $s.usernameKey }}}
- name: {{ .prefix }}SASL.PASSWORD
  valueFrom:
    secretKeyRef: {name: {{ $s.name }}, key: {{ $s.passwordKey }}}
{{- end -}}
{{- end -}}

{{- define "memq.kafkaCaVolume" -}}
{{- with .Values.kafka.security.caSecret -}}
{{- if .name -}}
- name: kafka-ca
  secret:
    secretName: {{ .name }}
    defaultMode: 0440
    items:
      - {key: {{ .key }}, path: ca.crt}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "memq.kafkaCaMount" -}}
{{- if .Values.kafka.security.caSecret.name -}}
- name: kafka-ca
  mountPath: {{ include "memq.kafkaCaDir" . }}
  readOnly: true
{{- end -}}
{{- end -}}

{{/* S3: the store's CA bundle (s3.caBundle) for boto3. */}}
{{- define "memq.s3CaEnv" -}}
{{- if .Values.s3.caBundle.name -}}
- name: AWS_CA_BUNDLE
  value: {{ include "memq.s3CaDir" . }}/ca.crt
{{- end -}}
{{- end -}}

{{- define "memq.s3CaVolume" -}}
{{- with .Values.s3.caBundle -}}
{{- if .name -}}
- name: s3-ca
  secret:
    secretName: {{ .name }}
    defaultMode: 0440
    items:
      - {key: {{ .key }}, path: ca.crt}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "memq.s3CaMount" -}}
{{- if .Values.s3.caBundle.name -}}
- name: s3-ca
  mountPath: {{ include "memq.s3CaDir" . }}
  readOnly: true
{{- end -}}
{{- end -}}

{{/*
What the chart's admin Jobs (topics, ACLs, retention) need to reach secured brokers: the
brokers' CA (MEMQ_SSL_CA_LOCATION: tls.caKey, else the image's system CAs) and a
superuser's token (MEMQ_AUTH_TOKEN from auth.adminTokenSecret). Only the CA of the TLS
Secret is mounted, never the brokers' key.
*/}}
{{- define "memq.adminEnv" -}}
{{- $out := list -}}
{{- if .Values.tls.enabled -}}
{{- $ca := ternary (printf "%s/ca.crt" (include "memq.tlsDir" .)) "/etc/ssl/certs/ca-certificates.crt" (ne .Values.tls.caKey "") -}}
{{- $out = append $out (dict "name" "MEMQ_SSL_CA_LOCATION" "value" $ca) -}}
{{- end -}}
{{- if .Values.auth.enabled -}}
{{- $ref := dict "name" .Values.auth.adminTokenSecret.name "key" .Values.auth.adminTokenSecret.key -}}
{{- $out = append $out (dict "name" "MEMQ_AUTH_TOKEN" "valueFrom" (dict "secretKeyRef" $ref)) -}}
{{- end -}}
{{- with $out }}{{ toYaml . }}{{ end -}}
{{- end -}}

{{/* The auditor's lag client: the brokers' CA and the admin token (as memq.adminEnv),
and the notification Kafka's SASL credentials, as MEMQ_AUDITOR__LAG__ overrides. */}}
{{- define "memq.auditorLagEnv" -}}
{{- $out := list -}}
{{- if .Values.tls.enabled -}}
{{- $ca := ternary (printf "%s/ca.crt" (include "memq.tlsDir" .)) "/etc/ssl/certs/ca-certificates.crt" (ne .Values.tls.caKey "") -}}
{{- $out = append $out (dict "name" "MEMQ_AUDITOR__LAG__CLIENT__SSL.CA.LOCATION" "value" $ca) -}}
{{- end -}}
{{- if .Values.auth.enabled -}}
{{- $ref := dict "name" .Values.auth.adminTokenSecret.name "key" .Values.auth.adminTokenSecret.key -}}
{{- $out = append $out (dict "name" "MEMQ_AUDITOR__LAG__CLIENT__AUTH.TOKEN" "valueFrom" (dict "secretKeyRef" $ref)) -}}
{{- end -}}
{{- with $out }}{{ toYaml . }}{{ end }}
{{- with include "memq.kafkaSaslEnv" (dict "root" . "prefix" "MEMQ_AUDITOR__LAG__KAFKA__") }}
{{ . }}
{{- end -}}
{{- end -}}

{{- define "memq.adminVolume" -}}
{{- if and .Values.tls.enabled .Values.tls.caKey -}}
{{ include "memq.tlsVolume" (dict "root" . "caOnly" true) }}
{{- end -}}
{{- end -}}

{{- define "memq.adminMount" -}}
{{- if and .Values.tls.enabled .Values.tls.caKey -}}
- name: tls-ca
  mountPath: {{ include "memq.tlsDir" . }}
  readOnly: true
{{- end -}}
{{- end -}}

{{/*
A probe's handler: dict "root" . "path" P "port" N "tls" BOOL "clientAuth" MODE. Plain or
HTTPS httpGet (the kubelet skips certificate checks and sends no client certificate);
with clientAuth required, where the kubelet's handshake would fail, an exec probe that
makes the same request from inside the pod with the server's own certificate as the
client certificate (it fails on any status but 2xx/3xx).
*/}}
{{- define "memq.probeHandler" -}}
{{- if and .tls (eq .clientAuth "required") -}}
{{- $dir := include "memq.tlsDir" .root -}}
exec:
  command:
    - python
    - -c
    - {{ printf "import ssl, urllib.request as u; c = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT); c.check_hostname = False; c.verify_mode = ssl.CERT_NONE; c.load_cert_chain('%s/tls.crt', '%s/tls.key'); u.urlopen('https://127.0.0.1:%v%s', context=c, timeout=30)" $dir $dir .port .path | quote }}
{{- else -}}
httpGet:
  path: {{ .path }}
  port: http
  {{- if .tls }}
  scheme: HTTPS
  {{- end }}
{{- end -}}
{{- end -}}

{{/* A ServiceMonitor endpoint's scheme and tlsConfig: dict "root" . "host" H (the name its certificate has). */}}
{{- define "memq.scrapeTls" -}}
{{- $t := .root.Values.tls -}}
{{- $cfg := dict "serverName" .host -}}
{{- if $t.caKey -}}
{{- $_ := set $cfg "ca" (dict "secret" (dict "name" $t.secretName "key" $t.caKey)) -}}
{{- end -}}
{{- $cfg = mustMergeOverwrite $cfg (deepCopy (.root.Values.metrics.serviceMonitor.tlsConfig | default dict)) -}}
scheme: https
tlsConfig:
  {{- toYaml $cfg | nindent 2 }}
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
{{- $kl := $v.broker.kafkaListener -}}
{{- if and $kl.enabled (has (int $kl.port) (list 9092 9093)) -}}
{{- fail (printf "broker.kafkaListener.port %d is the broker's protocol or HTTP port (9092, 9093): pick another, e.g. 9094" (int $kl.port)) -}}
{{- end -}}
{{- if and $kl.enabled $v.auth.enabled (not $v.auth.tokenSecret.name) (not (and $v.tls.enabled $kl.tls (ne $v.tls.clientAuth "none"))) -}}
{{- fail "broker.kafkaListener with auth.enabled: Kafka clients could not authenticate; set auth.tokenSecret.name (SASL/PLAIN, the password a MemQ token) or use client certificates on the port (tls.enabled, tls.clientAuth optional/required, broker.kafkaListener.tls)" -}}
{{- end -}}
{{- if gt $ring $limit -}}
{{- fail (printf "topicDefaults: ring_size x batch.bytes = %d bytes, more than broker.config.memory_limit_bytes (%d): not even one topic would fit; raise memory_limit_bytes or lower ring_size / batch.bytes" $ring $limit) -}}
{{- end -}}
{{- $block := int64 (default (default 8388608 $v.topicDefaults.batch.bytes) $v.topicDefaults.max_block_bytes) -}}
{{- $frame := int64 (default 16777216 $v.broker.config.max_frame_bytes) -}}
{{- if gt (add $block 65536) $frame -}}
{{- fail (printf "topicDefaults: the largest block (%d bytes: max_block_bytes, or batch.bytes) plus 64 KiB does not fit in broker.config.max_frame_bytes (%d); raise max_frame_bytes or set a smaller max_block_bytes" $block $frame) -}}
{{- end -}}
{{- include "memq.validateSecurity" . -}}
{{- $seen := dict -}}
{{- range $v.topics -}}
{{- if hasKey $seen .name -}}
{{- fail (printf "topics: %q is listed twice" .name) -}}
{{- end -}}
{{- $_ := set $seen .name true -}}
{{- end -}}
{{- end -}}

{{/* Security combinations that cannot work; each message names the values to change. */}}
{{- define "memq.validateSecurity" -}}
{{- $v := .Values -}}
{{- $t := $v.tls -}}
{{- if and $t.enabled (not $t.secretName) -}}
{{- fail "tls.enabled needs tls.secretName: a kubernetes.io/tls Secret with tls.crt and tls.key (e.g. from a cert-manager Certificate)" -}}
{{- end -}}
{{- if and (ne $t.clientAuth "none") (not $t.enabled) -}}
{{- fail (printf "tls.clientAuth=%s needs tls.enabled=true (client certificates are part of the TLS handshake)" $t.clientAuth) -}}
{{- end -}}
{{- if and (ne $t.clientAuth "none") (not $t.caKey) -}}
{{- fail (printf "tls.clientAuth=%s needs the CA of client certificates: set tls.caKey to the key of tls.secretName holding it (cert-manager writes ca.crt)" $t.clientAuth) -}}
{{- end -}}
{{- $jobs := list -}}
{{- if $v.topics }}{{ $jobs = append $jobs "the topics Job (topics)" }}{{ end -}}
{{- if $v.auth.acls }}{{ $jobs = append $jobs "the ACL Job (auth.acls)" }}{{ end -}}
{{- if $v.retention.enabled }}{{ $jobs = append $jobs "the retention CronJob (retention.enabled)" }}{{ end -}}
{{- if and $t.enabled (eq $t.clientAuth "required") $jobs -}}
{{- fail (printf "tls.clientAuth=required: %s would fail, since the admin CLI presents a token, not a client certificate; use tls.clientAuth=optional (client certificates are verified when sent) or turn them off" (join ", " $jobs)) -}}
{{- end -}}
{{- $a := $v.auth -}}
{{- if $a.enabled -}}
{{- $mtls := and $t.enabled (ne $t.clientAuth "none") $a.mtlsIdentity -}}
{{- if and (not $a.tokenSecret.name) (not $mtls) -}}
{{- fail "auth.enabled needs a way to authenticate: auth.tokenSecret.name (a Secret with the token-signing secret) for tokens, or mutual TLS (tls.enabled with tls.clientAuth optional or required, and auth.mtlsIdentity)" -}}
{{- end -}}
{{- if and $jobs (not $a.adminTokenSecret.name) -}}
{{- fail (printf "auth.enabled: %s must authenticate: set auth.adminTokenSecret.name to a Secret holding a token of one of auth.superusers (memq token create --principal ADMIN --ttl 31536000 --secret-file FILE), or turn them off" (join ", " $jobs)) -}}
{{- end -}}
{{- if and $a.adminTokenSecret.name (not $a.tokenSecret.name) -}}
{{- fail "auth.adminTokenSecret holds a token, which the brokers verify with the token-signing secret: set auth.tokenSecret.name too" -}}
{{- end -}}
{{- else if $a.acls -}}
{{- fail "auth.acls needs auth.enabled=true: brokers enforce ACLs only with authentication on" -}}
{{- end -}}
{{- $au := $v.auditor -}}
{{- if and $au.enabled $au.tls.enabled (not $t.secretName) -}}
{{- fail "auditor.tls.enabled needs tls.secretName (the dashboard uses the brokers' TLS Secret; its certificate must name the auditor Service)" -}}
{{- end -}}
{{- if and $au.enabled $au.tls.enabled (ne $au.tls.clientAuth "none") (not $t.caKey) -}}
{{- fail (printf "auditor.tls.clientAuth=%s needs tls.caKey (the CA of client certificates)" $au.tls.clientAuth) -}}
{{- end -}}
{{- if and $au.enabled $au.auth.enabled (not $a.tokenSecret.name) -}}
{{- fail "auditor.auth.enabled needs auth.tokenSecret.name: the dashboard accepts tokens signed with that secret" -}}
{{- end -}}
{{- $k := $v.kafka.security -}}
{{- if and (or $k.saslSecret.name $k.saslMechanism) (not (hasPrefix "SASL_" $k.protocol)) -}}
{{- fail (printf "kafka.security: SASL settings (saslSecret, saslMechanism) need protocol SASL_SSL or SASL_PLAINTEXT, not %q" $k.protocol) -}}
{{- end -}}
{{- if and $k.caSecret.name (not (has $k.protocol (list "SSL" "SASL_SSL"))) -}}
{{- fail (printf "kafka.security.caSecret is for TLS to Kafka: set kafka.security.protocol to SSL or SASL_SSL, not %q" $k.protocol) -}}
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
{{- with fromYaml (include "memq.kafkaClientSettings" .) }}{{ $_ := set $config.kafka "consumer" . }}{{ end -}}
{{- if $a.tls.enabled -}}
{{- $_ := set $config "tls" (fromYaml (include "memq.serverTls" (dict "root" . "clientAuth" $a.tls.clientAuth))) -}}
{{- end -}}
{{- if $a.auth.enabled -}}
{{- $_ := set $config "auth" (dict "enabled" true "token_secret_file" (include "memq.tokenSecretFile" .)) -}}
{{- end -}}
{{- if $a.lag.enabled -}}
{{- $lag := dict "bootstrap_servers" (include "memq.bootstrap" .) "interval_s" (int $a.lag.intervalSeconds) -}}
{{- with $a.lag.groups }}{{ $_ := set $lag "groups" . }}{{ end -}}
{{- if .Values.tls.enabled }}{{ $_ := set $lag "client" (dict "security.protocol" "ssl") }}{{ end -}}
{{- with fromYaml (include "memq.kafkaClientSettings" .) }}{{ $_ := set $lag "kafka" . }}{{ end -}}
{{- $_ := set $config "lag" $lag -}}
{{- end -}}
{{- toYaml $config -}}
{{- end -}}
