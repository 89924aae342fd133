# Nodes 2..N of the test cluster (sourced by e2e/cluster): more kubelets on this machine, each with
# its own containerd, kube-proxy, state dirs, cgroup, network namespace and mount namespace, joined
# to node 1's control plane, as kind's nodes are without Docker.
# shellcheck shell=bash
#
# Node K (K >= 2):
#   name spo-e2e-K, IP 10.245.0.K on eth0 of netns spo-nK (veth spo-vK on the host bridge spo-node0),
#   pods 10.244.(K-1).0/24 on its own spo-cni0 bridge inside that netns;
#   state $STATE/nodes/nK, $RUN/nodes/nK; cgroup $CGROUP_PARENT/nodes/nK (daemons in .../system,
#   pods in .../kubepods);
#   a mount namespace ($RUN/ns/nK.mnt) where /run/containerd, the agents' state dirs, /var/lib/cni
#   and /var/log/containers are the node's own directories: the chart's hostPath volumes, the CRI
#   socket and runc's root resolve to node K's there, as on a machine of its own. Everything else
#   (binaries, /sys/fs/cgroup, the pid namespace) is shared with the host, as hostPID pods see it.
# Routes: the host routes each node's pod /24 to its node IP; nodes route the cluster CIDR to the
# host (10.245.0.1). Nothing has a default route off the machine.

NODE_DIRS="/run/containerd /var/lib/sandbox-agent /var/lib/sandbox-agent-e2e /var/lib/cni /var/log/containers"

# node_dir DIR: where node K keeps DIR, as the host sees it: below its /run (lost at power-off) or
# its state dir (its disk).
node_dir() { case $1 in /run/*) echo "$NRUN/dirs$1" ;; *) echo "$NSTATE/dirs$1" ;; esac; }

# node_env K: the per-node variables of lib/common.sh set to node K's (call in a subshell).
node_env() {
  local k=$1
  NODE_NAME=spo-e2e-$k
  NODE_IP=10.245.0.$k
  POD_SUBNET=10.244.$((k - 1)).0/24
  POD_GATEWAY=10.244.$((k - 1)).1
  NSTATE=$STATE/nodes/n$k
  NRUN=$RUN/nodes/n$k
  CONF=$NSTATE/conf
  CONTAINERD_ROOT=$NSTATE/containerd
  CONTAINERD_STATE=$NRUN/containerd
  CRI_SOCKET_HOST=$NRUN/dirs$CRI_SOCKET
  NODE_SUFFIX=@n$k
  NODE_NETNS=spo-n$k
  NODE_VETH=spo-v$k
  NODE_MNT=$RUN/ns/n$k.mnt
  NODE_CGROUP=$CGROUP_PARENT/nodes/n$k
  KUBELET_CGROUP_ROOT=$NODE_CGROUP
  KUBELET_CERT=kubelet-n$k
  KUBELET_SERVING=kubelet-serving-n$k
  HEALTH_ADDR=$NODE_IP
  API_URL=https://$APISERVER_IP:6443
  STARTED=""
}

# Node indexes (2..) that have state on this machine, ascending.
node_indexes() {
  local d
  for d in "$STATE"/nodes/n*; do [ -d "$d" ] && echo "${d##*/n}"; done | sort -n
}

# How many nodes the cluster has (1 + the nodes with state).
node_count() { echo $((1 + $(node_indexes | wc -l))); }

