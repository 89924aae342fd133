{{/* Name of the chart (app.kubernetes.io/name is always sandbox-process-operator: the operator finds its agents by it). */}}
{{- define "spo.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "spo.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "spo.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: sandbox-process-operator
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: sandbox-process-operator
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Selector labels; $component is operator or agent. The operator discovers agents by
     app.kubernetes.io/name=sandbox-process-operator,app.kubernetes.io/component=agent. */}}
{{- define "spo.selectorLabels" -}}
app.kubernetes.io/name: sandbox-process-operator
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "spo.componentLabels" -}}
{{ include "spo.labels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "spo.operator.serviceAccountName" -}}
{{- if .Values.operator.serviceAccount.create -}}
{{- default (printf "%s-operator" (include "spo.fullname" .)) .Values.operator.serviceAccount.name -}}
{{- else -}}
{{- required "operator.serviceAccount.name is required when operator.serviceAccount.create is false" .Values.operator.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "spo.agent.serviceAccountName" -}}
{{- if .Values.agent.serviceAccount.create -}}
{{- default (printf "%s-agent" (include "spo.fullname" .)) .Values.agent.serviceAccount.name -}}
{{- else -}}
{{- required "agent.serviceAccount.name is required when agent.serviceAccount.create is false" .Values.agent.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The one user the agents accept. */}}
{{- define "spo.operator.user" -}}
system:serviceaccount:{{ .Release.Namespace }}:{{ include "spo.operator.serviceAccountName" . }}
{{- end -}}

{{/* image reference: repository[:tag|@digest]; tag defaults to the appVersion. */}}
{{- define "spo.image" -}}
{{- $img := .image -}}
{{- $repo := $img.repository -}}
{{- /* global.imageRegistry replaces the registry of the repository (its first part when that
is a host: has a "." or ":" or is "localhost"), or is put in front of one that names none. */ -}}
{{- with (.root.Values.global | default dict).imageRegistry -}}
{{- $parts := splitList "/" $repo -}}
{{- $first := first $parts -}}
{{- if and (gt (len $parts) 1) (or (contains "." $first) (contains ":" $first) (eq $first "localhost")) -}}
{{- $repo = printf "%s/%s" . (rest $parts | join "/") -}}
{{- else -}}
{{- $repo = printf "%s/%s" . $repo -}}
{{- end -}}
{{- end -}}
{{- if $img.digest -}}
{{- printf "%s@%s" $repo $img.digest -}}
{{- else -}}
{{- printf "%s:%s" $repo (default .root.Chart.AppVersion $img.tag) -}}
{{- end -}}
{{- end -}}

{{/*
The agent's CRI socket, runtime binary and runtime root: agent.runtimePreset's, each overridden by
a non-empty agent.cri value. Returns YAML: socket, runtimeBinary, runtimeRoot.
*/}}
{{- define "spo.agent.runtime" -}}
{{- $presets := dict
  "containerd-debian" (dict "socket" "/run/containerd/containerd.sock" "runtimeBinary" "/usr/sbin/runc" "runtimeRoot" "/run/containerd/runc/k8s.io")
  "containerd" (dict "socket" "/run/containerd/containerd.sock" "runtimeBinary" "/usr/local/sbin/runc" "runtimeRoot" "/run/containerd/runc/k8s.io")
  "kind" (dict "socket" "/run/containerd/containerd.sock" "runtimeBinary" "/usr/local/sbin/runc" "runtimeRoot" "/run/containerd/runc/k8s.io")
  "k3s" (dict "socket" "/run/k3s/containerd/containerd.sock" "runtimeBinary" "/var/lib/rancher/k3s/data/current/bin/runc" "runtimeRoot" "/run/containerd/runc/k8s.io")
  "rke2" (dict "socket" "/run/k3s/containerd/containerd.sock" "runtimeBinary" "/var/lib/rancher/rke2/bin/runc" "runtimeRoot" "/run/containerd/runc/k8s.io")
  "cri-o" (dict "socket" "/var/run/crio/crio.sock" "runtimeBinary" "/usr/bin/runc" "runtimeRoot" "/run/runc")
-}}
{{- $preset := get $presets .Values.agent.runtimePreset -}}
{{- if not $preset -}}
{{- fail (printf "agent.runtimePreset %q is not one of: %s" .Values.agent.runtimePreset (keys $presets | sortAlpha | join ", ")) -}}
{{- end -}}
{{- $cri := .Values.agent.cri -}}
socket: {{ $cri.socket | default $preset.socket | quote }}
runtimeBinary: {{ $cri.runtimeBinary | default $preset.runtimeBinary | quote }}
runtimeRoot: {{ $cri.runtimeRoot | default $preset.runtimeRoot | quote }}
{{- end -}}

{{/*
What Pod Security judges of the agent's pod, in one place for the DaemonSet and the
pre-install check (templates/needs-namespace-label/): hostPID, the container's securityContext
and the two hostPath volumes. spo.agent.hostPathVolumes takes (dict "root" . "checkOnly" BOOL):
checkOnly leaves the hostPath type unset, so the check pod, which mounts neither, makes and
checks nothing on the node.
*/}}
{{- define "spo.agent.containerSecurityContext" -}}
privileged: true
runAsUser: 0
runAsGroup: 0
readOnlyRootFilesystem: true
{{- end -}}

{{- define "spo.agent.hostPathVolumes" -}}
{{- $runtime := include "spo.agent.runtime" .root | fromYaml -}}
- name: state
  hostPath:
    path: {{ .root.Values.agent.stateDir }}
    {{- if not .checkOnly }}
    type: DirectoryOrCreate
    {{- end }}
- name: cri
  hostPath:
    path: {{ dir $runtime.socket }}
    {{- if not .checkOnly }}
    type: Directory
    {{- end }}
{{- end -}}

{{/* The job labels the Prometheus Operator gives the targets of the chart's monitors (a
     ServiceMonitor's: the Service's name; a PodMonitor's: <its namespace>/<its name>), and the
     PromQL label matchers the alerts select the operator's and the agents' series by. */}}
{{- define "spo.metrics.operatorJob" -}}
{{ include "spo.fullname" . }}-operator-metrics
{{- end -}}
{{- define "spo.metrics.agentJob" -}}
{{ .Values.metrics.serviceMonitor.namespace | default .Release.Namespace }}/{{ include "spo.fullname" . }}-agent
{{- end -}}
{{- define "spo.metrics.operatorSelector" -}}
{{- .Values.metrics.prometheusRule.operatorSelector | default (printf "job=%q" (include "spo.metrics.operatorJob" .)) -}}
{{- end -}}
{{- define "spo.metrics.agentSelector" -}}
{{- .Values.metrics.prometheusRule.agentSelector | default (printf "job=%q" (include "spo.metrics.agentJob" .)) -}}
{{- end -}}

{{- /*
"true" on an upgrade over a release whose agents speak plain HTTP (the releases before agent mutual
TLS): its agent DaemonSet, found by lookup, runs without --tls=csr. No operator then reaches an agent
of the other side, so the agents roll all at once and the operator is replaced, not rolled (two
would hold different leases): the window without a reachable agent is one restart, not a rollout
(docs/operations/upgrade.md). Empty on installs and where lookup finds nothing (helm template, GitOps).
*/ -}}
{{- define "spo.fromPlainAgents" -}}
{{- with lookup "apps/v1" "DaemonSet" .Release.Namespace (printf "%s-agent" (include "spo.fullname" .)) -}}
{{- if not (contains "--tls=csr" (toJson .spec.template.spec.containers)) }}true{{ end -}}
{{- end -}}
{{- end -}}
