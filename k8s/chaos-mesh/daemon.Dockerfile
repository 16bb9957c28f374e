# chaos-daemon on the project's debootstrap base: the tools it runs in a pod's namespaces.
FROM overlaylab-base:bookworm
RUN apt-get update && apt-get install -y --no-install-recommends iptables ipset iproute2 util-linux procps \
 && rm -rf /var/lib/apt/lists/*
COPY chaos-daemon cdh pause nsexec /usr/local/bin/
