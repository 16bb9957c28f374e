#!/usr/bin/env bash
# Build the single-node cluster's binaries from the Go module proxy into .cache/k8s/<version>/bin
# (outside git): kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kube-proxy and
# etcd from the wrapper module k8s/build (go.mod pins k8s.io/kubernetes and maps every staging
# module to its published v0.x tag), CoreDNS with `go install`, and our own pause binary.
# Idempotent: Go's build cache makes a warm rebuild quick; finished binaries are kept.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
K8S=${K8S_VERSION:-1.34.4}
COREDNS=${COREDNS_VERSION:-v1.14.7}
bin=$here/../.cache/k8s/v$K8S/bin
mkdir -p "$bin"
export CGO_ENABLED=0 GOFLAGS=-trimpath

minor=$(echo "$K8S" | cut -d. -f2)
stamp="-s -w"
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  # upstream's version stamping (hack/lib/version.sh): helm checks charts' kubeVersion against it
  stamp="$stamp -X $p.gitVersion=v$K8S -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
  stamp="$stamp -X $p.gitCommit=0000000000000000000000000000000000000000 -X $p.buildDate=2026-01-01T00:00:00Z"
done

cd "$here/build"
for c in kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy; do
  [ -x "$bin/$c" ] || { echo "building $c"; go build -ldflags "$stamp" -o "$bin/$c" "k8s.io/kubernetes/cmd/$c"; }
done
[ -x "$bin/etcd" ] || { echo "building etcd"; go build -ldflags "-s -w" -o "$bin/etcd" go.etcd.io/etcd/server/v3; }
[ -x "$bin/coredns" ] || { echo "building coredns"; GOBIN=$bin go install -ldflags "-s -w" "github.com/coredns/coredns@$COREDNS"; }
[ -x "$bin/pause" ] || { echo "building pause"; gcc -Os -static -o "$bin/pause" "$here/pause.c" && strip "$bin/pause"; }


# The Collector: its own builder (ocb) generates the sources from k8s/otelcol/builder-config.yaml;
# we resolve and build them with plain `go get`/`go build` (ocb's `go mod tidy` also wants the
# components' test dependencies, one of which the proxy does not serve).
OTELCOL=${OTELCOL_VERSION:-0.165.0}
if [ ! -x "$bin/otelcol" ]; then
  echo "building otelcol $OTELCOL"
  GOBIN=$bin go install "go.opentelemetry.io/collector/cmd/builder@v$OTELCOL"
  work=$(mktemp -d)
  sed "s#output_path: ./_build#output_path: $work/src#" "$here/otelcol/builder-config.yaml" > "$work/config.yaml"
  "$bin/builder" --config "$work/config.yaml" --skip-get-modules --skip-compilation
  (cd "$work/src" && go mod init overlaylab.local/otelcol \
     && go get $(awk '/gomod:/ {print $3 "@" $4}' "$work/config.yaml") \
     && go build -mod=mod -ldflags "-s -w" -o "$bin/otelcol" .)
  rm -rf "$work"
fi
"$bin/kube-apiserver" --version && "$bin/otelcol" validate --help >/dev/null && echo "otelcol ok"
