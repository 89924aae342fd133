# Shared settings and helpers of the e2e test cluster (sourced by e2e/cluster, e2e/images, e2e/suites/smoke).
# shellcheck shell=bash disable=SC2034

E2E_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=versions.sh
. "$E2E_DIR/lib/versions.sh"

# Binaries and image tarballs are cached outside the git tree and survive `down`.
SPO_CACHE=${SPO_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sandbox-process-operator}
BIN=$SPO_CACHE/bin
CNI_BIN=$BIN/cni
IMAGE_CACHE=$SPO_CACHE/images
KUBECONFIG_PATH=$SPO_CACHE/cluster/admin.kubeconfig
LAST_LOGS=$SPO_CACHE/cluster/last-logs

# Cluster state: removed by `down`.
STATE=/var/lib/spo-e2e          # etcd, kubelet, containerd root, pki, configs, logs
RUN=/run/spo-e2e                # pid files, containerd state (bundles, netns mounts)
PIDS=$RUN/pids
LOGS=$STATE/logs
PKI=$STATE/pki
CONF=$STATE/conf

# Network and cluster facts other code relies on.
NODE_NAME=spo-e2e
NODE_IF=spo-node0               # bridge without ports that carries the node IP (kernel has no dummy)
NODE_IP=10.245.0.1
CNI_BRIDGE=spo-cni0
CNI_NETWORK=spo-e2e
POD_SUBNET=10.244.0.0/24        # this node's pods (bridge + host-local)
POD_GATEWAY=10.244.0.1
CLUSTER_CIDR=10.244.0.0/16
SERVICE_CIDR=10.96.0.0/16
KUBERNETES_SVC_IP=10.96.0.1
CLUSTER_DOMAIN=cluster.local
SA_ISSUER=https://kubernetes.default.svc.cluster.local
CGROUP_PARENT=/spo-e2e          # kubelet cgroupRoot: every pod cgroup lives below it
MANGLE_CHAIN=SPO-E2E-FORWARD
NODE_NET=10.245.0.0/24          # node IPs: node K is 10.245.0.K (nodes 2.. live in netns spo-nK)
APISERVER_IP=10.245.0.1         # where nodes 2.. reach the API server (node 1's IP)

# What differs per node. These are node 1's; node_env K (lib/nodes.sh) sets node K's in a subshell.
NSTATE=$STATE                   # the node's own state: kubelet root, CNI IPAM, pod logs
NODE_SUFFIX=""                  # pid/log name suffix of the node's components ("@nK")
NODE_NETNS=""                   # network namespace of the node's components ("": the host's)
NODE_MNT=""                     # mount namespace file of the node's components ("": the host's)
NODE_CGROUP=""                  # cgroup of the node's processes, daemons included ("": none)
KUBELET_CGROUP_ROOT=$CGROUP_PARENT
KUBELET_CERT=kubelet            # client certificate (system:node:NAME) in $PKI
KUBELET_SERVING=kubelet-serving
HEALTH_ADDR=127.0.0.1           # where kubelet and kube-proxy serve healthz
API_URL=https://127.0.0.1:6443  # the API server as the node's components reach it

# containerd: our own root/state, the default sockets and the default runc root
# (/run/containerd/runc/k8s.io is where the node agent finds the containers).
CONTAINERD_ROOT=$STATE/containerd
CONTAINERD_STATE=$RUN/containerd
CRI_SOCKET=/run/containerd/containerd.sock
CRI_SOCKET_HOST=$CRI_SOCKET     # the node's CRI socket as this host sees it
RUNC=/usr/sbin/runc
RUNC_ROOT=/run/containerd/runc/k8s.io
CTR_NS=k8s.io

PAUSE_IMAGE=localhost/spo-e2e/pause:$K8S_VERSION
WORKLOAD_IMAGE=localhost/sandbox-workload:e2e

COMPONENTS="etcd containerd kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy"
NODE_COMPONENTS="containerd kubelet kube-proxy"   # what nodes 2.. run
# TCP ports the cluster listens on; all must be free before a fresh start.
PORTS="2379 2380 6443 10248 10249 10250 10256 10257 10259"

log() { printf '[e2e %s] %s\n' "$(date +%T)" "$*" >&2; }
die() { printf 'e2e: %s\n' "$*" >&2; exit 1; }

# starttime PID: the start time (field 22 of /proc/PID/stat) of a live, non-zombie process; it
# tells a pid apart from a reused one.
starttime() {
  local s
  s=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  s=${s##*) }
  # shellcheck disable=SC2086
  set -- $s
  case $1 in Z | X | x) return 1 ;; esac
  echo "${20}"
}

# pid_of NAME: prints the recorded pid of component NAME if that very process is still alive.
pid_of() {
  local f=$PIDS/$1.pid pid st
  [ -f "$f" ] || return 1
  read -r pid st <"$f" || return 1
  [ -n "$pid" ] && [ "$(starttime "$pid")" = "$st" ] || return 1
  echo "$pid"
}

# kctl ARGS...: kubectl against this cluster.
kctl() { "$BIN/kubectl" --kubeconfig "$KUBECONFIG_PATH" "$@"; }
