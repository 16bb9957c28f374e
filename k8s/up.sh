#!/usr/bin/env bash
# Start a single-node Kubernetes cluster from the binaries k8s/build.sh made: etcd, the control
# plane and kube-proxy as plain processes (no systemd, no control-plane images), the kubelet on a
# dedicated containerd (Debian's), bridge CNI, CoreDNS as a host process, and images imported
# into containerd from docker (nothing can be pulled). Idempotent: it first runs k8s/down.sh.
# Needs root. Prints the kubeconfig path; `export KUBECONFIG=/etc/k8s/admin.kubeconfig`.
#   IMAGES="overlaylab:0.1.0 ..." k8s/up.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
K8S=${K8S_VERSION:-1.34.4}
BIN=$(cd "$here/.." && pwd)/.cache/k8s/v$K8S/bin
ETC=/etc/k8s P=/etc/k8s/pki RUN=/run/k8s VAR=/var/lib/k8s LOG=/var/log/k8s
PAUSE=registry.k8s.io/pause:3.10
NODE=node1
IMAGES=${IMAGES:-}
export PATH=$BIN:$PATH

for b in etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy coredns pause; do
  [ -x "$BIN/$b" ] || { echo "missing $BIN/$b: run k8s/build.sh" >&2; exit 1; }
done
"$here/down.sh" >/dev/null 2>&1 || true
NODE_IP=$(ip -4 -o route get 1.1.1.1 | sed -E 's/.* src ([0-9.]+).*/\1/')
mkdir -p $ETC/cni/net.d $P $RUN $VAR $LOG /var/lib/overlaylab/results
chmod 1777 /var/lib/overlaylab/results
start() { # name, command...
  local name=$1; shift
  setsid "$@" >"$LOG/$name.log" 2>&1 < /dev/null &
  echo "$! $name" >> $RUN/pids
}
wait_for() { # what, seconds, command...
  local what=$1 t=$2; shift 2
  for _ in $(seq "$t"); do "$@" >/dev/null 2>&1 && return 0; sleep 1; done
  echo "timed out waiting for $what; logs in $LOG" >&2; return 1
}

# --- PKI and kubeconfigs ------------------------------------------------------------------------
cd $P
openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -keyout ca.key -out ca.crt -subj /CN=overlaylab-ca 2>/dev/null
sign() { # name, subject, extensions
  openssl req -newkey rsa:2048 -nodes -keyout "$1.key" -out "$1.csr" -subj "$2" 2>/dev/null
  openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 -out "$1.crt" \
    -extfile <(printf "%b" "$3") 2>/dev/null
}
sign apiserver /CN=kube-apiserver "subjectAltName=DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,DNS:localhost,IP:10.96.0.1,IP:127.0.0.1,IP:$NODE_IP\nextendedKeyUsage=serverAuth"
for u in "admin:/O=system:masters/CN=admin" "kubelet:/O=system:nodes/CN=system:node:$NODE" \
         "controller-manager:/CN=system:kube-controller-manager" "scheduler:/CN=system:kube-scheduler" \
         "kube-proxy:/CN=system:kube-proxy" "apiserver-kubelet-client:/O=system:masters/CN=kube-apiserver-kubelet-client"; do
  sign "${u%%:*}" "${u#*:}" "extendedKeyUsage=clientAuth"
done
openssl genrsa -out sa.key 2048 2>/dev/null && openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
for u in admin kubelet controller-manager scheduler kube-proxy; do
  cat > $ETC/$u.kubeconfig <<EOF
apiVersion: v1
kind: Config
clusters: [{name: overlaylab, cluster: {server: "https://$NODE_IP:6443", certificate-authority: $P/ca.crt}}]
users: [{name: $u, user: {client-certificate: $P/$u.crt, client-key: $P/$u.key}}]
contexts: [{name: overlaylab, context: {cluster: overlaylab, user: $u}}]
current-context: overlaylab
EOF
done
cd "$here"

# --- containerd, CNI, images ---------------------------------------------------------------------
cat > $ETC/containerd.toml <<EOF
version = 2
root = "$VAR/containerd"
state = "$RUN/containerd"
[grpc]
  address = "$RUN/containerd.sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE"
  # This machine's root may not lower oom_score_adj (the kubelet asks -998 for sandboxes):
  # clamp it to containerd's own, as for rootless setups.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$ETC/cni/net.d"
[plugins."io.containerd.internal.v1.opt"]
  path = "$VAR/containerd/opt"
EOF
cat > $ETC/cni/net.d/10-k8s.conflist <<'EOF'
{"cniVersion": "0.4.0", "name": "k8s-pods", "plugins": [
  {"type": "bridge", "bridge": "k8s0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.244.0.0/16", "gateway": "10.244.0.1"}]],
            "routes": [{"dst": "0.0.0.0/0"}]}},
  {"type": "portmap", "capabilities": {"portMappings": true}},
  {"type": "firewall"}]}
