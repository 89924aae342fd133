# Shared helpers of the e2e suites (sourced after `eval "$(e2e/cluster env)"`).
#
# Each suite makes its own preconditions true instead of assuming what ran before it:
#   fresh_namespace NS     the namespace of an earlier run gone (finalizers dropped if no operator
#                          is left to handle them), then created anew
#   no_namespace NS        the same, without creating it (for `helm install --create-namespace`)
#   ready_namespace NS     NS usable now: one still Terminating (an earlier suite's async delete)
#                          waited out, then created if absent; what is in it is kept
#   on_node1               stdin → stdout: every Pod and pod template of a manifest pinned to
#                          node 1 ($NODE1), the node whose host the suites check from
#   node1_pods NS SELECTOR [GET-ARGS...]   `kubectl get pods` of SELECTOR on node 1 only
#   no_release             no chart release of ours in any namespace, no operator or agent pod left
#   check NAME CMD...      runs one check; "ok"/"FAIL" with the output indented ("note:" lines
#                          of a passing check are shown)
#   summary                the "N passed, M failed" line every suite ends with; its exit status
#
# and, for suites that drive SandboxProcesses in one test namespace ($SPO_NS):
#   k ARGS...              kubectl -n $SPO_NS
#   get NAME JSONPATH      a field of a SandboxProcess ('' if absent)
#   cond NAME TYPE         a condition as STATUS/REASON
#   status_of NAME         its status, for a failure's output
#   wait_for NAME JSONPATH VALUE [SECONDS]   polls until the field has the value (default 60 s)
#   expect GOT WANT        one comparison with a readable failure
#   sbp_yaml NAME POD SPEC-LINES...          one SandboxProcess document; sbp applies it
#   pod_yaml NAME [MEMORY-LIMIT]             a sleeping pod of the workload image on node 1; pod
#                                            applies it
#   in_pod POD CMD...      kubectl exec into its main container
# shellcheck shell=bash

passed=0
failed=0

check() {
  local name=$1 out l
  shift
  if out=$("$@" 2>&1); then
    passed=$((passed + 1)); printf 'ok   %s\n' "$name"
    # a check may report a figure on a line "note: ..."
    while IFS= read -r l; do case $l in note:*) printf '     %s\n' "$l" ;; esac; done <<<"$out"
  else
    failed=$((failed + 1)); printf 'FAIL %s\n' "$name"
    while IFS= read -r l; do printf '     | %s\n' "$l"; done <<<"$out"
  fi
}

summary() {
  echo "$passed passed, $failed failed"
  [ "$failed" = 0 ]
}

# refuse MESSAGE: a precondition that cannot be made true; counted as one failure.
refuse() {
  echo "FAIL precondition: $*"
  echo "0 passed, 1 failed"
  exit 1
}

SPO_CHART_LABEL=app.kubernetes.io/name=sandbox-process-operator

# Node 1 (lib/common.sh's NODE_NAME): the machine's own host, where the control plane, the
# suites' host-side checks (/proc, runc's root, agents run on the host, state dirs, the registry
# on 127.0.0.1) and node 1's containerd are. A cluster may have more nodes (e2e/cluster up
# --nodes N, left by e2e/suites/nodes or a user): a pod a suite checks from the host must be on node 1.
NODE1=$(. "$(dirname "${BASH_SOURCE[0]}")/../../lib/common.sh" && echo "$NODE_NAME")

# on_node1: a manifest (stdin, YAML documents) with every Pod and every pod template (Deployment,
# DaemonSet, ReplicaSet, StatefulSet, Job) pinned to node 1 by a nodeSelector; other documents
# unchanged.
on_node1() {
  python3 -c '
import sys, yaml
node = sys.argv[1]
docs = [d for d in yaml.safe_load_all(sys.stdin) if d]
for d in docs:
    kind = d.get("kind")
    if kind == "Pod":
        spec = d.setdefault("spec", {})
    elif kind in ("Deployment", "DaemonSet", "ReplicaSet", "StatefulSet", "Job"):
        spec = d.setdefault("spec", {}).setdefault("template", {}).setdefault("spec", {})
    else:
        continue
    spec.setdefault("nodeSelector", {})["kubernetes.io/hostname"] = node
sys.stdout.write(yaml.safe_dump_all(docs, sort_keys=False))' "$NODE1"
}

