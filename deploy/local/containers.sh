#!/usr/bin/env bash
# Install what the container tests (tests/test_containers.py) and deploy/containers/*
# need: podman with runc (crun refuses hybrid cgroup hosts), its network stack
# (netavark, aardvark-dns for names, iptables for published ports), and mmdebstrap for
# a local base image where no registry answers. Idempotent: does nothing when all are
# there. Needs root and apt-get (CI has both); elsewhere it only says how, and the
# container tests skip. An install that fails as root fails the run: CI must not skip.
set -euo pipefail
cd "$(dirname "$0")/../.."
missing=()
for tool in podman runc mmdebstrap netavark:/usr/lib/podman/netavark \
            aardvark-dns:/usr/lib/podman/aardvark-dns iptables; do
  name=${tool%%:*}
  path=${tool#*:}
  if [ "$path" = "$tool" ]; then
    command -v "$name" >/dev/null 2>&1 || missing+=("$name")
  else
    [ -x "$path" ] || missing+=("$name")
  fi
done
if [ ${#missing[@]} = 0 ]; then
  exit 0
fi
. deploy/local/_apt.sh
apt_install required "${missing[*]}" "the container tests" containers \
  podman runc netavark aardvark-dns iptables catatonit uidmap mmdebstrap
