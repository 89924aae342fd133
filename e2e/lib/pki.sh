# Certificates and kubeconfigs of one cluster, made with openssl (sourced by e2e/cluster).
# shellcheck shell=bash

# ca NAME CN: a self-signed CA (EC P-256) in $PKI/NAME.{crt,key}.
ca() {
  openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$PKI/$1.key" 2>/dev/null
  openssl req -x509 -new -key "$PKI/$1.key" -subj "/CN=$2" -days 3650 -sha256 \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" \
    -out "$PKI/$1.crt" 2>/dev/null
}

# cert NAME SUBJECT EXTENSIONS [CA]: key + certificate signed by CA (default: the cluster CA).
cert() {
  local name=$1 subj=$2 ext=$3 ca=${4:-ca}
  openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$PKI/$name.key" 2>/dev/null
  openssl req -new -key "$PKI/$name.key" -subj "$subj" -out "$PKI/$name.csr" 2>/dev/null
  printf '%s\n' "$ext" >"$PKI/$name.ext"
  openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/$ca.crt" -CAkey "$PKI/$ca.key" -CAcreateserial \
    -days 3650 -sha256 -extfile "$PKI/$name.ext" -out "$PKI/$name.crt" 2>/dev/null
  rm -f "$PKI/$name.csr" "$PKI/$name.ext"
}

# kubeconfig FILE USER_CERT_NAME: a kubeconfig with embedded CA, client certificate and key.
kubeconfig() {
  local file=$1 name=$2 server=${3:-https://127.0.0.1:6443}
  mkdir -p "$(dirname "$file")"
  cat >"$file" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: $NODE_NAME
  cluster:
    server: $server
    certificate-authority-data: $(base64 -w0 "$PKI/ca.crt")
users:
- name: $name
  user:
    client-certificate-data: $(base64 -w0 "$PKI/$name.crt")
    client-key-data: $(base64 -w0 "$PKI/$name.key")
contexts:
- name: $NODE_NAME
  context: {cluster: $NODE_NAME, user: $name}
current-context: $NODE_NAME
EOF
  chmod 600 "$file"
}

make_pki() {
  mkdir -p "$PKI"
  chmod 700 "$PKI"
  local client="basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth"
  ca ca spo-e2e-ca
  # Request-header authentication of aggregated APIs (and of kube-controller-manager/scheduler).
  ca front-proxy-ca spo-e2e-front-proxy-ca
  cert front-proxy-client "/CN=front-proxy-client" "$client" front-proxy-ca

  cert apiserver "/CN=kube-apiserver" "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.$CLUSTER_DOMAIN,DNS:localhost,DNS:$NODE_NAME,IP:127.0.0.1,IP:$NODE_IP,IP:$KUBERNETES_SVC_IP"
  cert kubelet-serving "/CN=$NODE_NAME" "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=DNS:$NODE_NAME,DNS:localhost,IP:$NODE_IP,IP:127.0.0.1"
  cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" "$client"
  cert admin "/O=system:masters/CN=kubernetes-admin" "$client"
  cert kube-controller-manager "/CN=system:kube-controller-manager" "$client"
  cert kube-scheduler "/CN=system:kube-scheduler" "$client"
  cert kube-proxy "/CN=system:kube-proxy" "$client"
  cert kubelet "/O=system:nodes/CN=system:node:$NODE_NAME" "$client"

  # ServiceAccount token signing key (RS256).
  openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$PKI/sa.key" 2>/dev/null
  openssl pkey -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null

  kubeconfig "$KUBECONFIG_PATH" admin
  kubeconfig "$CONF/kube-controller-manager.kubeconfig" kube-controller-manager
  kubeconfig "$CONF/kube-scheduler.kubeconfig" kube-scheduler
  kubeconfig "$CONF/kube-proxy.kubeconfig" kube-proxy
  kubeconfig "$CONF/kubelet.kubeconfig" kubelet
}
