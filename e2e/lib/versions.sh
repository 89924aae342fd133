# shellcheck shell=bash disable=SC2034
# Versions of everything the test cluster is built from. Changing one rebuilds only that part.
K8S_VERSION=v1.34.4
ETCD_VERSION=v3.6.16
CONTAINERD_VERSION=v2.2.9
HELM_VERSION=v3.19.5
CNI_PLUGINS_VERSION=v1.9.1
# kube-router, as the NetworkPolicy enforcer only (`e2e/cluster up --network-policy`; firewall
# mode, no router or service proxy). The module proxy serves only v2.1.0 (2024-03); its known
# advisories concern the router and service proxy, which never run here (docs/development/testing.md).
# Its dependencies are raised past their CVE fixes; kube-router's own code stays as it was.
KUBE_ROUTER_VERSION=v2.1.0
KUBE_ROUTER_DEP_BUMPS="golang.org/x/net@v0.63.0 golang.org/x/crypto@v0.59.0 google.golang.org/grpc@v1.85.0 google.golang.org/protobuf@v1.36.12"
# Debian packages the demo and the tests need on the host (installed by e2e/prereqs and `e2e/cluster up`
# when missing): the cluster's, protoc (the CRI client of the agent), lua5.1 (the Argo CD health test),
# docker-registry and skopeo (e2e/release/release: a real registry on 127.0.0.1, images pushed to it), ipset
# (kube-router's NetworkPolicy sets).
# tmux and bash-completion: e2e/suites/cli completes `kubectl sandbox <TAB>` in an interactive bash.
# prometheus: promtool, which tests the chart's alert rules and dashboard queries
# (deploy/prometheus/test); its service is not wanted, only the binaries.
# gcc-aarch64-linux-gnu, libc6-dev-arm64-cross: e2e/release/release's arm64 binaries (linker, ring's C);
# qemu-user: runs them here to prove they start.
HOST_PACKAGES="runc iptables openssl busybox-static kmod util-linux mount iproute2 curl tar gcc libc6-dev protobuf-compiler lua5.1 docker-registry skopeo ipset tmux bash-completion prometheus gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user"
# cosign, which signs and verifies e2e/release/release's images, SBOM attestations, chart and plugin
# archives (built from its Go module, like helm).
COSIGN_VERSION=v2.6.5
# The registry e2e/release/release runs on 127.0.0.1 (plain HTTP; the cluster's containerd is told so).
REGISTRY_PORT=5123
# cert-manager's CRDs (from its Go module: its controller's own modules are not served to us, so
# e2e/suites/certs checks the chart's cert-manager resources against the CRDs, server-side, not a run).
CERT_MANAGER_VERSION=v1.21.2
# The Prometheus Operator's CRDs (from its Go module), which the chart's ServiceMonitor, PodMonitor
# and PrometheusRule are checked against (deploy/prometheus/test).
PROMETHEUS_OPERATOR_VERSION=v0.85.0
# mdBook, which builds the documentation book (docs/; .ci/book), installed by e2e/prereqs with
# cargo into $SPO_CACHE/tools (the upstream crate, no server or file watcher features).
MDBOOK_VERSION=0.5.4
# The Python client's dependencies in e2e/suites/clients' virtualenv (the official Kubernetes client,
# pytest, mypy for its type hints).
PY_KUBERNETES_VERSION=37.0.2
PYTEST_VERSION=9.0.2
MYPY_VERSION=2.4.1
