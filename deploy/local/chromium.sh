#!/usr/bin/env bash
# Install Debian's chromium for the web UI tests (Playwright drives it through its
# executable path: this machine cannot download Playwright's own browser builds).
# Idempotent: does nothing when /usr/bin/chromium exists. Needs root and apt-get (CI has
# both); elsewhere it only says how, and the browser tests skip.
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ -x /usr/bin/chromium ]; then
  exit 0
fi
. deploy/local/_apt.sh
apt_install required chromium "the web UI tests" chromium chromium
