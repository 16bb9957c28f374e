#!/usr/bin/env bash
# Stop the single-node cluster k8s/up.sh started and leave nothing behind: pods and their
# containerd shims, the daemons, kube-proxy's iptables rules, mounts, the k8s0 bridge and the
# state directories. Safe to run when nothing is up (the start of up.sh runs it too).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
K8S=${K8S_VERSION:-1.34.4}
BIN=$(cd "$here/.." && pwd)/.cache/k8s/v$K8S/bin
RUN=/run/k8s VAR=/var/lib/k8s
export PATH=$BIN:$PATH

stop_pid() { kill "$1" 2>/dev/null; for _ in $(seq 20); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.25; done; kill -9 "$1" 2>/dev/null; }
# The kubelet first, so that it restarts nothing; then the pods' containers and sandboxes.
if [ -f $RUN/pids ]; then
  grep ' kubelet$' $RUN/pids | while read -r pid _; do stop_pid "$pid"; done
fi
if [ -S $RUN/containerd.sock ]; then
  for ns in k8s.io; do
    for t in $(ctr -a $RUN/containerd.sock -n $ns tasks ls -q 2>/dev/null); do
      ctr -a $RUN/containerd.sock -n $ns tasks kill -s SIGKILL "$t" >/dev/null 2>&1
    done
    sleep 1
    for t in $(ctr -a $RUN/containerd.sock -n $ns tasks ls -q 2>/dev/null); do
      ctr -a $RUN/containerd.sock -n $ns tasks delete -f "$t" >/dev/null 2>&1
    done
    for c in $(ctr -a $RUN/containerd.sock -n $ns containers ls -q 2>/dev/null); do
      ctr -a $RUN/containerd.sock -n $ns containers delete "$c" >/dev/null 2>&1
    done
  done
fi
# The daemons, in reverse order of start.
if [ -f $RUN/pids ]; then
  tac $RUN/pids | while read -r pid _; do stop_pid "$pid"; done
  rm -f $RUN/pids
fi
# Shims outlive containerd: any left for our state dir go too.
pkill -9 -f "containerd-shim.*$RUN/containerd" 2>/dev/null
pkill -9 -f "containerd-shim-runc-v2 -namespace k8s.io" 2>/dev/null
[ -x "$BIN/kube-proxy" ] && kube-proxy --cleanup >/dev/null 2>&1
for m in $(findmnt -rno TARGET | grep -E "^(/var/lib/kubelet|$RUN|$VAR)" | sort -r); do umount -l "$m" 2>/dev/null; done
ip link del k8s0 2>/dev/null
for n in $(ip netns list 2>/dev/null | awk '/^cni-/ {print $1}'); do ip netns del "$n"; done
# The kubelet's and the CNI plugins' iptables chains and the rules that jump to them (the pods
# were killed under the CNI plugins, so no CNI DEL removed their rules); docker's stay.
if iptables-save 2>/dev/null | grep -qE "KUBE-|CNI-"; then
  iptables-save | grep -vE "KUBE-|CNI-" | iptables-restore
fi
rm -rf $VAR /var/lib/kubelet /var/lib/cni/networks/k8s-pods $RUN /etc/k8s
echo "cluster down"
