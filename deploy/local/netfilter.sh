#!/usr/bin/env bash
# Install iptables (and iproute2) for the kernel-made fault tests (tests/chaos/
# test_kernel_faults.py: network namespaces, veth pairs, iptables rules). Idempotent: does
# nothing when both are there. Needs root and apt-get (CI has both); elsewhere, or when
# the install fails, it says so and those tests skip.
set -uo pipefail
cd "$(dirname "$0")/../.."
if command -v iptables >/dev/null 2>&1 && command -v ip >/dev/null 2>&1; then
  exit 0
fi
. deploy/local/_apt.sh
apt_install optional "iptables/ip" "the kernel fault tests" netfilter iptables iproute2