# node1_pods NS SELECTOR [ARGS...]: kubectl get pods of SELECTOR on node 1 (e.g. the release's
# agent there, the one a host-side check looks at).
node1_pods() {
  kubectl -n "$1" get pods -l "$2" --field-selector "spec.nodeName=$NODE1" "${@:3}"
}

# lease_holder: the operator holding the cluster's one leader Lease, as NAMESPACE/POD.
lease_holder() {
  kubectl -n kube-system get lease sandboxprocesses.sandbox.dev -o jsonpath='{.spec.holderIdentity}'
}

# drop_finalizers NS: SandboxProcesses left with the operator's finalizer and no operator to
# remove it would keep their namespace Terminating forever.
drop_finalizers() {
  local o
  for o in $(kubectl -n "$1" get sbp -o name 2>/dev/null); do
    kubectl -n "$1" patch "$o" --type=merge -p '{"metadata":{"finalizers":null}}' >/dev/null 2>&1 || true
  done
}

# Suites delete their namespaces with --wait=false at their end (a namespace takes seconds to
# go), so the next suite may find one still Terminating: nothing can be created in it then.
# gone_namespace NS: waits until NS, being deleted, is gone (finalizers dropped after 30 s: no
# operator may be left to handle them).
gone_namespace() {
  local ns=$1
  if ! kubectl wait --for=delete "namespace/$ns" --timeout=30s >/dev/null 2>&1; then
    drop_finalizers "$ns"
    kubectl wait --for=delete "namespace/$ns" --timeout=150s >/dev/null 2>&1 ||
      refuse "namespace $ns is still Terminating after 3 min: kubectl get namespace $ns -o yaml"
  fi
}

# no_namespace NS: deletes NS of an earlier run and waits until it is gone.
no_namespace() {
  local ns=$1
  kubectl get namespace "$ns" >/dev/null 2>&1 || return 0
  echo "removing namespace $ns left by an earlier run"
  kubectl -n "$ns" delete sbp --all --wait=false >/dev/null 2>&1 || true
  kubectl delete namespace "$ns" --wait=false >/dev/null 2>&1 || true
  gone_namespace "$ns"
}

# ready_namespace NS: NS exists and is not Terminating; an existing one is kept as it is (for a
# shared namespace such as a release's, which the suite does not own).
ready_namespace() {
  local ns=$1
  if [ "$(kubectl get namespace "$ns" -o jsonpath='{.status.phase}' 2>/dev/null)" = Terminating ]; then
    echo "waiting for namespace $ns (Terminating) to be gone"
    gone_namespace "$ns"
  fi
  kubectl create namespace "$ns" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
}

# fresh_namespace NS: deletes NS of an earlier run (waits until it is gone), then creates it.
fresh_namespace() {
  no_namespace "$1"
  kubectl create namespace "$1" >/dev/null
}

