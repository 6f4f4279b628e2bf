{{/* Names ---------------------------------------------------------------------------------- */}}

{{- define "pi-dispatch.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The prefix of every object's name. Capped so "<fullname>-sessions" stays a valid name. */}}
{{- define "pi-dispatch.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* Cluster-scoped objects carry the namespace: two releases of the same name must not collide. */}}
{{- define "pi-dispatch.clusterName" -}}
{{- printf "%s-%s" (include "pi-dispatch.fullname" .) .Release.Namespace }}
{{- end }}

{{- define "pi-dispatch.serviceAccountName" -}}
{{- include "pi-dispatch.fullname" . }}
{{- end }}

{{- define "pi-dispatch.storeClaim" -}}
{{- .Values.sessions.store.existingClaim | default (printf "%s-sessions" (include "pi-dispatch.fullname" .)) }}
{{- end }}

{{- define "pi-dispatch.stagingClaim" -}}
{{- printf "%s-staging" (include "pi-dispatch.fullname" .) }}
{{- end }}

{{/* Labels ---------------------------------------------------------------------------------- */}}

{{- define "pi-dispatch.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "pi-dispatch.selectorLabels" -}}
app.kubernetes.io/name: {{ include "pi-dispatch.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "pi-dispatch.labels" -}}
helm.sh/chart: {{ include "pi-dispatch.chart" . }}
{{ include "pi-dispatch.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: pi-dispatch
{{- end }}

{{/* The operator's Pods (the Deployment's selector; the test Pod's affinity). */}}
{{- define "pi-dispatch.operatorSelectorLabels" -}}
{{ include "pi-dispatch.selectorLabels" . }}
app.kubernetes.io/component: operator
{{- end }}

{{/* Images ---------------------------------------------------------------------------------- */}}

{{/* The operator's image: <repository>@<digest> when image.digest is set (the tag is then ignored: the digest is
what is pulled, and what a release's signature covers, docs/releasing.md), else <repository>:<tag or appVersion>. */}}
{{- define "pi-dispatch.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}
{{- end }}

{{/* The job image: job.image, else the release's own; with job.imageDigest, that image's repository pinned by the
digest (a tag it names is dropped, as image.digest does for the operator). */}}
{{- define "pi-dispatch.jobImage" -}}
{{- $image := .Values.job.image | default (printf "ghcr.io/pi-dispatch/job:%s" .Chart.AppVersion) }}
{{- with .Values.job.imageDigest }}
{{- if contains "@" $image }}
{{- fail (printf "job.imageDigest is set but job.image %s already names a digest: set one of them" $image) }}
{{- end }}
{{- printf "%s@%s" (regexReplaceAll ":[^:/]+$" $image "") . }}
{{- else }}
{{- $image }}
{{- end }}
{{- end }}

{{/* The operator's environment (OperatorSettings.from_env), shared by the test Pod --------- */}}

{{- define "pi-dispatch.env" -}}
- name: PI_DISPATCH_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
- name: PI_DISPATCH_POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: PI_DISPATCH_MAX_CONCURRENT_JOBS
  value: {{ .Values.maxConcurrentJobs | int64 | quote }}
- name: PI_DISPATCH_JOB_IMAGE
  value: {{ include "pi-dispatch.jobImage" . | quote }}
- name: PI_DISPATCH_JOB_COMMAND
  value: {{ toJson .Values.job.command | quote }}
{{- with .Values.job.env }}
- name: PI_DISPATCH_JOB_ENV
  value: {{ toJson . | quote }}
{{- end }}
- name: PI_DISPATCH_JOB_TIMEOUT_SECONDS
  value: {{ .Values.job.timeoutSeconds | int64 | quote }}
- name: PI_DISPATCH_JOB_START_TIMEOUT_SECONDS
  value: {{ .Values.job.startTimeoutSeconds | int64 | quote }}
- name: PI_DISPATCH_JOB_POD_RETENTION_SECONDS
  value: {{ .Values.job.podRetentionSeconds | int64 | quote }}
{{- if not (kindIs "invalid" .Values.job.ttlSecondsAfterFinished) }}
- name: PI_DISPATCH_JOB_TTL_SECONDS_AFTER_FINISHED
  value: {{ .Values.job.ttlSecondsAfterFinished | int64 | quote }}
{{- end }}
{{- with .Values.job.resources }}
- name: PI_DISPATCH_JOB_RESOURCES
  value: {{ toJson . | quote }}
{{- end }}
{{- with .Values.job.credentials }}
- name: PI_DISPATCH_JOB_CREDENTIALS
  value: {{ toJson . | quote }}
{{- end }}
{{- with .Values.job.nodeSelector }}
- name: PI_DISPATCH_JOB_NODE_SELECTOR
  value: {{ toJson . | quote }}
{{- end }}
{{- with .Values.job.tolerations }}
- name: PI_DISPATCH_JOB_TOLERATIONS
  value: {{ toJson . | quote }}
{{- end }}
{{- with .Values.job.affinity }}
- name: PI_DISPATCH_JOB_AFFINITY
  value: {{ toJson . | quote }}
{{- end }}
{{- with .Values.job.imagePullSecrets }}
- name: PI_DISPATCH_JOB_IMAGE_PULL_SECRETS
  value: {{ toJson . | quote }}
{{- end }}
{{- with .Values.jobPodPolicy }}
- name: PI_DISPATCH_JOB_TRIGGER_POLICY
  {{- if .enabled }}
  value: {{ dict "env" (.triggerEnv | default list) "configMaps" (.configMaps | default list) "priorityClasses" (.priorityClasses | default list) "maxResources" (.maxResources | default dict) | toJson | quote }}
  {{- else }}
  value: "off"
  {{- end }}
{{- end }}
{{- with .Values.job.priorityClassName }}
- name: PI_DISPATCH_JOB_PRIORITY_CLASS_NAME
  value: {{ . | quote }}
{{- end }}
{{- with .Values.job.runtimeClassName }}
- name: PI_DISPATCH_JOB_RUNTIME_CLASS_NAME
  value: {{ . | quote }}
{{- end }}
{{- with .Values.job.topologySpreadConstraints }}
- name: PI_DISPATCH_JOB_TOPOLOGY_SPREAD_CONSTRAINTS
  value: {{ toJson . | quote }}
{{- end }}
{{- with .Values.job.podSecurityContext }}
- name: PI_DISPATCH_JOB_POD_SECURITY_CONTEXT
  value: {{ toJson . | quote }}
{{- end }}
{{- with .Values.job.modelsConfigMap }}
- name: PI_DISPATCH_JOB_MODELS_CONFIGMAP
  value: {{ . | quote }}
{{- end }}
- name: PI_DISPATCH_JOB_CHECKOUT
  value: {{ ternary "true" "false" (ne .Values.job.checkout false) | quote }}
- name: PI_DISPATCH_JOB_WORKSPACE_SIZE_LIMIT
  value: {{ .Values.job.workspace.sizeLimit | quote }}
- name: PI_DISPATCH_JOB_EPHEMERAL_STORAGE_REQUEST
  value: {{ .Values.job.ephemeralStorage.request | quote }}
- name: PI_DISPATCH_JOB_EPHEMERAL_STORAGE_LIMIT
  value: {{ .Values.job.ephemeralStorage.limit | quote }}
- name: PI_DISPATCH_RELEASE
  value: {{ .Release.Name | quote }}
- name: PI_DISPATCH_JOB_GIT_NAME
  value: {{ .Values.job.git.name | quote }}
- name: PI_DISPATCH_JOB_GIT_EMAIL
  value: {{ .Values.job.git.email | quote }}
- name: PI_DISPATCH_METRICS_PORT
  value: {{ .Values.metrics.port | int64 | quote }}
- name: PI_DISPATCH_HEALTH_PORT
  value: {{ .Values.health.port | int64 | quote }}
- name: PI_DISPATCH_LEASE
  value: {{ include "pi-dispatch.fullname" . | quote }}
{{- with .Values.github.authSource }}
- name: GITHUB_AUTH_SOURCE
  value: {{ . | quote }}
{{- end }}
{{- include "pi-dispatch.githubEnv" . }}
{{- include "pi-dispatch.gatewayOperatorEnv" . }}
{{- if .Values.sessions.enabled }}
{{- if and (eq (.Values.github.authSource | default "gh") "gh") (not .Values.sessions.allowGhSource) }}
{{- fail "sessions.enabled=true with github.authSource gh (the default when unset) can never resume: every job of a Trigger with run.resume would be refused (config-refused), because the whole gh login would reach every job and could be kept in its transcript. Set github.authSource=app (a GitHub App, see docs/quickstart.md) or pat (github.token.secretName), or knowingly set sessions.allowGhSource=true, or leave sessions.enabled false" }}
{{- end }}
- name: PI_SESSIONS_DIR
  value: /var/lib/pi-dispatch/sessions
- name: PI_DISPATCH_STAGING_DIR
  value: /var/lib/pi-dispatch/jobs
- name: PI_DISPATCH_STAGING_CLAIM
  value: {{ include "pi-dispatch.stagingClaim" . | quote }}
{{- if include "pi-dispatch.transferEnabled" . }}
{{- $t := .Values.sessions.staging.transfer }}
- name: PI_DISPATCH_STAGING_MODE
  value: transfer
- name: PI_DISPATCH_TRANSFER_PORT
  value: {{ $t.port | int64 | quote }}
- name: PI_DISPATCH_TRANSFER_URL
  value: {{ include "pi-dispatch.transferBaseURL" . | quote }}
- name: PI_DISPATCH_TRANSFER_CERT_FILE
  value: {{ printf "%s/tls.crt" (include "pi-dispatch.transferTLSDir" .) | quote }}
- name: PI_DISPATCH_TRANSFER_KEY_FILE
  value: {{ printf "%s/tls.key" (include "pi-dispatch.transferTLSDir" .) | quote }}
- name: PI_DISPATCH_TRANSFER_TOKEN_KEY_FILE
  value: {{ printf "%s/key" (include "pi-dispatch.transferKeyDir" .) | quote }}
- name: PI_DISPATCH_TRANSFER_MAX_BYTES
  value: {{ $t.maxBytes | int64 | quote }}
- name: PI_DISPATCH_TRANSFER_MAX_CONNECTIONS
  value: {{ $t.maxConnections | int64 | quote }}
- name: PI_DISPATCH_TRANSFER_HEAD_SECONDS
  value: {{ $t.headSeconds | int64 | quote }}
- name: PI_DISPATCH_TRANSFER_IDLE_SECONDS
  value: {{ $t.idleSeconds | int64 | quote }}
- name: PI_DISPATCH_TRANSFER_BODY_SECONDS
  value: {{ $t.bodySeconds | int64 | quote }}
- name: PI_DISPATCH_TRANSFER_CA_CONFIGMAP
  value: {{ include "pi-dispatch.transferCAConfigMap" . | quote }}
{{- else if not (has "ReadWriteMany" .Values.sessions.staging.accessModes) }}
- name: PI_DISPATCH_STAGING_COLOCATE
  value: {{ include "pi-dispatch.operatorSelectorLabels" . | fromYaml | toJson | quote }}
- name: PI_DISPATCH_NODE_NAME
  valueFrom:
    fieldRef:
      fieldPath: spec.nodeName
{{- end }}
{{- $s := .Values.sessions }}
{{- $bounds := list
      (list "PI_SESSIONS_TTL_DAYS" $s.ttlDays)
      (list "PI_SESSION_MAX_BYTES" $s.maxBytes)
      (list "PI_SESSION_MAX_AGE_DAYS" $s.maxAgeDays)
      (list "PI_SESSION_MAX_RESUME_CHAIN" $s.maxResumeChain)
      (list "PI_SESSION_MAX_CONTEXT_PCT" $s.maxContextPct)
      (list "PI_SESSION_RETHREAD_PCT" $s.rethreadPct) }}
{{- range $bounds }}
{{- if not (kindIs "invalid" (index . 1)) }}
- name: {{ index . 0 }}
  value: {{ index . 1 | int64 | quote }}
{{- end }}
{{- end }}
{{- if $s.allowGhSource }}
- name: PI_SESSIONS_ALLOW_GH_SOURCE
  value: "1"
{{- end }}
- name: PI_DISPATCH_RETIRE
  value: {{ $s.retire | default "delete" | quote }}
{{- if not (kindIs "invalid" $s.quarantineAfter) }}
- name: PI_DISPATCH_QUARANTINE_AFTER
  value: {{ $s.quarantineAfter | int64 | quote }}
{{- end }}
{{- end }}
{{- end }}

{{/* Volumes: /tmp (the root filesystem is read-only) and, with sessions, the two PVCs ------- */}}

{{- define "pi-dispatch.volumeMounts" -}}
- name: tmp
  mountPath: /tmp
{{- if .Values.sessions.enabled }}
- name: sessions
  mountPath: /var/lib/pi-dispatch/sessions
- name: staging
  mountPath: /var/lib/pi-dispatch/jobs
{{- end }}
{{- include "pi-dispatch.githubVolumeMounts" . }}
{{- if include "pi-dispatch.transferEnabled" . }}
- name: transfer-key
  mountPath: {{ include "pi-dispatch.transferKeyDir" . }}
  readOnly: true
- name: transfer-tls
  mountPath: {{ include "pi-dispatch.transferTLSDir" . }}
  readOnly: true
{{- end }}
{{- if include "pi-dispatch.gatewayEnabled" . }}
- name: gateway-key
  mountPath: {{ include "pi-dispatch.gatewayKeyDir" . }}
  readOnly: true
{{- end }}
{{- end }}

{{- define "pi-dispatch.volumes" -}}
- name: tmp
  emptyDir: {}
{{- if .Values.sessions.enabled }}
- name: sessions
  persistentVolumeClaim:
    claimName: {{ include "pi-dispatch.storeClaim" . }}
- name: staging
  persistentVolumeClaim:
    claimName: {{ include "pi-dispatch.stagingClaim" . }}
{{- end }}
{{- include "pi-dispatch.githubVolumes" . }}
{{- if include "pi-dispatch.transferEnabled" . }}
- name: transfer-key
  secret:
    secretName: {{ include "pi-dispatch.transferSecret" . | quote }}
    defaultMode: 0440
    items:
      - key: key
        path: key
- name: transfer-tls
  secret:
    secretName: {{ include "pi-dispatch.transferTLSSecret" . | quote }}
    defaultMode: 0440
    items:
      - key: tls.crt
        path: tls.crt
      - key: tls.key
        path: tls.key
{{- end }}
{{- if include "pi-dispatch.gatewayEnabled" . }}
# The gateway key only (to mint each job's capability): never the gateway's TLS key.
- name: gateway-key
  secret:
    secretName: {{ include "pi-dispatch.gatewaySecret" . | quote }}
    defaultMode: 0440
    items:
      - key: key
        path: key
{{- end }}
{{- end }}

{{/* GitHub: the API, the App (its key mounted from a Secret) or a pat/gh token Secret --------- */}}

{{/* The GitHub credential's files (the App's key, the token, a private CA), as the operator mounts them and the
receiver in poll mode. */}}
{{- define "pi-dispatch.githubVolumeMounts" -}}
{{- if .Values.github.app.id }}
- name: github-app
  mountPath: {{ include "pi-dispatch.githubAppDir" . }}
  readOnly: true
{{- end }}
{{- if .Values.github.token.secretName }}
- name: github-token
  mountPath: {{ include "pi-dispatch.githubTokenDir" . }}
  readOnly: true
{{- end }}
{{- if .Values.github.caBundle.configMap }}
- name: ca-bundle
  mountPath: /etc/pi-dispatch/ca
  readOnly: true
{{- end }}
{{- end }}

{{- define "pi-dispatch.githubVolumes" -}}
{{- if .Values.github.app.id }}
- name: github-app
  secret:
    secretName: {{ .Values.github.app.privateKeySecret.name | quote }}
    # readable by the operator's group (fsGroup) only
    defaultMode: 0440
    items:
      - key: {{ .Values.github.app.privateKeySecret.key | quote }}
        path: private-key.pem
{{- end }}
{{- if .Values.github.token.secretName }}
- name: github-token
  secret:
    secretName: {{ .Values.github.token.secretName | quote }}
    defaultMode: 0440
    items:
      - key: {{ .Values.github.token.key | quote }}
        path: token
{{- end }}
{{- with .Values.github.caBundle.configMap }}
- name: ca-bundle
  configMap:
    name: {{ . | quote }}
    items:
      - key: ca.crt
        path: ca.crt
{{- end }}
{{- end }}

{{- define "pi-dispatch.githubAppDir" -}}
/etc/pi-dispatch/github-app
{{- end }}

{{- define "pi-dispatch.githubTokenDir" -}}
/etc/pi-dispatch/github-token
{{- end }}

{{/* GITHUB_* of OperatorSettings; a combination the operator would refuse at start fails the install. */}}
{{- define "pi-dispatch.githubEnv" -}}
{{- $g := .Values.github }}
{{- $source := $g.authSource | default "gh" }}
- name: GITHUB_API_URL
  value: {{ $g.apiUrl | quote }}
- name: GITHUB_API_TIMEOUT_SECONDS
  value: {{ $g.timeoutSeconds | int64 | quote }}
- name: GITHUB_WEB_URL
  value: {{ $g.webUrl | quote }}
{{- with $g.caBundle.configMap }}
- name: GITHUB_CA_BUNDLE_CONFIGMAP
  value: {{ . | quote }}
- name: GITHUB_CA_BUNDLE_FILE
  value: /etc/pi-dispatch/ca/ca.crt
{{- end }}
{{- if $g.app.id }}
{{- if ne $source "app" }}
{{- fail (printf "github.app.id is set but github.authSource is %s: the App is used only with github.authSource=app" $source) }}
{{- end }}
{{- if not $g.app.installationId }}
{{- fail "github.app.id needs github.app.installationId (the App's installation on your account)" }}
{{- end }}
{{- if not $g.app.privateKeySecret.name }}
{{- fail "github.app.id needs github.app.privateKeySecret.name: an existing Secret holding the App's private key" }}
{{- end }}
- name: GITHUB_APP_ID
  value: {{ $g.app.id | int64 | quote }}
- name: GITHUB_APP_INSTALLATION_ID
  value: {{ $g.app.installationId | int64 | quote }}
- name: GITHUB_APP_PRIVATE_KEY_FILE
  value: {{ printf "%s/private-key.pem" (include "pi-dispatch.githubAppDir" .) | quote }}
{{- with $g.app.jobPermissions }}
- name: PI_DISPATCH_JOB_TOKEN_PERMISSIONS
  value: {{ . | toJson | quote }}
{{- end }}
{{- end }}
{{- if $g.token.secretName }}
{{- if eq $source "app" }}
{{- fail "github.token.secretName is set but github.authSource is app: the token Secret is used only with pat or gh" }}
{{- end }}
- name: GITHUB_TOKEN_FILE
  value: {{ printf "%s/token" (include "pi-dispatch.githubTokenDir" .) | quote }}
- name: GITHUB_TOKEN_SECRET
  value: {{ printf "%s/%s" $g.token.secretName $g.token.key | quote }}
{{- end }}
{{- end }}

{{/* Security: the restricted Pod Security Standard ------------------------------------------ */}}

{{- define "pi-dispatch.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: {{ .Values.securityContext.runAsUser | int64 }}
runAsGroup: {{ .Values.securityContext.runAsGroup | int64 }}
fsGroup: {{ .Values.securityContext.fsGroup | int64 }}
# a large store is not re-chowned on every start
fsGroupChangePolicy: OnRootMismatch
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{- define "pi-dispatch.containerSecurityContext" -}}
runAsNonRoot: true
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: [ALL]
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{/* A PVC (store or staging) from its values. */}}
{{- define "pi-dispatch.pvcSpec" -}}
accessModes:
  {{- toYaml .accessModes | nindent 2 }}
{{- if not (kindIs "invalid" .storageClassName) }}
storageClassName: {{ .storageClassName | quote }}
{{- end }}
resources:
  requests:
    storage: {{ .size | quote }}
{{- end }}

{{/* The webhook receiver ----------------------------------------------------------------- */}}

{{- define "pi-dispatch.receiverName" -}}
{{- printf "%s-receiver" (include "pi-dispatch.fullname" .) }}
{{- end }}

{{- define "pi-dispatch.receiverSelectorLabels" -}}
{{ include "pi-dispatch.selectorLabels" . }}
app.kubernetes.io/component: receiver
{{- end }}

{{/* The Secret holding the webhook secret: the user's, or the one the chart creates. */}}
{{- define "pi-dispatch.receiverSecretName" -}}
{{- $w := .Values.receiver.webhookSecret }}
{{- if and $w.existingSecret $w.create }}
{{- fail "receiver.webhookSecret: set existingSecret or create=true, not both" }}
{{- else if $w.existingSecret }}
{{- $w.existingSecret }}
{{- else if $w.create }}
{{- if not $w.value }}
{{- fail "receiver.webhookSecret.create=true needs receiver.webhookSecret.value (the secret you give GitHub)" }}
{{- end }}
{{- printf "%s-webhook" (include "pi-dispatch.fullname" .) }}
{{- else }}
{{- fail "receiver.enabled=true needs the webhook secret: receiver.webhookSecret.existingSecret (and .key), or receiver.webhookSecret.create=true with .value" }}
{{- end }}
{{- end }}

{{/* Where the receiver reads the webhook secret (GITHUB_WEBHOOK_SECRET_FILE). */}}
{{- define "pi-dispatch.receiverSecretDir" -}}
/etc/pi-dispatch/webhook
{{- end }}

{{/* The receiver's environment (ReceiverSettings.from_env). */}}
{{- define "pi-dispatch.receiverEnv" -}}
- name: PI_DISPATCH_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
- name: PI_DISPATCH_RECEIVER_PORT
  value: {{ .Values.receiver.port | int64 | quote }}
- name: PI_DISPATCH_RECEIVER_MAX_BODY
  value: {{ .Values.receiver.maxBodyBytes | int64 | quote }}
{{- if .Values.receiver.poll.enabled }}
- name: PI_DISPATCH_RECEIVER_MODE
  value: poll
- name: PI_DISPATCH_RECEIVER_POLL_INTERVAL_SECONDS
  value: {{ .Values.receiver.poll.intervalSeconds | int64 | quote }}
- name: PI_DISPATCH_RECEIVER_POLL_CURSOR
  value: {{ include "pi-dispatch.receiverPollCursor" . | quote }}
{{- include "pi-dispatch.githubEnv" . }}
{{- else }}
- name: GITHUB_WEBHOOK_SECRET_FILE
  value: {{ printf "%s/secret" (include "pi-dispatch.receiverSecretDir" .) | quote }}
{{- end }}
{{- with .Values.github.authSource }}
- name: GITHUB_AUTH_SOURCE
  value: {{ . | quote }}
{{- end }}
{{- end }}

{{/* The ConfigMap the receiver's poller keeps its cursor in (receiver/poll/cursor.py). */}}
{{- define "pi-dispatch.receiverPollCursor" -}}
{{- printf "%s-poll-cursor" (include "pi-dispatch.receiverName" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
