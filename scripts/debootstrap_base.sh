#!/usr/bin/env bash
# Build a Debian base image without any registry: debootstrap a minimal bookworm with Python 3.11
# (the Dockerfile adds Java for Spark), then `docker import` it. Usage: scripts/debootstrap_base.sh [TAG]
# Needs root, debootstrap and a running dockerd; the Debian mirror is the only network it uses.
set -euo pipefail
tag=${1:-overlaylab-base:bookworm}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
if docker image inspect "$tag" >/dev/null 2>&1; then echo "$tag exists"; exit 0; fi
root=$(mktemp -d /tmp/overlaylab-rootfs.XXXXXX)
trap 'rm -rf "$root"' EXIT
debootstrap --variant=minbase \
  --include=python3.11,python3.11-venv,python3-distutils,python3-lib2to3,python3-pip-whl,python3-setuptools-whl,ca-certificates \
  bookworm "$root" "$mirror"
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
tar -C "$root" -c . | docker import -c 'ENV LANG=C.UTF-8' - "$tag"
echo "built $tag"
