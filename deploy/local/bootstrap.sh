#!/usr/bin/env bash
# Make .venv with the package and its test extra, from nothing. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/../.."
if ! command -v java >/dev/null 2>&1; then
  echo "java not found: install a Java 17+ runtime (apt-get install openjdk-17-jre-headless)" >&2
  exit 1
fi
PY=${PYTHON:-python3}
"$PY" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11+ is required")'
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.installed-$(sha256sum pyproject.toml | cut -c1-16)
if [ ! -f "$stamp" ]; then
  echo "installing the package into .venv (first run only; log: .venv/install.log)..." >&2
  if ! { .venv/bin/python -m pip install --upgrade pip &&
         .venv/bin/python -m pip install -e '.[test]'; } > .venv/install.log 2>&1; then
    tail -n 30 .venv/install.log >&2
    exit 1
  fi
  touch "$stamp"
fi
