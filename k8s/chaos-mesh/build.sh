#!/usr/bin/env bash
# Build Chaos Mesh from the Go module proxy into .cache/chaos-mesh/<version>/ (outside git), the
# way k8s/build.sh builds Kubernetes: chaos-controller-manager, chaos-daemon and its helper cdh
# from the wrapper module here (go.mod pins the chaos-mesh module, its api module and the k8s.io
# versions its own go.mod replaces), pause from its hack/pause.c, and the chart with CRDs
# generated from that same source. Then two images on the project's debootstrap base (nothing is
# pulled): overlaylab/chaos-mesh (the controller-manager) and overlaylab/chaos-daemon (iptables,
# ipset and iproute2 from Debian; nsexec is the shim beside this script). Idempotent.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$here"
mod=github.com/chaos-mesh/chaos-mesh
version=$(awk -v m=$mod '$1 == "require" && $2 == m {print $3; exit}' go.mod)
: "${version:?go.mod does not require github.com/chaos-mesh/chaos-mesh}"
tag=${version##*-}                      # the commit: the images' tag
out=$root/.cache/chaos-mesh/$tag
mkdir -p "$out/bin"
# The proxy serves these modules, but the checksum database does not know chaos-mesh's own
# forks (fx-logr): go.sum, copied from chaos-mesh's, vouches for them.
export GOFLAGS="-trimpath -mod=mod" GONOSUMDB=github.com/chaos-mesh
# All with cgo (the daemon links chaos-driver's C client): one set of compiled packages for all.
export CGO_ENABLED=1
build() { # binary, package
  [ -x "$out/bin/$1" ] || { echo "building $1"; go build -ldflags "-s -w" -o "$out/bin/$1" "$mod/cmd/$2"; }
}
build chaos-controller-manager chaos-controller-manager
build chaos-daemon chaos-daemon
build cdh chaos-daemon-helper
src=$(go list -m -f '{{.Dir}}' $mod)
[ -x "$out/bin/pause" ] || gcc -Os -static -o "$out/bin/pause" "$src/hack/pause.c"
# The chart from the module's source; its CRDs generated as upstream does (`make config`:
# controller-gen over the api module) from the api module the binaries were built with, which
# the proxy serves only at a later commit than the main module's (it adds NetworkChaos
# partitionBehavior: with the older CRDs the API server prunes it and Chaos Mesh's webhook then
# refuses every status update of a NetworkChaos, "Cannot update chaos spec").
if [ ! -d "$out/chart" ]; then
  tmp=$(mktemp -d)
  cp -r "$src/helm/chaos-mesh" "$tmp/chart" && cp -r "$(go list -m -f '{{.Dir}}' $mod/api)" "$tmp/api"
  chmod -R u+w "$tmp"
  GOBIN=$out/bin go install sigs.k8s.io/controller-tools/cmd/controller-gen@v0.18.0
  rm "$tmp"/chart/crds/*
  (cd "$tmp/api" && "$out/bin/controller-gen" crd:ignoreUnexportedFields=true,crdVersions=v1 paths=./... \
     output:crd:artifacts:config="$tmp/chart/crds")
  mv "$tmp/chart" "$out/chart" && rm -rf "$tmp"
fi

"$root/scripts/debootstrap_base.sh" overlaylab-base:bookworm
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cp "$out/bin/chaos-controller-manager" "$out/bin/chaos-daemon" "$out/bin/cdh" "$out/bin/pause" nsexec \
  daemon.Dockerfile "$tmp/"
printf 'FROM overlaylab-base:bookworm\nCOPY chaos-controller-manager /usr/local/bin/\n' \
  | docker build -q -f - -t "overlaylab/chaos-mesh:$tag" "$tmp" >/dev/null
docker build -q -f "$tmp/daemon.Dockerfile" -t "overlaylab/chaos-daemon:$tag" "$tmp" >/dev/null
echo "chaos mesh $version: images overlaylab/chaos-mesh:$tag overlaylab/chaos-daemon:$tag, chart $out/chart"
