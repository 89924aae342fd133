#!/usr/bin/env bash
# Builds the test cluster's binaries from the Go module proxy into $SPO_CACHE/bin.
# One wrapper module per upstream project (go install refuses modules with replace lines);
# each upstream `replace X => ./relative` line is rewritten to the published tag of X.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=versions.sh
. "$here/versions.sh"
SPO_CACHE=${SPO_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sandbox-process-operator}
BIN=$SPO_CACHE/bin
WORK=$SPO_CACHE/build
mkdir -p "$BIN" "$WORK"
export GOWORK=off GOFLAGS=-buildvcs=false CGO_ENABLED=0
log() { printf '[build %s] %s\n' "$(date +%T)" "$*" >&2; }

# stamp NAME VERSION: true when $BIN/NAME was built from VERSION already.
vfile() { echo "$BIN/$(dirname "$1")/.$(basename "$1").version"; }
stamp_ok() { [ -x "$BIN/$1" ] && [ "$(cat "$(vfile "$1")" 2>/dev/null)" = "$2" ]; }
stamp() { echo "$2" >"$(vfile "$1")"; }

# wrapper DIR MODULE VERSION STAGING_VERSION: writes DIR/go.mod requiring MODULE@VERSION, with
# every relative replace of MODULE's go.mod pointed at the published module of the same path.
wrapper() {
  local dir=$1 mod=$2 ver=$3 relver=$4 gomod
  mkdir -p "$dir"
  rm -f "$dir/go.mod" "$dir/go.sum"
  gomod=$(cd "$dir" && go mod download -json "$mod@$ver" | sed -n 's/.*"GoMod": "\(.*\)",*/\1/p')
  [ -f "$gomod" ] || { echo "cannot download $mod@$ver through the Go module proxy" >&2; return 1; }
  {
    echo "module spo.local/build/$(basename "$dir")"
    echo
    echo "go $(go env GOVERSION | sed 's/^go//; s/^\([0-9]*\.[0-9]*\).*/\1/')"
    echo
    echo "require $mod $ver"
    echo
    # Lines look like `\tpath => ./x` inside a block or `replace path => ../x` on one line.
    awk -v rv="$relver" '
      /^replace \(/ {inblk=1; next}
      inblk && /^\)/ {inblk=0; next}
      {
        line=$0; sub(/^replace[ \t]+/, "", line)
        if ((inblk || $1=="replace") && line ~ /=>[ \t]*\.\.?\//) {
          split(line, f, /[ \t]+/); p=f[1]; if (p=="") p=f[2]
          if (line ~ /FORBIDDEN/) next
          print "replace " p " => " p " " rv
        }
      }' "$gomod" | grep -v "FORBIDDEN" || true
  } >"$dir/go.mod"
  rm -f "$dir/go.sum"
}

# gobuild DIR VERSION FLAGS... -- PKGS...: resolves the packages' dependency graph then builds.
gobuild() {
  local dir=$1 ver=$2; shift 2
  local flags=() pkgs=() p
  while [ "$1" != -- ]; do flags+=("$1"); shift; done; shift
  pkgs=("$@")
  (cd "$dir"
   for p in "${pkgs[@]}"; do go get "$p@$ver" 2>&1 | grep -v '^go: \(added\|upgraded\|downgraded\|finding\|downloading\)' >&2 || true; done
   go build -trimpath "${flags[@]}" "${pkgs[@]}")
}

build_kubernetes() {
  local names="kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl kube-proxy" n missing=""
  for n in $names; do stamp_ok "$n" "$K8S_VERSION" || missing="$missing $n"; done
  [ -n "$missing" ] || return 0
  log "kubernetes $K8S_VERSION:$missing"
  local d=$WORK/kubernetes staging=${K8S_VERSION/v1./v0.}
  wrapper "$d" k8s.io/kubernetes "$K8S_VERSION" "$staging"
  local minor; minor=$(echo "$K8S_VERSION" | cut -d. -f2)
  local ld="-s -w" pkg
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld="$ld -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    ld="$ld -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  done
  local pkgs=()
  for n in $missing; do pkgs+=("k8s.io/kubernetes/cmd/$n"); done
  gobuild "$d" "$K8S_VERSION" -tags selinux,notest -ldflags "$ld" -o "$BIN/" -- "${pkgs[@]}"
  for n in $missing; do stamp "$n" "$K8S_VERSION"; done
}

build_etcd() {
  stamp_ok etcd "$ETCD_VERSION" && return 0
  log "etcd $ETCD_VERSION"
  local d=$WORK/etcd
  wrapper "$d" go.etcd.io/etcd/server/v3 "$ETCD_VERSION" "$ETCD_VERSION"
  gobuild "$d" "$ETCD_VERSION" -ldflags "-s -w" -o "$BIN/etcd" -- go.etcd.io/etcd/server/v3
  stamp etcd "$ETCD_VERSION"
}

