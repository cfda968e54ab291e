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
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "no /usr/bin/chromium: the web UI tests will skip (as root: apt-get install chromium)" >&2
  exit 0
fi
mkdir -p .venv
echo "installing chromium for the web UI tests (first run only; log: .venv/chromium.log)..." >&2
if ! { apt-get update &&
       DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium; } \
     > .venv/chromium.log 2>&1; then
  tail -n 30 .venv/chromium.log >&2
  exit 1
fi
