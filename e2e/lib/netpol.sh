# NetworkPolicy for the test cluster (sourced by e2e/cluster): kube-router in firewall mode only
# (no router, no service proxy, no CNI: the bridge CNI and kube-proxy stay), one per node, in the
# node's network namespace. `e2e/cluster up --network-policy` starts it on every node (building it
# the first time), `--no-network-policy` stops it and removes its rules; a node booted while it
# runs gets one too. Notes on its behaviour: docs/development/testing.md.
# shellcheck shell=bash

argv_kube_router() {
  # It finds its Node by $NODE_NAME before its hostname; traffic from an address of the node's own
  # network namespace to a pod is always allowed (kubelet probes).
  echo env NODE_NAME="$NODE_NAME" "$BIN/kube-router" --kubeconfig "$CONF/kube-router.kubeconfig" \
    --hostname-override "$NODE_NAME" --run-firewall=true --run-router=false --run-service-proxy=false \
    --run-loadbalancer=false --enable-cni=false --enable-pod-egress=false \
    --service-cluster-ip-range "$SERVICE_CIDR" --metrics-port=0 --health-port=0
}

# Whether the cluster enforces NetworkPolicy: node 1's kube-router runs.
netpol_running() { pid_of kube-router >/dev/null; }

# kube-router has programmed the node's filter table (it has no health port here: that port would
# also serve /debug/pprof to every pod).
kube_router_synced() {
  if [ -n "$NODE_NETNS" ]; then in_node iptables -w -t filter -S KUBE-ROUTER-FORWARD; else iptables -w -t filter -S KUBE-ROUTER-FORWARD; fi >/dev/null 2>&1
}

# Its identity (client certificate CN system:kube-router, read-only RBAC) and the node's kubeconfig.
netpol_identity() {
  (
    flock 8
    have_cert kube-router || cert kube-router "/CN=system:kube-router" "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth"
  ) 8>"$PKI/.sign.lock"
  kubeconfig "$CONF/kube-router.kubeconfig" kube-router "$API_URL"
}

netpol_rbac() {
  kctl apply -f - >/dev/null <<'EOF'
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: spo-e2e:kube-router
rules:
# All of kube-router's informers start whatever the mode; it writes nothing in firewall mode.
- apiGroups: [""]
  resources: [pods, namespaces, nodes, services, endpoints]
  verbs: [get, list, watch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [list, watch]
- apiGroups: [networking.k8s.io]
  resources: [networkpolicies]
  verbs: [list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: spo-e2e:kube-router
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: spo-e2e:kube-router}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: system:kube-router}
EOF
}

# node_netpol_start: kube-router on the current node (node_env or node 1), waits until it has
# programmed the node.
node_netpol_start() {
  netpol_identity
  start kube-router
  wait_until "kube-router$NODE_SUFFIX" "kube-router of $NODE_NAME to program its filter chains" kube_router_synced
}

# kube_router_cleanup: what kube-router left in the current network namespace, after it exited
# (`kube-router --cleanup-config` cannot: in v2.1.0 its policy cleanup runs on an empty controller,
# then it panics): its jumps at the top of filter INPUT/FORWARD/OUTPUT, its chains, its ipsets.
kube_router_cleanup() {
  local c r chains
  command -v iptables >/dev/null || return 0
  for c in INPUT FORWARD OUTPUT; do
    iptables -w -t filter -S "$c" 2>/dev/null | grep -F -- '--comment "kube-router netpol - ' | sed 's/^-A /-D /' |
      while IFS= read -r r; do eval "iptables -w -t filter $r" || true; done || true
  done
  chains=$(iptables -w -t filter -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^(KUBE-ROUTER-(INPUT|FORWARD|OUTPUT)|KUBE-NWPLCY-|KUBE-POD-FW-)/ {print $2}')
  for c in $chains; do iptables -w -t filter -F "$c" 2>/dev/null || true; done # they jump to each other
  for c in $chains; do iptables -w -t filter -X "$c" 2>/dev/null || true; done
  if command -v ipset >/dev/null; then
    ipset list -n 2>/dev/null | grep -E '^(KUBE-SRC-|KUBE-DST-|TMP-)[A-Z2-7]{16}$' | while IFS= read -r r; do ipset destroy "$r" || true; done || true
  fi
  return 0
}

# set_network_policy on|off: kube-router on every node, or on none (its rules removed).
set_network_policy() {
  local k
  if [ "$1" = on ]; then
    bash "$E2E_DIR/lib/build.sh" kube_router
    command -v ipset >/dev/null || die "ipset is missing (apt-get install ipset): kube-router needs it"
    netpol_rbac
    netpol_running || node_netpol_start
    for k in $(node_indexes); do
      (node_env "$k"; pid_of "kube-router$NODE_SUFFIX" >/dev/null || node_netpol_start)
    done
    log "NetworkPolicy enforced on $(node_count) node(s) (kube-router $KUBE_ROUTER_VERSION)"
  else
    for k in $(node_indexes); do
      (node_env "$k"; stop "kube-router$NODE_SUFFIX"; in_node bash -c "$(declare -f kube_router_cleanup); kube_router_cleanup")
    done
    stop kube-router
    kube_router_cleanup
  fi
}
