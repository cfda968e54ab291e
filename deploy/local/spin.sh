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
. deploy/local/_apt.sh
apt_install optional spin "the model check" spin spin gcc
