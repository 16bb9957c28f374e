#!/usr/bin/env bash
# Install the Chaos Mesh that build.sh made on the real cluster k8s/up.sh started: its two images
# imported into the cluster's containerd, then its own chart (CRDs included) into namespace
# chaos-mesh: one controller-manager, chaos-daemon on the node talking to the cluster's
# containerd; no dashboard, DNS server or Prometheus. Waits until both are ready. Needs root.
# It first runs down.sh: helm installs a chart's CRDs but never upgrades them.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
version=$(awk '$1 == "require" && $2 == "github.com/chaos-mesh/chaos-mesh" {print $3; exit}' "$here/go.mod")
: "${version:?go.mod does not require github.com/chaos-mesh/chaos-mesh}"
tag=${version##*-}
out=$root/.cache/chaos-mesh/$tag
HELM=${HELM:-$root/.venv/bin/helm}
export KUBECONFIG=${KUBECONFIG:-/etc/k8s/admin.kubeconfig}
[ -d "$out/chart" ] || { echo "no Chaos Mesh build in $out: run make chaos-build" >&2; exit 1; }
"$here/down.sh" >/dev/null
for img in overlaylab/chaos-mesh:$tag overlaylab/chaos-daemon:$tag; do
  docker save "$img" | ctr -a /run/k8s/containerd.sock -n k8s.io images import - >/dev/null
done
"$HELM" upgrade --install chaos-mesh "$out/chart" --namespace chaos-mesh --create-namespace \
  --set images.registry=docker.io --set images.tag="$tag" \
  --set controllerManager.image.repository=overlaylab/chaos-mesh \
  --set chaosDaemon.image.repository=overlaylab/chaos-daemon \
  --set controllerManager.replicaCount=1 --set controllerManager.leaderElection.enabled=false \
  --set chaosDaemon.runtime=containerd --set chaosDaemon.socketPath=/run/k8s/containerd.sock \
  --set dashboard.create=false --set dnsServer.create=false \
  --wait --timeout 5m
echo "chaos mesh $version up in namespace chaos-mesh"
