#!/usr/bin/env bash
# Install iptables (and iproute2) for the kernel-made fault tests (tests/chaos/
# test_kernel_faults.py: network namespaces, veth pairs, iptables rules), and strace for
# bench/peers.py's slow-disk column (fsyncs delayed by its syscall fault injection).
# Idempotent: does nothing when all three are there. Needs root and apt-get (CI has both);
# elsewhere, or when the install fails, it says so: those tests skip, slow-disk fails.
set -uo pipefail
cd "$(dirname "$0")/../.."
if command -v iptables >/dev/null 2>&1 && command -v ip >/dev/null 2>&1 &&
   command -v strace >/dev/null 2>&1; then
  exit 0
fi
. deploy/local/_apt.sh
apt_install optional "iptables/ip/strace" "the kernel fault tests" netfilter \
  iptables iproute2 strace
