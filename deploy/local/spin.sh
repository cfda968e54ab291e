#!/usr/bin/env bash
# Install SPIN (Debian's `spin` package; it compiles its verifiers with gcc) for the model
# check of election and fencing (model/check, tests/test_model.py). Idempotent: does
# nothing when spin is there. Needs root and apt-get (CI has both); elsewhere, or when the
# install fails, it says so and the model tests skip.
set -uo pipefail
cd "$(dirname "$0")/../.."
if command -v spin >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "no spin: the model check will skip (as root: apt-get install spin gcc)" >&2
  exit 0
fi
mkdir -p .venv
echo "installing spin for the model check (first run only; log: .venv/spin.log)..." >&2
if ! { apt-get update &&
       DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends spin gcc; } \
     > .venv/spin.log 2>&1; then
  tail -n 10 .venv/spin.log >&2
  echo "could not install spin: the model check will skip" >&2
fi
exit 0