# no_release: uninstalls every release of this chart (the demo's included) after deleting every
# SandboxProcess while its operator still runs (the finalizer stops the process), and waits until
# no operator or agent pod of any release is left. Suites that run their own operator need this:
# two controllers would both act on the same objects.
no_release() {
  local rels ns name
  rels=$(helm list -A -o json 2>/dev/null | python3 -c '
import json, sys
for r in json.load(sys.stdin):
    if r["chart"].startswith("sandbox-process-operator-"):
        print(r["namespace"], r["name"])')
  [ -n "$rels" ] || [ -n "$(kubectl get pods -A -l "$SPO_CHART_LABEL" -o name 2>/dev/null)" ] || return 0
  echo "removing what an earlier run installed: every SandboxProcess, then the release(s)"
  kubectl delete sbp -A --all --timeout=90s >/dev/null 2>&1 || true
  for ns in $(kubectl get sbp -A -o jsonpath='{range .items[*]}{.metadata.namespace}{"\n"}{end}' 2>/dev/null | sort -u); do
    drop_finalizers "$ns"
  done
  while read -r ns name; do
    [ -n "$name" ] || continue
    helm uninstall "$name" -n "$ns" --wait --timeout 2m >/dev/null 2>&1 ||
      refuse "helm uninstall $name -n $ns failed; remove the release by hand"
  done <<<"$rels"
  # A failed `helm test` keeps its pod (and its rights) for its log; Helm never removes hooks.
  kubectl delete pod,serviceaccount,role,rolebinding -A -l "$SPO_CHART_LABEL,app.kubernetes.io/component=test" \
    --ignore-not-found --wait=false >/dev/null 2>&1 || true
  kubectl wait --for=delete pods -A -l "$SPO_CHART_LABEL" --timeout=120s >/dev/null 2>&1 || true
  [ -z "$(kubectl get pods -A -l "$SPO_CHART_LABEL" -o name 2>/dev/null)" ] ||
    refuse "operator/agent pods are still running: kubectl get pods -A -l $SPO_CHART_LABEL"
}

# --- SandboxProcesses in $SPO_NS ------------------------------------------------------------------
k() { kubectl -n "$SPO_NS" "$@"; }
get() { k get sbp "$1" -o "jsonpath=$2" 2>/dev/null; }
cond() { get "$1" "{.status.conditions[?(@.type==\"$2\")].status}/{.status.conditions[?(@.type==\"$2\")].reason}"; }
status_of() { echo "--- $1"; k get sbp "$1" -o yaml 2>&1 | sed -n '/^status:/,$p'; }
wait_for() {
  local deadline=$((SECONDS + ${4:-60})) v=
  while [ "$SECONDS" -lt "$deadline" ]; do
    v=$(get "$1" "$2") || true
    [ "$v" = "$3" ] && return 0
    sleep 0.5
  done
  echo "$1: $2 is '$v', expected '$3'"; status_of "$1"; return 1
}
expect() { [ "$1" = "$2" ] || { echo "expected '$2', got '$1'"; return 1; }; }
sbp_yaml() {
  local name=$1 pod=$2 l
  shift 2
  printf -- '---\napiVersion: sandbox.dev/v1alpha1\nkind: SandboxProcess\nmetadata: {name: %s}\nspec:\n  podName: %s\n' "$name" "$pod"
  for l in "$@"; do printf '  %s\n' "$l"; done
}
sbp() { sbp_yaml "$@" | k apply -f - >/dev/null; }
pod_yaml() {
  cat <<YAML
---
apiVersion: v1
kind: Pod
metadata: {name: $1}
spec:
  nodeSelector: {kubernetes.io/hostname: $NODE1}
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: localhost/sandbox-workload:e2e
    imagePullPolicy: Never
    command: ["sleep", "100000"]
    env:
    - {name: FROM_POD, value: pod-value}
    - {name: OVERRIDDEN, value: pod-value}
YAML
  [ -z "${2:-}" ] || printf '    resources: {limits: {memory: %s}}\n' "$2"
}
pod() { pod_yaml "$1" | k apply -f - >/dev/null; }
in_pod() { k exec "$1" -c main -- "${@:2}"; }
# agent_client DIR NS FULLNAME: what an operator replica holds to call an agent — a client
# certificate from the release's CA (DIR/client.crt, DIR/client.key; the CA key is read and
# deleted again) and the trust bundle for the agents' certificates (DIR/bundle.crt).
agent_client() {
  local dir=$1 ns=$2 full=$3
  kubectl -n "$ns" get secret "$full-serving" -o 'jsonpath={.data.ca\.crt}' | base64 -d >"$dir/bundle.crt"
  kubectl -n "$ns" get secret "$full-ca" -o 'jsonpath={.data.tls\.crt}' | base64 -d >"$dir/ca.crt"
  kubectl -n "$ns" get secret "$full-ca" -o 'jsonpath={.data.tls\.key}' | base64 -d >"$dir/ca.key"
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$dir/client.key" \
    -subj /CN=e2e -out "$dir/client.csr" 2>/dev/null
  printf 'extendedKeyUsage=clientAuth\nkeyUsage=digitalSignature\n' >"$dir/client.ext"
  openssl x509 -req -in "$dir/client.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" -days 1 \
    -extfile "$dir/client.ext" -out "$dir/client.crt" 2>/dev/null
  rm -f "$dir/ca.key"
}
