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
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "no iptables/ip: the kernel fault tests will skip (as root: apt-get install iptables iproute2)" >&2
  exit 0
fi
mkdir -p .venv
echo "installing iptables for the kernel fault tests (first run only; log: .venv/netfilter.log)..." >&2
if ! { apt-get update &&
       DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends iptables iproute2; } \
     > .venv/netfilter.log 2>&1; then
  tail -n 10 .venv/netfilter.log >&2
  echo "could not install iptables: the kernel fault tests will skip" >&2
fi
exit 0
