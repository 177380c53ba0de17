#!/usr/bin/env bash
# The MCP tests install real servers from the npm registry (run with node) and from PyPI
# (each in its own virtualenv): node, npm, python3 and the venv module must be present.
set -euo pipefail
missing=()
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
command -v python3 >/dev/null 2>&1 || missing+=(python3)
if command -v python3 >/dev/null 2>&1; then
  # `python3 -m venv` needs ensurepip (Debian ships it in python3-venv).
  python3 -c "import venv, ensurepip" 2>/dev/null || missing+=(python3-venv)
fi
if [ "${#missing[@]}" -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
node --version >/dev/null
python3 -c "import venv, ensurepip"