# join_cgroup CGROUP PID: PID moved to CGROUP in every hierarchy (created as needed; v1 cpuset
# levels get their parent's cpus and mems, which a new cpuset lacks).
join_cgroup() {
  local m d rel part
  for m in $(cgroup_mounts); do
    d=$m
    rel=${1#/}
    for part in ${rel//\// }; do
      d=$d/$part
      mkdir -p "$d"
      if [ -f "$d/cpuset.cpus" ] && [ -z "$(cat "$d/cpuset.cpus")" ]; then
        cat "$(dirname "$d")/cpuset.cpus" >"$d/cpuset.cpus"
        cat "$(dirname "$d")/cpuset.mems" >"$d/cpuset.mems"
      fi
    done
    [ -z "${2:-}" ] || echo "$2" >"$d/cgroup.procs"
  done
}

# have_cert NAME: $PKI/NAME.crt is a certificate with its key (a run killed while signing leaves
# an empty file behind).
have_cert() { openssl x509 -noout -in "$PKI/$1.crt" 2>/dev/null && [ -s "$PKI/$1.key" ]; }

node_pki() {
  local client="basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth"
  # Nodes boot in parallel and signing writes the CA's serial file: one signer at a time.
  (
    flock 8
    have_cert "$KUBELET_SERVING" || cert "$KUBELET_SERVING" "/CN=$NODE_NAME" "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=DNS:$NODE_NAME,DNS:localhost,IP:$NODE_IP,IP:127.0.0.1"
    have_cert "$KUBELET_CERT" || cert "$KUBELET_CERT" "/O=system:nodes/CN=system:node:$NODE_NAME" "$client"
  ) 8>"$PKI/.sign.lock"
  kubeconfig "$CONF/kubelet.kubeconfig" "$KUBELET_CERT" "$API_URL"
  kubeconfig "$CONF/kube-proxy.kubeconfig" kube-proxy "$API_URL"
}

# in_node CMD...: CMD in node K's network namespace (the host's mounts, so /proc/sys/net is the node's).
in_node() { nsenter --net="/run/netns/$NODE_NETNS" -- "$@"; }

node_network() {
  ip netns add "$NODE_NETNS"
  ip link add "$NODE_VETH" type veth peer name eth0 netns "$NODE_NETNS"
  sysctl -qw "net.ipv6.conf.$NODE_VETH.disable_ipv6=1" 2>/dev/null || true
  ip link set "$NODE_VETH" master "$NODE_IF" up
  in_node sh -c 'for f in /proc/sys/net/ipv6/conf/*/disable_ipv6; do echo 1 >"$f"; done' 2>/dev/null || true
  ip -n "$NODE_NETNS" link set lo up
  ip -n "$NODE_NETNS" addr add "$NODE_IP/${NODE_NET#*/}" dev eth0
  ip -n "$NODE_NETNS" link set eth0 up
  ip -n "$NODE_NETNS" link add "$CNI_BRIDGE" type bridge
  ip -n "$NODE_NETNS" addr add "$POD_GATEWAY/${POD_SUBNET#*/}" dev "$CNI_BRIDGE"
  ip -n "$NODE_NETNS" link set "$CNI_BRIDGE" up
  # The node routes like a machine whose only neighbours are the other nodes: the cluster's pods
  # through node 1 (the host, which knows every node's /24), services stay on the link.
  ip -n "$NODE_NETNS" route add "$CLUSTER_CIDR" via "$APISERVER_IP" dev eth0
  ip -n "$NODE_NETNS" route add "$SERVICE_CIDR" dev eth0
  in_node sysctl -qw net.ipv4.ip_forward=1 net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0
  # kube-proxy's rules for pod-to-service traffic on the same bridge, and NetworkPolicy between pods
  # of one node, need bridged frames in iptables.
  [ -d /proc/sys/net/bridge ] || modprobe br_netfilter 2>/dev/null ||
    die "node $NODE_NAME: the kernel's br_netfilter is missing (modprobe br_netfilter; CONFIG_BRIDGE_NETFILTER)"
  in_node sysctl -qw net.bridge.bridge-nf-call-iptables=1
  ip route replace "$POD_SUBNET" via "$NODE_IP" dev "$NODE_IF"
}

# Host-wide parts every node needs, made once before nodes boot in parallel: the directory of the
# mount namespace files, which must sit on a private mount (or a namespace could hold itself), and
# the cgroup above the nodes'.
nodes_prepare() {
  mkdir -p "$RUN/ns"
  mountpoint -q "$RUN/ns" || mount --bind "$RUN/ns" "$RUN/ns"
  mount --make-private "$RUN/ns"
  join_cgroup "$CGROUP_PARENT/nodes"
}

# node_mountns: node K's mount namespace, kept by a bind mount of its nsfs file at $NODE_MNT. It is
# private (nothing propagates either way), and drops its copies of the host's cluster mounts (node
# 1's overlays and pod netns, other nodes' namespace files), which would otherwise keep them alive.
node_mountns() {
  local d src
  touch "$NODE_MNT"
  unshare --mount="$NODE_MNT" --propagation private true
  nsenter --mount="$NODE_MNT" -- cat /proc/self/mountinfo | mounts_below "$STATE" "$RUN" /run/netns |
    while read -r m; do nsenter --mount="$NODE_MNT" -- umount -l "$m" 2>/dev/null || true; done
  for d in $NODE_DIRS; do
    src=$(node_dir "$d")
    mkdir -p "$d" "$src"
    nsenter --mount="$NODE_MNT" -- mount --bind "$src" "$d" || die "node $NODE_NAME: bind mount of $src on $d failed"
  done
}

# The images of node 1 that the cluster's pods use (the operator's and agent's from e2e/deploy,
# test images), copied into node K's containerd when it lacks them: there is no registry to pull
# from, and a DaemonSet pod on a new node would otherwise wait out ErrImageNeverPull back-offs.
node_images() {
  local img tar
  tar=$(mktemp "$NRUN/image.XXXXXX")
  for img in $(kctl get pods -A -o jsonpath='{range .items[*]}{range .spec.containers[*]}{.image}{"\n"}{end}{end}' 2>/dev/null | sort -u); do
    case $img in localhost/*) ;; *) continue ;; esac
    # grep without -q: with pipefail an early exit of grep could fail the pipeline through ctr's SIGPIPE.
    "$BIN/ctr" -a "$CRI_SOCKET_HOST" -n "$CTR_NS" images ls -q 2>/dev/null | grep -xF "$img" >/dev/null && continue
    "$BIN/ctr" -a "$CRI_SOCKET" -n "$CTR_NS" images ls -q 2>/dev/null | grep -xF "$img" >/dev/null || continue
    # Through a file: `ctr images import -` cuts a piped export short ("short read").
    "$BIN/ctr" -a "$CRI_SOCKET" -n "$CTR_NS" images export "$tar" "$img" >/dev/null 2>&1 &&
      "$BIN/ctr" -a "$CRI_SOCKET_HOST" -n "$CTR_NS" images import --platform "linux/amd64" --snapshotter overlayfs "$tar" >/dev/null 2>&1 &&
      "$BIN/ctr" -a "$CRI_SOCKET_HOST" -n "$CTR_NS" images label "$img" io.cri-containerd.pinned=pinned >/dev/null 2>&1 ||
      log "warning: could not copy image $img to node $NODE_NAME"
  done
  rm -f "$tar"
}

# The Node object with its pod CIDR before the kubelet registers (the kubelet adopts an existing
# Node of its name), so the controller manager's allocator cannot hand it another range.
node_object() {
  kctl get node "$NODE_NAME" >/dev/null 2>&1 && return 0
  kctl apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Node
metadata:
  name: $NODE_NAME
spec:
  podCIDR: $POD_SUBNET
  podCIDRs: [$POD_SUBNET]
EOF
}

# node_boot K: starts node K (its state on disk kept from before, /run wiped), waits for Ready.
node_boot() {
  local c t0=$SECONDS
  node_env "$1"
  mkdir -p "$NSTATE" "$NRUN" "$CONF"
  node_pki
  write_configs
  join_cgroup "$NODE_CGROUP/system"
  node_network
  node_mountns
  start containerd
  wait_until "containerd$NODE_SUFFIX" "containerd of $NODE_NAME to answer on $CRI_SOCKET_HOST" healthy containerd
  # The tarballs node 1's `e2e/images builtin` made (its images are built once per `up`).
  SPO_E2E_IMPORT_SOCKETS=$CRI_SOCKET_HOST "$E2E_DIR/images" import "$IMAGE_CACHE/pause.tar" "$IMAGE_CACHE/sandbox-workload.tar" >/dev/null ||
    die "importing the builtin images into containerd of $NODE_NAME failed"
  node_images
  node_object
  start kubelet
  start kube-proxy
  for c in kubelet kube-proxy; do
    wait_until "$c$NODE_SUFFIX" "$c of $NODE_NAME to report healthy" healthy "$c"
  done
  # After a power-off shorter than the controller manager's node-monitor grace (50 s) the Node
  # never left Ready, as with a quick reboot: the kubelet's healthz above is the boot's own sign.
  wait_until "kubelet$NODE_SUFFIX" "node $NODE_NAME to become Ready" node_ready
  # The cluster enforces NetworkPolicy (lib/netpol.sh): this node too.
  if netpol_running; then node_netpol_start; fi
  log "node $NODE_NAME Ready ($((SECONDS - t0))s)"
}

# Pids of every process of node K: its cgroup tree (daemons, shims, containers) and whatever runs in
# its mount namespace outside that tree (the agent's supervisors, which it moves to a cgroup of
# their own so that they outlive the agent).
node_pids() {
  local m ns p
  for m in $(cgroup_mounts); do
    [ -d "$m$NODE_CGROUP" ] || continue
    find "$m$NODE_CGROUP" -name cgroup.procs -exec cat {} + 2>/dev/null
  done
  if mountpoint -q "$NODE_MNT" 2>/dev/null; then
    ns=$(stat -Lc %i "$NODE_MNT")
    for p in /proc/[0-9]*; do
      [ "$(readlink "$p/ns/mnt" 2>/dev/null)" != "mnt:[$ns]" ] || echo "${p#/proc/}"
    done
  fi
  return 0
}

# node_off: node K loses power: every process ends by SIGKILL at once, its link goes down (callers
# time out, as with a dead machine), its /run and its network namespace are gone. Its disk (state
# dir: containerd's images and snapshots, the kubelet's root, the agent's ledger) stays.
node_off() {
  local m pids c _
  [ -n "$NODE_CGROUP" ] && [ -n "$NODE_NETNS" ] || die "node_off without node_env"
  # The link first, so that no socket of the node says goodbye (a dead machine sends no FIN/RST);
  # then everything stopped at once, so nothing (a supervisor seeing its child die) writes to the
  # node's disk what a power loss would not let it write; then killed.
  ip link set "$NODE_VETH" down 2>/dev/null || true
  pids=$(node_pids | sort -un)
  # shellcheck disable=SC2086
  [ -z "$pids" ] || kill -STOP $pids 2>/dev/null || true
  for m in $(cgroup_mounts); do
    [ ! -f "$m$NODE_CGROUP/cgroup.kill" ] || echo 1 >"$m$NODE_CGROUP/cgroup.kill" 2>/dev/null || true
  done
  for _ in $(seq 1 20); do
    pids=$(node_pids | sort -un)
    [ -n "$pids" ] || break
    # shellcheck disable=SC2086
    kill -KILL $pids 2>/dev/null || true
    sleep 0.1
  done
  [ -z "$(node_pids)" ] || log "warning: node $NODE_NAME: processes left: $(node_pids | sort -un | tr '\n' ' ')"
  for c in $NODE_COMPONENTS kube-router; do rm -f "$PIDS/$c$NODE_SUFFIX.pid"; done
  umount "$NODE_MNT" 2>/dev/null || umount -l "$NODE_MNT" 2>/dev/null || true
  ip netns del "$NODE_NETNS" 2>/dev/null || true
  ip link del "$NODE_VETH" 2>/dev/null || true
  # Unreachable, not deleted: without a route the node's pod subnet would follow the default
  # route off the machine, and a connection the API server held to a pod there (the aggregated
  # API's) was answered from outside (404s) instead of failing.
  ip route replace unreachable "$POD_SUBNET" 2>/dev/null || true
  for m in $(cgroup_mounts); do
    [ -d "$m$NODE_CGROUP" ] && find "$m$NODE_CGROUP" -depth -type d -exec rmdir {} \; 2>/dev/null || true
  done
  rm -rf "$NRUN"
}

# node_remove K: node K gone for good: powered off, its state removed, its Node object deleted.
node_remove() {
  node_env "$1"
  node_off
  [ ! -f "$KUBECONFIG_PATH" ] || kctl delete node "$NODE_NAME" --ignore-not-found --wait=false --request-timeout=10s >/dev/null 2>&1 || true
  rm -rf "$NSTATE" "$PKI/$KUBELET_CERT".* "$PKI/$KUBELET_SERVING".*
}

node_healthy() {
  local c
  node_env "$1"
  for c in $NODE_COMPONENTS; do pid_of "$c$NODE_SUFFIX" >/dev/null && healthy "$c" || return 1; done
  if netpol_running; then pid_of "kube-router$NODE_SUFFIX" >/dev/null || return 1; fi
  node_ready
}

# Leftovers of nodes whose state dir is gone (a run killed in the middle of removing one).
cleanup_stray_nodes() {
  local n
  for n in $(ip netns list 2>/dev/null | awk '$1 ~ /^spo-n[0-9]+$/ {print $1}'); do ip netns del "$n" 2>/dev/null || true; done
  for n in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1 | grep -E '^spo-v[0-9]+$'); do ip link del "$n" 2>/dev/null || true; done
}
