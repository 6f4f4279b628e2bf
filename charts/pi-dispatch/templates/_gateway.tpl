{{/* The gateway (gateway.enabled, docs/gateway.md): names shared by the gateway-*.yaml templates and the operator's
env. Its ports are the wire's constants (operator/pidispatch/contract/gateway_wire.py): HTTPS 8443 (the Service's 443),
the CONNECT proxy 3128, health/readiness/metrics 9090 (never on the Service job Pods reach). */}}

{{/* The gateway's values with the chart's defaults under them. `helm upgrade --reuse-values` (docs/upgrading.md) from a
release made before the gateway reuses that release's values, which have no `gateway` at all: these defaults are
values.yaml's (tests/chart/test_chart_gateway.py renders with gateway=null and holds the two equal). */}}
{{- define "pi-dispatch.gatewayValues" -}}
{{- $defaults := dict "enabled" true "replicas" 2 "defaultMaxTokens" nil "egress" (dict "hosts" list "deniedNetworks" list) "url" nil "proxyUrl" nil "extraDNSNames" list "podDisruptionBudget" (dict "enabled" true) "serviceMonitor" (dict "enabled" true) "resources" (dict "requests" (dict "cpu" "50m" "memory" "128Mi") "limits" (dict "memory" "512Mi")) "affinity" dict "podAnnotations" dict "podLabels" dict }}
{{- /* Not mergeOverwrite: it takes no false or 0 over a default (enabled=false would stay true). Helm has already
coalesced a present `gateway` with values.yaml, so a key given wins whole, a map's keys one level down. */}}
{{- $out := deepCopy $defaults }}
{{- range $key, $value := (.Values.gateway | default dict) }}
{{- if and (kindIs "map" $value) (kindIs "map" (get $out $key)) }}
{{- $inner := get $out $key }}
{{- range $k, $v := $value }}{{- $_ := set $inner $k $v }}{{- end }}
{{- else }}
{{- $_ := set $out $key $value }}
{{- end }}
{{- end }}
{{- $out | toJson }}
{{- end }}

{{- define "pi-dispatch.gatewayEnabled" -}}
{{- if (include "pi-dispatch.gatewayValues" . | fromJson).enabled }}true{{- end }}
{{- end }}

{{- define "pi-dispatch.gatewayName" -}}
{{- printf "%s-gateway" (include "pi-dispatch.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "pi-dispatch.gatewaySelectorLabels" -}}
{{ include "pi-dispatch.selectorLabels" . }}
app.kubernetes.io/component: gateway
{{- end }}

{{/* The Secret of the gateway key ("key": the operator mints capabilities with it, the gateway verifies them) and
of the serving certificate (tls.crt, tls.key, ca.crt): made once, kept across upgrades (gateway-secret.yaml). */}}
{{- define "pi-dispatch.gatewaySecret" -}}
{{- include "pi-dispatch.gatewayName" . }}
{{- end }}

{{/* The ConfigMap job Pods mount for the CA (key ca.crt): public, so job Pods never read a Secret of the gateway. */}}
{{- define "pi-dispatch.gatewayCAConfigMap" -}}
{{- printf "%s-ca" (include "pi-dispatch.gatewayName" .) }}
{{- end }}

{{/* The DNS names the serving certificate carries: the gateway Service's, as job Pods address it, and the names of
extraDNSNames (its IP addresses are gatewayIPs). */}}
{{- define "pi-dispatch.gatewayDNSNames" -}}
{{- $svc := include "pi-dispatch.gatewayName" . }}
{{- $names := list $svc (printf "%s.%s" $svc .Release.Namespace) (printf "%s.%s.svc" $svc .Release.Namespace) (printf "%s.%s.svc.cluster.local" $svc .Release.Namespace) }}
{{- range (include "pi-dispatch.gatewayValues" . | fromJson).extraDNSNames }}
{{- if not (regexMatch "^[0-9.]+$|:" .) }}{{ $names = append $names . }}{{ end }}
{{- end }}
{{- $names | toJson }}
{{- end }}

{{/* The IP addresses of extraDNSNames (a gateway.url by address: a harness whose Pods have no cluster DNS). */}}
{{- define "pi-dispatch.gatewayIPs" -}}
{{- $ips := list }}
{{- range (include "pi-dispatch.gatewayValues" . | fromJson).extraDNSNames }}
{{- if regexMatch "^[0-9.]+$|:" . }}{{ $ips = append $ips . }}{{ end }}
{{- end }}
{{- $ips | toJson }}
{{- end }}

{{/* PI_GATEWAY_URL of job Pods: no port (443), since gh matches a git remote by host alone. */}}
{{- define "pi-dispatch.gatewayURL" -}}
{{- (include "pi-dispatch.gatewayValues" . | fromJson).url | default (printf "https://%s.%s.svc" (include "pi-dispatch.gatewayName" .) .Release.Namespace) }}
{{- end }}

{{/* PI_GATEWAY_PROXY of job Pods (the runner adds the capability as the proxy password). */}}
{{- define "pi-dispatch.gatewayProxyURL" -}}
{{- (include "pi-dispatch.gatewayValues" . | fromJson).proxyUrl | default (printf "http://%s.%s.svc:3128" (include "pi-dispatch.gatewayName" .) .Release.Namespace) }}
{{- end }}

{{/* Where the operator and the gateway read their files (the Secrets' and ConfigMap's mounts). */}}
{{- define "pi-dispatch.gatewayKeyDir" -}}/etc/pi-dispatch/gateway-key{{- end }}
{{- define "pi-dispatch.gatewayTLSDir" -}}/etc/pi-dispatch/gateway-tls{{- end }}
{{- define "pi-dispatch.gatewayModelsDir" -}}/etc/pi-dispatch/models{{- end }}

{{/* The operator's gateway env (OperatorSettings), with gateway.enabled: where job Pods reach the gateway, the CA
ConfigMap they mount, the key it mints capabilities with, the default token budget. */}}
{{- define "pi-dispatch.gatewayOperatorEnv" -}}
{{- $gw := include "pi-dispatch.gatewayValues" . | fromJson }}
{{- if $gw.enabled }}
- name: PI_DISPATCH_GATEWAY_URL
  value: {{ include "pi-dispatch.gatewayURL" . | quote }}
- name: PI_DISPATCH_GATEWAY_PROXY
  value: {{ include "pi-dispatch.gatewayProxyURL" . | quote }}
- name: PI_DISPATCH_GATEWAY_CA_CONFIGMAP
  value: {{ include "pi-dispatch.gatewayCAConfigMap" . | quote }}
- name: PI_DISPATCH_GATEWAY_KEY_FILE
  value: {{ printf "%s/key" (include "pi-dispatch.gatewayKeyDir" .) | quote }}
{{- if not (kindIs "invalid" $gw.defaultMaxTokens) }}
- name: PI_DISPATCH_GATEWAY_DEFAULT_MAX_TOKENS
  value: {{ $gw.defaultMaxTokens | int64 | quote }}
{{- end }}
{{- end }}
{{- end }}
