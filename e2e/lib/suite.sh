# Shared helpers of the e2e suites (sourced after `eval "$(e2e/cluster env)"`).
#
# Each suite makes its own preconditions true instead of assuming what ran before it:
#   fresh_namespace NS     the namespace of an earlier run gone (finalizers dropped if no operator
#                          is left to handle them), then created anew
#   no_release             no chart release of ours in any namespace, no operator or agent pod left
#   check NAME CMD...      runs one check; "ok"/"FAIL" with the output indented ("note:" lines
#                          of a passing check are shown)
#   summary                the "N passed, M failed" line every suite ends with; its exit status
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

# fresh_namespace NS: deletes NS of an earlier run (waits until it is gone), then creates it.
fresh_namespace() {
  local ns=$1
  if kubectl get namespace "$ns" >/dev/null 2>&1; then
    echo "removing namespace $ns left by an earlier run"
    kubectl -n "$ns" delete sbp --all --wait=false >/dev/null 2>&1 || true
    kubectl delete namespace "$ns" --wait=false >/dev/null 2>&1 || true
    if ! kubectl wait --for=delete "namespace/$ns" --timeout=30s >/dev/null 2>&1; then
      drop_finalizers "$ns"
      kubectl wait --for=delete "namespace/$ns" --timeout=150s >/dev/null 2>&1 ||
        refuse "namespace $ns is still Terminating after 3 min: kubectl get namespace $ns -o yaml"
    fi
  fi
  kubectl create namespace "$ns" >/dev/null
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
  kubectl wait --for=delete pods -A -l "$SPO_CHART_LABEL" --timeout=120s >/dev/null 2>&1 || true
  [ -z "$(kubectl get pods -A -l "$SPO_CHART_LABEL" -o name 2>/dev/null)" ] ||
    refuse "operator/agent pods are still running: kubectl get pods -A -l $SPO_CHART_LABEL"
}
