#!/usr/bin/env bash
# The images the real-cluster tier imports into its containerd: overlaylab's (make image on a
# debootstrap base) and the Collector built by k8s/build.sh, as a one-binary image.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
K8S=${K8S_VERSION:-1.34.4}
OTELCOL=${OTELCOL_VERSION:-0.165.0}
bin=$root/.cache/k8s/v$K8S/bin
"$root/scripts/debootstrap_base.sh" overlaylab-base:bookworm
make -C "$root" image BASE_IMAGE=overlaylab-base:bookworm IMAGE=overlaylab:0.1.0
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cp "$bin/otelcol" "$tmp/otelcol"
tar -C "$tmp" -c otelcol | docker import -c 'USER 10001' -c 'ENTRYPOINT ["/otelcol"]' - "overlaylab/otelcol:$OTELCOL"
echo "images: overlaylab:0.1.0 overlaylab/otelcol:$OTELCOL"