build_containerd() {
  local n missing=""
  for n in containerd containerd-shim-runc-v2 ctr; do stamp_ok "$n" "$CONTAINERD_VERSION" || missing="$missing $n"; done
  [ -n "$missing" ] || return 0
  log "containerd $CONTAINERD_VERSION:$missing"
  local d=$WORK/containerd m=github.com/containerd/containerd/v2
  wrapper "$d" $m "$CONTAINERD_VERSION" "$CONTAINERD_VERSION"
  local pkgs=()
  for n in $missing; do pkgs+=("$m/cmd/$n"); done
  gobuild "$d" "$CONTAINERD_VERSION" -tags "no_btrfs no_devmapper no_zfs urfave_cli_no_docs" \
    -ldflags "-s -w -X $m/version.Version=$CONTAINERD_VERSION -X $m/version.Revision=upstream" \
    -o "$BIN/" -- "${pkgs[@]}"
  for n in $missing; do stamp "$n" "$CONTAINERD_VERSION"; done
}

build_helm() {
  stamp_ok helm "$HELM_VERSION" && return 0
  log "helm $HELM_VERSION"
  local d=$WORK/helm
  wrapper "$d" helm.sh/helm/v3 "$HELM_VERSION" "$HELM_VERSION"
  gobuild "$d" "$HELM_VERSION" \
    -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION -X helm.sh/helm/v3/internal/version.gitTreeState=clean" \
    -o "$BIN/helm" -- helm.sh/helm/v3/cmd/helm
  stamp helm "$HELM_VERSION"
}

# cosign for e2e/release/release (not part of `all`: only the release needs it). Its module has no
# relative replace lines, so `go install module@version` builds it as published.
build_cosign() {
  stamp_ok cosign "$COSIGN_VERSION" && return 0
  log "cosign $COSIGN_VERSION"
  (cd "$WORK" && GOBIN=$BIN go install -trimpath \
    -ldflags "-s -w -X sigs.k8s.io/release-utils/version.gitVersion=$COSIGN_VERSION" \
    "github.com/sigstore/cosign/v2/cmd/cosign@$COSIGN_VERSION")
  stamp cosign "$COSIGN_VERSION"
}

build_cni() {
  local n missing=""
  for n in bridge host-local loopback portmap; do stamp_ok "cni/$n" "$CNI_PLUGINS_VERSION" || missing="$missing $n"; done
  [ -n "$missing" ] || return 0
  log "cni plugins $CNI_PLUGINS_VERSION:$missing"
  local d=$WORK/cni m=github.com/containernetworking/plugins
  mkdir -p "$BIN/cni"
  wrapper "$d" $m "$CNI_PLUGINS_VERSION" "$CNI_PLUGINS_VERSION"
  gobuild "$d" "$CNI_PLUGINS_VERSION" -ldflags "-s -w" -o "$BIN/cni/" -- \
    $m/plugins/main/bridge $m/plugins/ipam/host-local $m/plugins/main/loopback $m/plugins/meta/portmap
  for n in $missing; do stamp "cni/$n" "$CNI_PLUGINS_VERSION"; done
}

# The pause image's binary, compiled from the Kubernetes source of the pinned version.
build_pause() {
  stamp_ok pause "$K8S_VERSION" && return 0
  log "pause $K8S_VERSION"
  local src
  src=$(cd "$WORK" && GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/.*"Dir": "\(.*\)",*/\1/p')
  gcc -Os -static -Wall -Werror -DVERSION="$K8S_VERSION" -o "$BIN/pause" "$src/build/pause/linux/pause.c"
  strip "$BIN/pause"
  stamp pause "$K8S_VERSION"
}

# kube-router for NetworkPolicy (`e2e/cluster up --network-policy` builds it; not part of `all`).
# The stamp holds the dependency bumps too, so changing one rebuilds.
build_kube_router() {
  local tag="$KUBE_ROUTER_VERSION $KUBE_ROUTER_DEP_BUMPS" b
  stamp_ok kube-router "$tag" && return 0
  log "kube-router $KUBE_ROUTER_VERSION (dependencies raised: $KUBE_ROUTER_DEP_BUMPS)"
  local d=$WORK/kube-router m=github.com/cloudnativelabs/kube-router/v2
  wrapper "$d" $m "$KUBE_ROUTER_VERSION" "$KUBE_ROUTER_VERSION"
  # Minimal version selection keeps the higher versions; gobuild's package `go get` never lowers them.
  # shellcheck disable=SC2086
  (cd "$d" && go get "$m@$KUBE_ROUTER_VERSION" $KUBE_ROUTER_DEP_BUMPS 2>&1 |
    grep -v '^go: \(added\|upgraded\|downgraded\|finding\|downloading\)' >&2 || true)
  for b in $KUBE_ROUTER_DEP_BUMPS; do
    grep -Eq "^[[:space:]]*${b%@*} ${b#*@}( |$)" "$d/go.mod" || { echo "kube-router: $b did not stick in $d/go.mod" >&2; return 1; }
  done
  gobuild "$d" "$KUBE_ROUTER_VERSION" \
    -ldflags "-s -w -X $m/pkg/version.Version=$KUBE_ROUTER_VERSION -X $m/pkg/version.BuildDate=1970-01-01T00:00:00Z" \
    -o "$BIN/kube-router" -- $m/cmd/kube-router
  stamp kube-router "$tag"
}

main() {
  local what=${1:-all}
  case $what in
    all) build_pause; build_cni; build_etcd; build_containerd; build_helm; build_kubernetes ;;
    *) "build_$what" ;;
  esac
}
main "$@"
