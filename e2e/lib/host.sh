# Host side of the e2e cluster: prerequisites, network, cgroups and the cleanup of everything the
# cluster leaves on the machine (sourced by e2e/cluster).
# shellcheck shell=bash

# --- prerequisites ---------------------------------------------------------------------------

# Installs the Debian packages of HOST_PACKAGES that are missing (apt-get update once, then install).
# SPO_E2E_NO_INSTALL=1 skips this; the checks below then name what is missing.
install_host_packages() {
  local p missing=() out
  for p in $HOST_PACKAGES; do
    dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null | grep -qx installed || missing+=("$p")
  done
  [ ${#missing[@]} -gt 0 ] || return 0
  if [ -n "${SPO_E2E_NO_INSTALL:-}" ] || ! command -v apt-get >/dev/null; then return 0; fi
  log "installing host packages: ${missing[*]}"
  out=$(mktemp)
  if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"; } >"$out" 2>&1; then
    tail -n 5 "$out" >&2
    die "missing host prerequisite: could not install the Debian packages ${missing[*]} (apt-get install ${missing[*]}); full output in $out"
  fi
  rm -f "$out"
}

# check_host: one line for every missing prerequisite, then exits non-zero if any was missing.
check_host() {
  local bad=0 c
  [ "$(id -u)" = 0 ] || die "missing host prerequisite: root (the cluster mounts, creates interfaces and runs containers); run e2e/cluster as root"
  install_host_packages
  miss() { printf 'e2e: missing host prerequisite: %s\n' "$*" >&2; bad=1; }
  need() { command -v "$1" >/dev/null 2>&1 || miss "$1 (install: apt-get install $2)"; }
  need iptables iptables
  need ip iproute2
  need ss iproute2
  need openssl openssl
  need curl curl
  need tar tar
  need mount mount
  need nsenter util-linux
  need gcc gcc
  need promtool prometheus
  [ -x "$RUNC" ] || miss "$RUNC (install: apt-get install runc)"
  if [ ! -x /bin/busybox ] || ! file_is_static /bin/busybox; then miss "static /bin/busybox for the workload image (install: apt-get install busybox-static)"; fi
  command -v go >/dev/null 2>&1 || miss "go toolchain to build the cluster from the Go module proxy (install Go >= 1.24 and put it on PATH)"
  grep -qw overlay /proc/filesystems || miss "kernel overlay filesystem for containerd's overlayfs snapshotter (CONFIG_OVERLAY_FS; modprobe overlay, from kmod)"
  [ -c /dev/kmsg ] || miss "/dev/kmsg, which kubelet reads (kernel CONFIG_PRINTK; in a container: bind-mount /dev/kmsg)"
  [ -d /proc/sys/net/ipv4/conf ] || miss "IPv4 networking in the kernel"
  if [ "$(stat -fc %T /sys/fs/cgroup 2>/dev/null)" != cgroup2fs ]; then
    for c in cpu cpuacct cpuset memory pids; do
      cgroup_v1_has "$c" || miss "cgroup v1 controller '$c' is not mounted under /sys/fs/cgroup (mount -t cgroup -o $c cgroup /sys/fs/cgroup/$c)"
    done
  fi
  if command -v iptables >/dev/null 2>&1 && ! iptables -t nat -S >/dev/null 2>&1; then
    miss "a working iptables nat table for kube-proxy (kernel CONFIG_NF_NAT / nf_tables; 'iptables -t nat -S' fails)"
  fi
  if command -v ip >/dev/null 2>&1 && ! link_kinds_work; then
    miss "kernel bridge and veth network devices (CONFIG_BRIDGE, CONFIG_VETH)"
  fi
  [ "$bad" = 0 ] || exit 1
}

file_is_static() { ! grep -q 'ld-linux' <(head -c 4096 "$1" | tr -c '[:print:]' '\n'); }

cgroup_v1_has() { awk -v c="$1" '$3 == "cgroup" { n = split($4, o, ","); for (i = 1; i <= n; i++) if (o[i] == c) f = 1 } END { exit !f }' /proc/self/mounts; }

link_kinds_work() {
  ip link add spo-probe0 type bridge 2>/dev/null || return 1
  ip link del spo-probe0
  ip link add spo-probe1 type veth peer name spo-probe2 2>/dev/null || return 1
  ip link del spo-probe1
}

# port_owner PORT: "comm (pid N)" of the process listening on TCP PORT, empty when free.
port_owner() {
  local line
  line=$(ss -Hltnp "sport = :$1" 2>/dev/null | head -n 1)
  [ -n "$line" ] || return 0
  if [[ $line =~ users:\(\(\"([^\"]*)\",pid=([0-9]+) ]]; then
    echo "${BASH_REMATCH[1]} (pid ${BASH_REMATCH[2]}: $(tr '\0' ' ' <"/proc/${BASH_REMATCH[2]}/cmdline" 2>/dev/null | cut -c1-120))"
  else
    echo "an unknown process ($line)"
  fi
}

# check_ports: every port the cluster needs must be free (called after our leftovers are gone).
check_ports() {
  local p owner bad=0 line
  for p in $PORTS; do
    owner=$(port_owner "$p")
    [ -z "$owner" ] || { printf 'e2e: port %s is already in use by %s; stop that process or free the port\n' "$p" "$owner" >&2; bad=1; }
  done
  line=$(ss -Hlxp "src $CRI_SOCKET" 2>/dev/null | head -n 1)
  if [ -n "$line" ]; then
    printf 'e2e: %s is already served by another process: %s\n' "$CRI_SOCKET" "$(grep -o 'users:.*' <<<"$line")" >&2
    bad=1
  fi
  [ "$bad" = 0 ] || exit 1
}

# --- network -----------------------------------------------------------------------------------

# The node IP sits on a bridge without ports (this kernel has no dummy device); the service CIDR is
# routed to it so ClusterIP traffic that kube-proxy does not rewrite dies there instead of leaving
# the machine. Pods get the CNI bridge, routes to the service CIDR, the cluster's pods and the node
# IPs only (no default route); forwarding is on for the two bridges alone, and mangle rules drop
# anything forwarded from them to any other interface.
setup_network() {
  ip link add "$NODE_IF" type bridge
  sysctl -qw "net.ipv6.conf.$NODE_IF.disable_ipv6=1" 2>/dev/null || true
  ip addr add "$NODE_IP/32" dev "$NODE_IF"
  ip link set "$NODE_IF" up
  ip route add "$SERVICE_CIDR" dev "$NODE_IF"
  ip link add "$CNI_BRIDGE" type bridge
  ip addr add "$POD_GATEWAY/${POD_SUBNET#*/}" dev "$CNI_BRIDGE"
  ip link set "$CNI_BRIDGE" up
  echo 1 >"/proc/sys/net/ipv4/conf/$CNI_BRIDGE/forwarding"
  # Nodes 2.. (lib/nodes.sh) hang off the node bridge by veth: their IPs are on its link, their
  # pods routed through them; the host forwards between them and node 1's pods, nowhere else.
  ip route add "$NODE_NET" dev "$NODE_IF" src "$NODE_IP"
  # Pod subnets of nodes not (or no longer) there fail at once rather than leave the machine.
  ip route replace unreachable "$CLUSTER_CIDR"
  echo 1 >"/proc/sys/net/ipv4/conf/$NODE_IF/forwarding"
  echo 0 >"/proc/sys/net/ipv4/conf/$NODE_IF/send_redirects"
  iptables -t mangle -N "$MANGLE_CHAIN"
  iptables -t mangle -A "$MANGLE_CHAIN" -i "$CNI_BRIDGE" -o "$NODE_IF" -d "$CLUSTER_CIDR" -j RETURN
  iptables -t mangle -A "$MANGLE_CHAIN" -i "$CNI_BRIDGE" -o "$NODE_IF" -d "$NODE_NET" -j RETURN
  iptables -t mangle -A "$MANGLE_CHAIN" -i "$CNI_BRIDGE" ! -o "$CNI_BRIDGE" -j DROP
  iptables -t mangle -A "$MANGLE_CHAIN" -i "$NODE_IF" -o "$CNI_BRIDGE" -j RETURN
  iptables -t mangle -A "$MANGLE_CHAIN" -i "$NODE_IF" -o "$NODE_IF" -j RETURN
  iptables -t mangle -A "$MANGLE_CHAIN" -i "$NODE_IF" -j DROP
  iptables -t mangle -I FORWARD -j "$MANGLE_CHAIN"
}

cleanup_network() {
  local l
  for l in $(ip -o link show master "$CNI_BRIDGE" 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1); do
    ip link del "$l" 2>/dev/null || true
  done
  ip link del "$CNI_BRIDGE" 2>/dev/null || true
  ip link del "$NODE_IF" 2>/dev/null || true
  local r
  for r in $(ip route show type unreachable | awk '$1 ~ /^10\.244\./ {print $1}'); do
    ip route del unreachable "$r" 2>/dev/null || true
  done
  while iptables -t mangle -D FORWARD -j "$MANGLE_CHAIN" 2>/dev/null; do :; done
  iptables -t mangle -F "$MANGLE_CHAIN" 2>/dev/null || true
  iptables -t mangle -X "$MANGLE_CHAIN" 2>/dev/null || true
}

# Rules of kube-proxy (its own --cleanup) and the KUBE-* chains kubelet adds. Only this cluster
# runs Kubernetes on the machine, so every KUBE-* chain is ours.
cleanup_iptables() {
  local ipt t rule chain
  if [ -x "$BIN/kube-proxy" ] && { iptables-save; ip6tables-save; } 2>/dev/null | grep -q '^:KUBE-'; then
    "$BIN/kube-proxy" --cleanup >/dev/null 2>&1 || true
  fi
  for ipt in iptables ip6tables; do
    command -v "$ipt" >/dev/null || continue
    for t in filter nat mangle; do
      "$ipt" -t "$t" -S >/dev/null 2>&1 || continue
      while read -r rule; do
        eval "$ipt -t $t ${rule/#-A/-D}" 2>/dev/null || true
      done < <("$ipt" -t "$t" -S | grep -E '^-A [^K][^ ]* .*-j KUBE-' || true)
      for chain in $("$ipt" -t "$t" -S | awk '$1 == "-N" && $2 ~ /^KUBE-/ {print $2}'); do
        "$ipt" -t "$t" -F "$chain" 2>/dev/null || true
      done
      for chain in $("$ipt" -t "$t" -S | awk '$1 == "-N" && $2 ~ /^KUBE-/ {print $2}'); do
        "$ipt" -t "$t" -X "$chain" 2>/dev/null || true
      done
    done
  done
}

# --- cgroups -----------------------------------------------------------------------------------

# Mount points of every cgroup hierarchy (v1 controllers and the v2 unified one).
cgroup_mounts() { awk '$3 == "cgroup" || $3 == "cgroup2" {print $2}' /proc/self/mounts; }

# kubelet's cgroupRoot must exist in every hierarchy; cpuset children start empty on v1.
setup_cgroups() {
  local m d
  for m in $(cgroup_mounts); do
    d=$m$CGROUP_PARENT
    mkdir -p "$d"
    if [ -f "$m/cpuset.cpus" ] && [ -f "$d/cpuset.cpus" ]; then
      cat "$m/cpuset.cpus" >"$d/cpuset.cpus"
      cat "$m/cpuset.mems" >"$d/cpuset.mems"
    fi
    if [ -f "$m/cgroup.subtree_control" ] && [ "$m" = /sys/fs/cgroup ]; then
      for c in cpu cpuset memory pids io; do echo "+$c" >"$d/cgroup.subtree_control" 2>/dev/null || true; done
    fi
  done
}

# Pids of every process in the cluster's cgroup tree (all containers, whatever their pid namespace).
cgroup_pids() {
  local m
  for m in $(cgroup_mounts); do
    [ -d "$m$CGROUP_PARENT" ] || continue
    find "$m$CGROUP_PARENT" -name cgroup.procs -exec cat {} + 2>/dev/null
  done | sort -un
}

cleanup_cgroups() {
  local m
  for m in $(cgroup_mounts); do
    [ -d "$m$CGROUP_PARENT" ] || continue
    find "$m$CGROUP_PARENT" -depth -type d -exec rmdir {} \; 2>/dev/null || true
    [ ! -d "$m$CGROUP_PARENT" ] || log "warning: could not remove cgroup $m$CGROUP_PARENT (processes left in it?)"
  done
}

# --- containers, shims, mounts -----------------------------------------------------------------

# Containers in runc's k8s.io root whose bundle lives in our containerd state.
our_containers() {
  [ -d "$RUNC_ROOT" ] || return 0
  "$RUNC" --root "$RUNC_ROOT" list 2>/dev/null | awk -v s="$CONTAINERD_STATE/" 'NR > 1 && index($4, s) == 1 {print $1}'
}

# Pids of the containerd-shim-runc-v2 processes our containerd started: our binary, working in a
# bundle of our containerd state.
our_shims() {
  local p exe cwd
  for p in /proc/[0-9]*; do
    exe=$(readlink "$p/exe" 2>/dev/null) || continue
    [ "$exe" = "$BIN/containerd-shim-runc-v2" ] || continue
    cwd=$(readlink "$p/cwd" 2>/dev/null) || continue
    case $cwd in "$CONTAINERD_STATE"/*) echo "${p#/proc/}" ;; esac
  done
}

# Shim sockets (/run/containerd/s/...) named in our bundles; a SIGKILLed shim leaves them behind.
our_shim_sockets() {
  local f
  for f in "$CONTAINERD_STATE"/io.containerd.runtime.v2.task/*/*/address "$CONTAINERD_STATE"/io.containerd.runtime.v2.task/*/*/bootstrap.json; do
    [ -f "$f" ] || continue
    grep -o 'unix://[^"]*' "$f" | sed 's,^unix://,,' || true
  done | sort -u
}

kill_containers() {
  local id pids _
  for id in $(our_containers); do "$RUNC" --root "$RUNC_ROOT" kill --all "$id" KILL 2>/dev/null || true; done
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    pids=$(cgroup_pids)
    [ -n "$pids" ] || break
    # shellcheck disable=SC2086
    kill -KILL $pids 2>/dev/null || true
    sleep 0.2
  done
  for id in $(our_containers); do "$RUNC" --root "$RUNC_ROOT" delete --force "$id" 2>/dev/null || true; done
  for id in $(our_shims); do kill -KILL "$id" 2>/dev/null || true; done
}

# libcni's result cache (/var/lib/cni/results, not configurable through containerd): the entries
# whose network namespace lives in our state dir.
cleanup_cni_cache() {
  local f
  [ -d /var/lib/cni/results ] || return 0
  for f in /var/lib/cni/results/*; do
    [ -f "$f" ] && grep -q "\"netns\":\"$RUN/" "$f" && rm -f "$f"
  done
  rmdir /var/lib/cni/results /var/lib/cni 2>/dev/null || true
}

# Mount points at or below each of DIRS in the mountinfo on stdin, deepest first.
mounts_below() {
  awk '{print $5}' | while read -r m; do printf '%b\n' "$m"; done | sort -r -u |
    awk -v dirs="$*" 'BEGIN { n = split(dirs, d, " ") } { for (i = 1; i <= n; i++) if ($0 == d[i] || index($0, d[i] "/") == 1) { print; next } }'
}

# Mount points below our state dirs, deepest first.
our_mounts() { mounts_below "$STATE" "$RUN" </proc/self/mountinfo; }

cleanup_mounts() {
  local m _
  for _ in 1 2 3; do
    [ -n "$(our_mounts)" ] || return 0
    while read -r m; do
      umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
    done < <(our_mounts)
  done
  [ -z "$(our_mounts)" ] || log "warning: still mounted: $(our_mounts | tr '\n' ' ')"
}

# --- node agents' leftovers ---------------------------------------------------------------------
# Supervisors outlive the agent pods by design (and the cluster's cgroups): after a test cluster
# they are ours to end. Agent state dirs: the chart's default, e2e/suites/agent-daemonset's, and the
# host-run agents of e2e/suites/operator and e2e/suites/agent-cri (under /tmp/spo-*).
AGENT_STATE_DIRS="/var/lib/sandbox-agent /var/lib/sandbox-agent-e2e"

# Pids of sandbox-supervisor processes whose state dir (argv[1]) is one of the test agents'.
our_supervisors() {
  local p exe dir
  for p in /proc/[0-9]*; do
    exe=$(readlink "$p/exe" 2>/dev/null) || continue
    case ${exe##*/} in sandbox-supervisor*) ;; *) continue ;; esac
    dir=$(tr '\0' '\n' <"$p/cmdline" 2>/dev/null | sed -n 2p)
    case " $AGENT_STATE_DIRS " in *" $dir "*) echo "${p#/proc/}"; continue ;; esac
    case $dir in /tmp/spo-*) echo "${p#/proc/}" ;; esac
  done
}

cleanup_agents() {
  local pids d m _
  for _ in 1 2 3 4 5; do
    pids=$(our_supervisors)
    [ -n "$pids" ] || break
    # shellcheck disable=SC2086
    kill -KILL $pids 2>/dev/null || true
    sleep 0.2
  done
  [ -z "$(our_supervisors)" ] || log "warning: sandbox-supervisor processes left: $(our_supervisors | tr '\n' ' ')"
  for d in $AGENT_STATE_DIRS; do rm -rf "$d"; done
  # The agents' supervisor cgroup (created by them, empty now).
  for m in $(cgroup_mounts); do
    [ -d "$m/sandbox-supervisors" ] && rmdir "$m/sandbox-supervisors" 2>/dev/null || true
  done
}
