#!/usr/bin/env bash
# Remove what up.sh installed and leave nothing behind: every chaos object first (while the
# controller-manager can still run their finalizers: it undoes the faults), then the release, the
# chaos-mesh.org CRDs (helm keeps a chart's CRDs on uninstall) and the namespace. Safe to run
# when nothing is installed.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
HELM=${HELM:-$root/.venv/bin/helm}
export KUBECONFIG=${KUBECONFIG:-/etc/k8s/admin.kubeconfig}
py() { "$root/.venv/bin/python" -c "$1"; }
common='
import time
from kubernetes import client, config
config.load_kube_config()
ext, core, custom = client.ApiextensionsV1Api(), client.CoreV1Api(), client.CustomObjectsApi()
crds = [c for c in ext.list_custom_resource_definition().items if c.spec.group == "chaos-mesh.org"]
def objects():
    for c in crds:
        v = c.spec.versions[0].name
        for o in custom.list_cluster_custom_object("chaos-mesh.org", v, c.spec.names.plural)["items"]:
            yield c, v, o
def wait(done, s, what):
    deadline = time.monotonic() + s
    while not done():
        if time.monotonic() > deadline:
            return False
        time.sleep(1)
    return True
'
py "$common
for c, v, o in list(objects()):
    custom.delete_namespaced_custom_object('chaos-mesh.org', v, o['metadata']['namespace'], c.spec.names.plural, o['metadata']['name'])
if not wait(lambda: not list(objects()), 60, 'chaos objects'):
    for c, v, o in objects():  # no controller-manager to finalize them: let them go
        custom.patch_namespaced_custom_object('chaos-mesh.org', v, o['metadata']['namespace'], c.spec.names.plural,
                                              o['metadata']['name'], {'metadata': {'finalizers': None}})
"
"$HELM" uninstall chaos-mesh --namespace chaos-mesh --wait --timeout 2m 2>/dev/null
py "$common
for c in crds:
    ext.delete_custom_resource_definition(c.metadata.name)
try:
    core.delete_namespace('chaos-mesh')
except client.ApiException as e:
    if e.status != 404:
        raise
gone = lambda: not [c for c in ext.list_custom_resource_definition().items if c.spec.group == 'chaos-mesh.org'] \
    and 'chaos-mesh' not in {n.metadata.name for n in core.list_namespace().items}
if not wait(gone, 120, 'CRDs and namespace'):
    raise SystemExit('chaos mesh: CRDs or namespace still there after 120 s')
print(f'chaos mesh down ({len(crds)} CRDs removed)')
"