EOF
sysctl -qw net.ipv4.ip_forward=1
start containerd containerd --config $ETC/containerd.toml
wait_for containerd 30 ctr -a $RUN/containerd.sock version
ctr_() { ctr -a $RUN/containerd.sock -n k8s.io "$@"; }
# The sandbox image: our pause binary, alone in an image.
tmp=$(mktemp -d); cp "$BIN/pause" "$tmp/pause"
tar -C "$tmp" -c pause | docker import -c 'ENTRYPOINT ["/pause"]' - $PAUSE >/dev/null
rm -rf "$tmp"
for img in $PAUSE $IMAGES; do
  docker save "$img" | ctr_ images import --no-unpack=false - >/dev/null
done

# --- control plane ---------------------------------------------------------------------------------
start etcd etcd --data-dir $VAR/etcd --listen-client-urls http://127.0.0.1:2379 \
  --advertise-client-urls http://127.0.0.1:2379 --listen-peer-urls http://127.0.0.1:2380 --unsafe-no-fsync
wait_for etcd 30 curl -sf http://127.0.0.1:2379/health
start kube-apiserver kube-apiserver --etcd-servers=http://127.0.0.1:2379 --advertise-address=$NODE_IP \
  --bind-address=$NODE_IP --secure-port=6443 --service-cluster-ip-range=10.96.0.0/16 --allow-privileged=true \
  --tls-cert-file=$P/apiserver.crt --tls-private-key-file=$P/apiserver.key --client-ca-file=$P/ca.crt \
  --kubelet-client-certificate=$P/apiserver-kubelet-client.crt --kubelet-client-key=$P/apiserver-kubelet-client.key \
  --service-account-issuer=https://kubernetes.default.svc.cluster.local \
  --service-account-key-file=$P/sa.pub --service-account-signing-key-file=$P/sa.key \
  --authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction \
  --kubelet-preferred-address-types=InternalIP,Hostname
apicurl() { curl -sf --cacert $P/ca.crt --cert $P/admin.crt --key $P/admin.key "https://$NODE_IP:6443$1"; }
wait_for kube-apiserver 90 apicurl /readyz
kc=$ETC/controller-manager.kubeconfig
start kube-controller-manager kube-controller-manager --kubeconfig=$kc --authentication-kubeconfig=$kc \
  --authorization-kubeconfig=$kc --service-account-private-key-file=$P/sa.key --root-ca-file=$P/ca.crt \
  --cluster-signing-cert-file=$P/ca.crt --cluster-signing-key-file=$P/ca.key \
  --use-service-account-credentials=true --service-cluster-ip-range=10.96.0.0/16 --leader-elect=false \
  --bind-address=127.0.0.1
ks=$ETC/scheduler.kubeconfig
start kube-scheduler kube-scheduler --kubeconfig=$ks --authentication-kubeconfig=$ks \
  --authorization-kubeconfig=$ks --leader-elect=false --bind-address=127.0.0.1

# --- node ------------------------------------------------------------------------------------------
cat > $ETC/kubelet.yaml <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: unix://$RUN/containerd.sock
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
authentication: {anonymous: {enabled: false}, webhook: {enabled: true}, x509: {clientCAFile: $P/ca.crt}}
authorization: {mode: Webhook}
clusterDomain: cluster.local
clusterDNS: ["$NODE_IP"]
readOnlyPort: 0
rotateCertificates: false
protectKernelDefaults: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "200Mi", nodefs.available: "1%", nodefs.inodesFree: "1%", imagefs.available: "1%"}
maxPods: 250
serializeImagePulls: false
EOF
# NetworkChaos delay and loss need the kernel's netem qdisc: try it in a throwaway network
# namespace and label the node with the answer (the k8s runner refuses such plans up front on a
# node labelled absent).
netem=present
ip netns add overlaylab-netem-probe
tc -n overlaylab-netem-probe qdisc add dev lo root netem delay 1ms 2>/dev/null || netem=absent
ip netns del overlaylab-netem-probe
start kubelet kubelet --config $ETC/kubelet.yaml --kubeconfig $ETC/kubelet.kubeconfig \
  --hostname-override $NODE --node-ip $NODE_IP --root-dir /var/lib/kubelet --v=1 \
  --node-labels overlaylab.io/netem=$netem
cat > $ETC/kube-proxy.yaml <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $ETC/kube-proxy.kubeconfig}
mode: iptables
clusterCIDR: 10.244.0.0/16
hostnameOverride: $NODE
conntrack: {maxPerCore: 0}
EOF
start kube-proxy kube-proxy --config $ETC/kube-proxy.yaml
cat > $ETC/Corefile <<EOF
.:53 {
    bind $NODE_IP
    errors
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig $ETC/admin.kubeconfig overlaylab
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }
    cache 30
}
EOF
start coredns coredns -conf $ETC/Corefile
node_ready() { apicurl /api/v1/nodes/$NODE | python3 -c 'import json,sys; c={x["type"]:x["status"] for x in json.load(sys.stdin)["status"]["conditions"]}; sys.exit(c.get("Ready")!="True")'; }
wait_for "node $NODE Ready" 120 node_ready
echo "cluster up: node $NODE Ready at https://$NODE_IP:6443; KUBECONFIG=$ETC/admin.kubeconfig"
