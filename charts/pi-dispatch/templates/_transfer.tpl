{{/* Staging by transfer (sessions.staging.mode: transfer): names shared by the transfer-*.yaml templates. */}}

{{- define "pi-dispatch.transferEnabled" -}}
{{- if and .Values.sessions.enabled (eq (.Values.sessions.staging.mode | default "mount") "transfer") }}true{{- end }}
{{- end }}

{{- define "pi-dispatch.transferName" -}}
{{- printf "%s-transfer" (include "pi-dispatch.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The Secret the operator mounts: its HMAC key ("key") and, without cert-manager, tls.crt/tls.key/ca.crt. */}}
{{- define "pi-dispatch.transferSecret" -}}
{{- include "pi-dispatch.transferName" . }}
{{- end }}

{{/* cert-manager's Secret for the serving certificate (only with sessions.staging.transfer.certManager.issuer). */}}
{{- define "pi-dispatch.transferTLSSecret" -}}
{{- if .Values.sessions.staging.transfer.certManager.issuer }}
{{- printf "%s-tls" (include "pi-dispatch.transferName" .) }}
{{- else }}
{{- include "pi-dispatch.transferSecret" . }}
{{- end }}
{{- end }}

{{/* The ConfigMap job Pods mount for the CA (key ca.crt): public, so job Pods never read a Secret of the operator. */}}
{{- define "pi-dispatch.transferCAConfigMap" -}}
{{- if .Values.sessions.staging.transfer.certManager.issuer }}
{{- required "sessions.staging.transfer.certManager.caConfigMap: name the ConfigMap (key ca.crt) holding the CA of the cert-manager issuer, for job Pods to verify the operator" .Values.sessions.staging.transfer.certManager.caConfigMap }}
{{- else }}
{{- printf "%s-ca" (include "pi-dispatch.transferName" .) }}
{{- end }}
{{- end }}

{{/* The DNS names the serving certificate carries: the transfer Service's, as job Pods address it. */}}
{{- define "pi-dispatch.transferDNSNames" -}}
{{- $svc := include "pi-dispatch.transferName" . }}
{{- concat (list $svc (printf "%s.%s" $svc .Release.Namespace) (printf "%s.%s.svc" $svc .Release.Namespace) (printf "%s.%s.svc.cluster.local" $svc .Release.Namespace)) (.Values.sessions.staging.transfer.extraDNSNames | default list) | toJson }}
{{- end }}

{{/* PI_TRANSFER_URL's base for job Pods (the operator appends /v1/jobs/<uid>/session). */}}
{{- define "pi-dispatch.transferBaseURL" -}}
{{- if .Values.sessions.staging.transfer.url }}
{{- .Values.sessions.staging.transfer.url }}
{{- else }}
{{- printf "https://%s.%s.svc:%d" (include "pi-dispatch.transferName" .) .Release.Namespace (.Values.sessions.staging.transfer.port | int) }}
{{- end }}
{{- end }}

{{/* Where the operator reads its transfer files (the Secrets' mounts). */}}
{{- define "pi-dispatch.transferKeyDir" -}}/etc/pi-dispatch/transfer-key{{- end }}
{{- define "pi-dispatch.transferTLSDir" -}}/etc/pi-dispatch/transfer-tls{{- end }}
