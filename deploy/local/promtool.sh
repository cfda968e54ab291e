#!/usr/bin/env bash
# Install promtool (Debian's `prometheus` package) for the alert rules' unit tests:
# tests/test_alert_rules.py runs `promtool test rules deploy/prometheus/rules_test.yaml` and
# fails, never skips, without it (an alert nobody tested must not pass CI).
# Idempotent: does nothing when promtool is there. Needs root and apt-get (CI has both);
# elsewhere it says how, and that test fails.
set -euo pipefail
cd "$(dirname "$0")/../.."
if command -v promtool >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "no promtool: tests/test_alert_rules.py will fail (as root: $0)" >&2
  exit 0
fi
. deploy/local/_apt.sh
apt_install required promtool "the alert-rule test" promtool prometheus
